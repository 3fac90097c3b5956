"""Claude Code's calls, verbatim, to a model an OpenAI-protocol node serves
(and, with the plain client, a Gemini channel): translated by the gateway
(the betas, cache marks, metadata and Claude Code's own headers harmless
there), answered as a well-formed Anthropic stream, and billed with the token
classes the SDK reported."""

from __future__ import annotations

import base64
import json

import anthropic
import pytest

from tests.gateway_bridge import claude_code as cc
from tests.gateway_bridge.conftest import NODE_TOKEN
from tests.gateway_bridge.vendor_fixtures import PNG, channel, post
from usage.models import CatalogModel

MODEL = "sim-chat-small"


@pytest.fixture
def gw(tenant, start_gateway):
    """The gateway, with the node's model taking pictures (Claude Code sends them)."""
    CatalogModel.objects.filter(name=MODEL).update(modality="vision")
    return start_gateway()


def node_requests(sim) -> list[dict]:
    status, raw = post(
        sim.base_url, "/admin/requests", None, {"Authorization": f"Bearer {NODE_TOKEN}"}, "GET"
    )
    assert status == 200, raw
    return json.loads(raw)["requests"]


def last_chat(sim) -> dict:
    request = node_requests(sim)[-1]
    assert request["path"] == "/v1/chat/completions"
    return json.loads(base64.b64decode(request["body_base64"]))


def test_claude_code_streams_through_translation_to_an_openai_node(sim, tenant, gw):
    client = anthropic.Anthropic(
        api_key=None, auth_token=tenant.raw, base_url=gw.url, max_retries=0,
        default_headers=cc.HEADERS,
    )  # fmt: skip
    body = cc.request(cc.first_turn(), model=MODEL, max_tokens=4096)
    body["thinking"]["budget_tokens"] = 1024

    summaries = []
    for _ in range(2):
        with client.beta.messages.create(
            **body, betas=cc.BETAS, extra_query=cc.BETA_QUERY, stream=True
        ) as stream:
            summaries.append(cc.check_stream(list(stream)))
    first, second = summaries
    # The node's three parallel calls: three tool_use blocks, each streamed as JSON deltas.
    assert first["blocks"] == ["tool_use", "tool_use", "tool_use"]
    assert first["stop_reason"] == "tool_use"
    assert "input_json_delta" in first["deltas"]

    # The node got an OpenAI chat call: system blocks, tools, the picture, thinking as
    # effort; Claude Code's betas and own headers stay at the gateway.
    headers = node_requests(sim)[-1]["headers"]
    assert not {"anthropic-beta", "anthropic-version", "x-claude-code-session-id"} & set(headers)
    chat = last_chat(sim)
    assert chat["model"] == MODEL and chat["stream"] is True
    assert chat["messages"][0]["role"] == "system"
    assert "official CLI" in json.dumps(chat["messages"][0])
    assert [t["function"]["name"] for t in chat["tools"]] == [t["name"] for t in cc.TOOLS]
    assert any(
        part.get("type") == "image_url"
        for message in chat["messages"]
        for part in (message["content"] if isinstance(message["content"], list) else [])
    )
    assert chat.get("reasoning_effort")

    # Billed as the SDK reported; the node's prefix cache shows as a cache read.
    events = gw.emitter.wait_for(2)
    assert [cc.billed(e) for e in events] == [cc.reported(s) for s in summaries]
    assert cc.reported(second)[1] > 0


def test_claude_code_tool_turn_with_a_picture_result_is_translated(sim, tenant, gw):
    client = anthropic.Anthropic(
        api_key=tenant.raw, base_url=gw.url, max_retries=0, default_headers=cc.HEADERS
    )
    opening = cc.request(cc.first_turn(), model=MODEL, max_tokens=4096)
    opening["thinking"]["budget_tokens"] = 1024
    answer = client.beta.messages.create(**opening, betas=cc.BETAS, extra_query=cc.BETA_QUERY)
    sent_back = answer.model_dump(exclude_none=True)
    assert [b["name"] for b in sent_back["content"]] == ["Glob", "Bash", "Read"]
    turns = cc.tool_turns(sent_back)

    body = {**opening, "messages": [*cc.uncached(cc.first_turn()), *turns]}
    with client.beta.messages.stream(**body, betas=cc.BETAS, extra_query=cc.BETA_QUERY) as stream:
        events = [e for e in stream if e.type in cc.RAW_EVENTS]
        final = stream.get_final_message()

    summary = cc.check_stream(events)
    assert summary["blocks"] == [b.type for b in final.content]
    assert summary["stop_reason"] == final.stop_reason
    # The node got the three results as tool messages, the picture (a tool
    # message is text) in the user message after them.
    chat = last_chat(sim)
    tools = [m for m in chat["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tools] == [
        "tests/test_parser.py\ntests/test_lexer.py",
        "exit code 1: 2 failed, 40 passed",
        "The screenshot of the failing run:",
    ]
    assert [m["tool_call_id"] for m in tools] == [
        b["id"] for b in sent_back["content"] if b["type"] == "tool_use"
    ]
    after = chat["messages"][-1]
    assert chat["messages"][-2]["role"] == "tool"
    assert after["role"] == "user"
    assert after["content"][1]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    usage = gw.emitter.wait_for(2)[-1]
    assert cc.billed(usage) == cc.reported(summary)


def test_claude_code_counts_tokens_of_a_translated_model(sim, tenant, gw):
    client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
    body = cc.request(cc.first_turn(), model=MODEL)
    del body["max_tokens"], body["metadata"]

    counted = client.beta.messages.count_tokens(**body, betas=cc.BETAS, extra_query=cc.BETA_QUERY)
    del body["context_management"]  # not a field of the plain client's count_tokens
    fewer = client.messages.count_tokens(**{**body, "tools": cc.TOOLS[:1]})
    assert counted.input_tokens > fewer.input_tokens > 0


@pytest.mark.parametrize("model", ["claude-code-model", MODEL, "gemini-code-model"])
def test_the_plain_client_with_an_api_key_streams_claude_codes_call(
    model, vendor, sim, tenant, start_gateway
):
    # ANTHROPIC_API_KEY (x-api-key) and the plain client: no betas, no ?beta=true.
    channel(vendor.base_url, "anthropic", "claude-code-model", "claude-sim")
    channel(vendor.base_url, "gemini", "gemini-code-model", "gemini-sim")
    CatalogModel.objects.filter(name=MODEL).update(modality="vision")
    gw = start_gateway()
    client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
    body = cc.request(cc.first_turn(), model=model, max_tokens=4096)
    body["thinking"]["budget_tokens"] = 1024
    del body["context_management"]  # a beta field: the plain client has no such argument

    with client.messages.stream(**body) as stream:
        events = [e for e in stream if e.type in cc.RAW_EVENTS]
        final = stream.get_final_message()

    summary = cc.check_stream(events)
    assert summary["blocks"] == [b.type for b in final.content]
    assert final.content[-1].type == "tool_use" and final.stop_reason == "tool_use"
    # Only the Anthropic channel answers with a thinking block here.
    assert (final.content[0].type == "thinking") == (model == "claude-code-model")
    assert (
        cc.billed(gw.emitter.wait_for(1)[0])
        == cc.reported(summary)
        == (
            final.usage.input_tokens,
            final.usage.cache_read_input_tokens or 0,
            final.usage.cache_creation_input_tokens or 0,
            final.usage.output_tokens,
        )
    )
