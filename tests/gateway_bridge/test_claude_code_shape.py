"""Claude Code's calls, verbatim, through the gateway to an Anthropic channel
(native pass-through: the vendor must receive the body, the path's
``?beta=true`` and the ``anthropic-beta`` / ``anthropic-version`` headers as
Claude Code sent them) — answers well-formed, and billed with the token
classes the SDK reported (cache writes and reads included)."""

from __future__ import annotations

import base64
import json

import anthropic

from tests.gateway_bridge import claude_code as cc
from tests.gateway_bridge.vendor_fixtures import KEY_A, captured, channel


def vendor_client(tenant, gw) -> anthropic.Anthropic:
    """Claude Code with ``ANTHROPIC_AUTH_TOKEN`` (``Authorization: Bearer``)."""
    return anthropic.Anthropic(
        api_key=None,
        auth_token=tenant.raw,
        base_url=gw.url,
        max_retries=0,
        default_headers=cc.HEADERS,
    )


def sent_to_vendor(vendor) -> tuple[dict, dict]:
    """(the last request the vendor received, its body parsed)."""
    request = captured(vendor)[-1]
    return request, json.loads(base64.b64decode(request["body_base64"]))


def test_claude_code_streams_through_an_anthropic_channel_unchanged_and_billed_as_reported(
    vendor, tenant, start_gateway
):
    # Given an Anthropic channel serving "claude-code-model" as the vendor's claude-sim
    channel(vendor.base_url, "anthropic", "claude-code-model", "claude-sim")
    gw = start_gateway()
    client = vendor_client(tenant, gw)
    body = cc.request(cc.first_turn(), model="claude-code-model")

    # When Claude Code opens a session: the same prefix twice
    summaries = []
    for _ in range(2):
        with client.beta.messages.create(
            **body, betas=cc.BETAS, extra_query=cc.BETA_QUERY, stream=True
        ) as stream:
            summaries.append(cc.check_stream(list(stream)))
        request, sent = sent_to_vendor(vendor)
        # Then the vendor got Claude Code's call as it was sent, model id aside
        assert request["path"] == "/v1/messages?beta=true"
        assert request["headers"]["anthropic-beta"] == ",".join(cc.BETAS)
        assert request["headers"]["anthropic-version"] == "2023-06-01"
        assert request["headers"]["x-api-key"] == "…" + KEY_A[-4:]
        assert "authorization" not in request["headers"]  # the tenant's key stays here
        assert sent == {**body, "model": "claude-sim", "stream": True}

    first, second = summaries
    # Thinking, then one tool_use block per tool the ask names, in parallel
    assert first["blocks"] == ["thinking", "tool_use", "tool_use", "tool_use"]
    assert {"thinking_delta", "signature_delta", "input_json_delta"} <= set(first["deltas"])
    assert first["stop_reason"] == "tool_use"
    # The system and tools (cached for an hour) and the ask were written, then read.
    write = cc.reported(first)[2]
    assert write > 0 and cc.reported(first)[1] == 0
    assert cc.reported(second)[1] == write and cc.reported(second)[2] == 0
    assert first["start_usage"].cache_creation.ephemeral_1h_input_tokens > 0

    # And each call is billed with the four classes the SDK reported
    events = gw.emitter.wait_for(2)
    assert [cc.billed(e) for e in events] == [cc.reported(s) for s in summaries]
    assert all(e["stream"] and e["status_code"] == 200 for e in events)


def test_claude_code_tool_turn_with_images_and_earlier_thinking_passes_through(
    vendor, tenant, start_gateway
):
    channel(vendor.base_url, "anthropic", "claude-code-model", "claude-sim")
    gw = start_gateway()
    client = vendor_client(tenant, gw)
    opening = cc.request(cc.first_turn(), model="claude-code-model", max_tokens=16000)
    answer = client.beta.messages.create(**opening, betas=cc.BETAS, extra_query=cc.BETA_QUERY)
    turns = cc.tool_turns(answer.model_dump(exclude_none=True))

    # When the next turn sends the answer back (thinking signed, tool_use) with
    # three tool results, one of them a picture, through the SDK's stream helper
    body = cc.request([*cc.uncached(cc.first_turn()), *turns], model="claude-code-model")
    with client.beta.messages.stream(**body, betas=cc.BETAS, extra_query=cc.BETA_QUERY) as stream:
        events = list(stream)
        final = stream.get_final_message()

    # Then the vendor received every block as sent
    request, sent = sent_to_vendor(vendor)
    assert request["path"] == "/v1/messages?beta=true"
    assert request["headers"]["anthropic-beta"] == ",".join(cc.BETAS)
    assert sent == {**body, "model": "claude-sim", "stream": True}
    # And the answer is well-formed: it quotes the results in a text block
    raw = [e for e in events if e.type in cc.RAW_EVENTS]
    summary = cc.check_stream(raw)
    assert summary["blocks"] == [b.type for b in final.content]
    assert final.content[-1].type == "text" and final.stop_reason == "end_turn"
    assert cc.reported(summary) == (
        final.usage.input_tokens,
        final.usage.cache_read_input_tokens or 0,
        final.usage.cache_creation_input_tokens or 0,
        final.usage.output_tokens,
    )
    usage = gw.emitter.wait_for(2)[-1]
    assert cc.billed(usage) == cc.reported(summary)
    # The first turn's cached prefix (tools, system) is read again.
    assert final.usage.cache_read_input_tokens > 0


def test_claude_code_counts_tokens_on_an_anthropic_channel_with_tools_and_system(
    vendor, tenant, start_gateway
):
    channel(vendor.base_url, "anthropic", "claude-code-model", "claude-sim")
    gw = start_gateway()
    client = vendor_client(tenant, gw)
    body = cc.request(cc.first_turn(), model="claude-code-model")
    del body["max_tokens"], body["metadata"]

    counted = client.beta.messages.count_tokens(**body, betas=cc.BETAS, extra_query=cc.BETA_QUERY)
    # The gateway counts (tools, system blocks, the picture) itself: free, no vendor call.
    assert captured(vendor) == []

    del body["context_management"]  # not a field of the plain client's count_tokens
    plain = client.messages.count_tokens(**body)
    fewer = client.messages.count_tokens(**{**body, "tools": cc.TOOLS[:1]})
    assert counted.input_tokens == plain.input_tokens > fewer.input_tokens > 100


def test_claude_code_discovers_the_gateways_models(vendor, tenant, start_gateway):
    # Claude Code lists /v1/models (anthropic-version, its bearer token) for its picker.
    channel(vendor.base_url, "anthropic", "claude-code-model", "claude-sim")
    gw = start_gateway()
    listed = vendor_client(tenant, gw).models.list(limit=1000)
    names = [m.id for m in listed.data]
    assert "claude-code-model" in names and "sim-chat-small" in names
    assert all(m.type == "model" for m in listed.data)
