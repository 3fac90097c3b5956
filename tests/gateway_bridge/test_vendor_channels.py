"""Vendor channels end to end: the official SDKs, through the gateway and the
demo key's rules, to channels of each kind (the simulator in vendor mode,
demanding vendor keys): native pass-through for Anthropic and Gemini clients,
translation for an OpenAI client on an Anthropic channel, and the call
records with the vendor's own token classes, the price and the channel's cost."""

from __future__ import annotations

import base64
import json

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from inference_node.selectors import CostPrice
from tests.gateway_bridge.vendor_fixtures import (
    COST,
    KEY_A,
    PNG,
    captured,
    channel,
    demo_channels,
    post,
)
from usage.ingest import ingest_events
from usage.models import CallRecord
from usage.prices import price_for
from usage.rating import PPM, TokenCounts, rate

SYSTEM = "You are the careful assistant of the ACME support desk. Answer briefly. " * 12


def records(gw, n: int) -> tuple[dict, list[dict]]:
    events = gw.emitter.wait_for(n)
    ingest_events(events)
    return {r.request_id: r for r in CallRecord.objects.all()}, events


def classes(record) -> tuple[int, int, int, int]:
    return (
        record.input_tokens,
        record.cache_read_tokens,
        record.cache_write_tokens,
        record.output_tokens,
    )


def cost_price() -> CostPrice:
    return CostPrice("USD", *COST)


def list_price_cost(model: str, record) -> int:
    price = price_for(model, "USD", record.organization_id, record.started_at)
    return rate(TokenCounts(*classes(record)), price, PPM)


def test_anthropic_sdk_on_an_anthropic_channel_caches_thinks_and_sees_the_image(
    vendor, tenant, start_gateway
):
    channels = demo_channels(vendor.base_url)
    gw = start_gateway()
    client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
    ask = {
        "model": "sim-claude",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "text", "text": "What is in this picture?"},
                ],
            }
        ],
    }
    first = client.messages.create(**ask)
    second = client.messages.create(**ask)

    assert first.content[0].type == "thinking" and first.content[-1].type == "text"
    assert first.usage.cache_creation_input_tokens > 0
    assert not first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    # The image reached the vendor as it was sent (native pass-through), and was counted.
    sent = json.loads(base64.b64decode(captured(vendor)[-1]["body_base64"]))
    assert sent["model"] == "claude-sim"
    assert sent["messages"][0]["content"][0]["source"]["data"] == PNG
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}

    stored, events = records(gw, 2)
    one, two = (stored[e["request_id"]] for e in events)
    for record, answer in ((one, first), (two, second)):
        usage = answer.usage
        assert classes(record) == (
            usage.input_tokens,
            usage.cache_read_input_tokens or 0,
            usage.cache_creation_input_tokens or 0,
            usage.output_tokens,
        )
        assert record.model == "sim-claude" and record.protocol == "anthropic"
        # Priced at the cache-write price on the first call, the cache-read price on the second.
        assert record.cost == list_price_cost("sim-claude", record) > 0
        # What the vendor charges, at the channel's cost price, and the key that paid it.
        assert record.upstream_cost == rate(TokenCounts(*classes(record)), cost_price(), PPM)
        assert record.upstream_currency == "USD"
        assert record.credential_id == channels["anthropic"].credentials.get().pk
        assert record.node_id == channels["anthropic"].pk
    assert one.cache_write_tokens > 0 and two.cache_read_tokens > 0
    assert two.cost < one.cost


def test_anthropic_sdk_streams_natively_with_the_vendors_events_and_usage(
    vendor, tenant, start_gateway
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
    kinds = []
    with client.messages.stream(
        model="sim-claude",
        max_tokens=64,
        messages=[{"role": "user", "content": "Stream a short answer."}],
    ) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and "content_block_delta" in kinds
    assert kinds[-1] == "message_stop"
    stored, events = records(gw, 1)
    record = stored[events[0]["request_id"]]
    assert record.stream and record.status_code == 200
    assert (record.input_tokens, record.output_tokens) == (
        final.usage.input_tokens,
        final.usage.output_tokens,
    )
    assert record.ttft_us is not None and record.ttft_us <= record.latency_us


def test_google_genai_with_an_inline_image_and_a_system_instruction(vendor, tenant, start_gateway):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = genai.Client(
        api_key=tenant.raw,
        http_options=types.HttpOptions(base_url=gw.url, api_version="v1beta", timeout=20_000),
    )
    answer = client.models.generate_content(
        model="sim-gemini",
        contents=[
            types.Part.from_bytes(data=base64.b64decode(PNG), mime_type="image/png"),
            "Describe the picture.",
        ],
        config=types.GenerateContentConfig(
            system_instruction="You describe pictures tersely.", max_output_tokens=40
        ),
    )
    assert answer.text
    request = captured(vendor)[-1]
    assert request["path"].startswith("/v1beta/models/gemini-sim:generateContent")
    sent = json.loads(base64.b64decode(request["body_base64"]))
    parts = sent["contents"][0]["parts"]
    assert any((p.get("inlineData") or p.get("inline_data") or {}).get("data") for p in parts)
    assert "systemInstruction" in sent or "system_instruction" in sent
    stored, events = records(gw, 1)
    record = stored[events[0]["request_id"]]
    meta = answer.usage_metadata
    assert record.protocol == "gemini" and record.model == "sim-gemini"
    assert record.input_tokens + record.cache_read_tokens == meta.prompt_token_count
    assert record.output_tokens == meta.candidates_token_count + (meta.thoughts_token_count or 0)


def test_openai_sdk_on_the_openai_channel_and_translated_to_the_anthropic_one(
    vendor, tenant, start_gateway
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = openai.OpenAI(api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0)
    gpt = client.chat.completions.create(
        model="sim-gpt", messages=[{"role": "user", "content": "Hello"}], max_tokens=20
    )
    assert gpt.choices[0].message.content
    to_openai = captured(vendor)[-1]
    assert to_openai["path"] == "/v1/chat/completions"
    assert to_openai["headers"]["authorization"] == "…" + KEY_A[-4:]

    claude = client.chat.completions.create(
        model="sim-claude",
        max_tokens=40,
        messages=[
            {"role": "system", "content": "You look at pictures."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
        ],
    )
    assert claude.object == "chat.completion" and claude.choices[0].message.content
    assert claude.model == "sim-claude"
    to_anthropic = captured(vendor)[-1]
    assert to_anthropic["path"] == "/v1/messages"
    assert to_anthropic["headers"]["x-api-key"] == "…" + KEY_A[-4:]
    sent = json.loads(base64.b64decode(to_anthropic["body_base64"]))
    assert sent["system"] and sent["model"] == "claude-sim"
    image = sent["messages"][0]["content"][-1]
    assert image["type"] == "image" and image["source"]["data"] == PNG
    stored, events = records(gw, 2)
    assert {stored[e["request_id"]].model for e in events} == {"sim-gpt", "sim-claude"}
    assert claude.usage.prompt_tokens == sum(classes(stored[events[1]["request_id"]])[:3])


def test_a_native_call_reaches_the_vendor_byte_for_byte_but_the_model_id(
    vendor, tenant, start_gateway
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    # Odd spacing, an escaped "model" inside a text, a number written 0.50, fields
    # the gateway does not model: all must reach the vendor as they were written.
    body = (
        b'{"model":  "sim-claude", "max_tokens": 32,\n'
        b' "messages": [{"role": "user", "content": [{"type": "text",'
        b' "text": "h\\u00e9llo \\"model\\": x",'
        b' "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}],\n'
        b' "metadata": {"user_id": "u-1"}, "temperature": 0.50,'
        b' "service_tier": "auto", "context_management": {"edits": []}}'
    )
    status, answer = post(
        gw.url,
        "/v1/messages",
        body,
        {
            "x-api-key": tenant.raw,
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "context-management-2025-06-27",
            "content-type": "application/json",
        },
    )
    assert status == 200, answer
    assert json.loads(answer)["type"] == "message"
    sent = captured(vendor)[-1]
    assert base64.b64decode(sent["body_base64"]) == body.replace(
        b'"sim-claude"', b'"claude-sim"', 1
    )
    assert sent["headers"]["anthropic-beta"] == "context-management-2025-06-27"
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    assert sent["headers"]["x-api-key"] == "…" + KEY_A[-4:]


def test_an_organizations_own_channel_serves_its_keys_only(vendor, tenant, start_gateway):
    """Bring your own key: a channel of the tenant's own, with the tenant's vendor
    key, serves the tenant; another organization's key does not reach it."""
    from accounts.actors import Actor
    from accounts.models import Role
    from tests.factories import MembershipFactory, OrganizationFactory, issue_key
    from usage.models import CatalogModel

    CatalogModel.objects.create(name="byok-claude", display_name="Our Claude", modality="vision")
    channel(
        vendor.base_url,
        "anthropic",
        "byok-claude",
        "claude-sim",
        organization=tenant.org,
        name="our-anthropic",
    )
    other = OrganizationFactory(name="Globex", slug="globex")
    _, other_raw = issue_key(Actor(MembershipFactory(organization=other, role=Role.OWNER)))
    gw = start_gateway()
    ask = {"model": "byok-claude", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    mine = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
    assert mine.messages.create(**ask).content
    theirs = anthropic.Anthropic(api_key=other_raw, base_url=gw.url, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as refused:
        theirs.messages.create(**ask)
    # Anthropic's "overloaded" (529): no channel of theirs serves it; ours was never called.
    assert refused.value.status_code == 529
    assert len(captured(vendor)) == 1


def test_openai_sdk_streams_parallel_tool_calls_from_an_anthropic_channel(
    vendor, tenant, start_gateway
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = openai.OpenAI(api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0)
    tools = [
        {"type": "function", "function": {"name": name, "description": f"The {name} tool.",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                        "required": ["path"]}}}
        for name in ("Glob", "Grep", "Read")
    ]  # fmt: skip
    stream = client.chat.completions.create(
        model="sim-claude",
        max_tokens=300,
        tools=tools,
        messages=[{"role": "user", "content": "Use Read and Glob on the repo"}],
        stream=True,
        stream_options={"include_usage": True},
        # An Anthropic beta an OpenAI client may carry: the Anthropic channel gets it.
        extra_headers={"anthropic-beta": "fine-grained-tool-streaming-2025-05-14"},
    )
    calls: dict[int, dict] = {}
    finish = usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
                call["id"] = delta.id or call["id"]
                call["name"] = (delta.function and delta.function.name) or call["name"]
                call["arguments"] += (delta.function and delta.function.arguments) or ""
    # Two tool_use blocks of the vendor's answer: two tool calls, indexes 0 and 1.
    assert sorted(calls) == [0, 1] and finish == "tool_calls"
    assert [calls[i]["name"] for i in (0, 1)] == ["Read", "Glob"]
    assert all(set(json.loads(calls[i]["arguments"])) == {"path"} for i in (0, 1))
    assert calls[0]["id"] != calls[1]["id"]
    sent = captured(vendor)[-1]
    assert sent["headers"]["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
    stored, events = records(gw, 1)
    record = stored[events[0]["request_id"]]
    assert (record.input_tokens + record.cache_read_tokens, record.output_tokens) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
