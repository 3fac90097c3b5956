"""The Responses API on vendor channels: passed through as sent to an OpenAI
API channel (model id rewritten; ``previous_response_id`` replaced by the
stored items), translated through the chat pivot to Anthropic's Messages and
Gemini's generateContent; streamed back as Responses events, the usage
billed equal to what the SDK reports."""

from __future__ import annotations

import base64
import http.client
import json
import socket

import openai
import pytest

from tests.gateway_bridge.conftest import NODE_TOKEN
from tests.gateway_bridge.test_gateway_faults import reserved_on
from tests.gateway_bridge.vendor_fixtures import (
    KEY_A,
    VENDOR_MODELS,
    captured,
    channel,
    demo_channels,
)
from tests.inference_node.server_helpers import node_process
from usage.ingest import ingest_events
from usage.models import CallRecord


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("sim-claude", "/v1/messages"),
        ("sim-gemini", "/v1beta/models/gemini-sim:streamGenerateContent"),
    ],
)
def test_a_streamed_response_translated_for_other_vendors(
    vendor, tenant, start_gateway, model, path
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = openai.OpenAI(api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0)
    events = list(
        client.responses.create(
            model=model,
            instructions="Answer in one sentence.",
            input="Why is the sky blue?",
            reasoning={"effort": "low"},  # Codex's: the gateway's default output budget
            stream=True,
        )
    )
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response
    assert final.model == model and final.output_text
    sent = captured(vendor)[-1]
    assert sent["path"].split("?")[0] == path
    body = json.loads(base64.b64decode(sent["body_base64"]))
    assert "input" not in body and "instructions" not in body  # the channel's own shape
    ingest_events(gw.emitter.wait_for(1))
    [record] = CallRecord.objects.all()
    assert record.endpoint == "responses" and record.model == model
    assert record.input_tokens + record.cache_read_tokens + record.cache_write_tokens == (
        final.usage.input_tokens
    )
    assert record.output_tokens == final.usage.output_tokens


APPLY_PATCH = {  # Codex's freeform tool: only the OpenAI API runs its grammar
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}


def test_the_openai_channel_takes_responses_as_sent(vendor, tenant, start_gateway):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = openai.OpenAI(api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0)
    first = client.responses.create(
        model="sim-gpt", input="My name is Ada.", tools=[APPLY_PATCH], max_output_tokens=12
    )
    sent = captured(vendor)[-1]
    assert sent["path"] == "/v1/responses"
    body = json.loads(base64.b64decode(sent["body_base64"]))
    assert body["model"] == "gpt-sim" and body["tools"] == [APPLY_PATCH]
    assert body["input"] == "My name is Ada."
    # Stored for the caller's organization under the id the vendor gave it.
    assert client.responses.retrieve(first.id).output_text == first.output_text

    events = list(
        client.responses.create(
            model="sim-gpt", previous_response_id=first.id, input="Who am I?", stream=True
        )
    )
    second = events[-1].response
    assert events[-1].type == "response.completed" and second.output_text
    body = json.loads(base64.b64decode(captured(vendor)[-1]["body_base64"]))
    assert "previous_response_id" not in body  # it would name the channel account's responses
    assert [item.get("role") for item in body["input"]] == ["user", "assistant", "user"]
    assert body["input"][0]["content"] == "My name is Ada."
    assert body["input"][1]["content"][0]["text"] == first.output_text
    assert "id" not in body["input"][1]
    assert client.responses.retrieve(second.id).usage.output_tokens == second.usage.output_tokens

    ingest_events(gw.emitter.wait_for(2))
    billed = sorted(
        (r.input_tokens + r.cache_read_tokens, r.output_tokens) for r in CallRecord.objects.all()
    )
    reported = sorted((r.usage.input_tokens, r.usage.output_tokens) for r in (first, second))
    assert billed == reported

    # A tool only the OpenAI API runs cannot go to another vendor's channel.
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="sim-claude", input="Fix it.", tools=[APPLY_PATCH])
    assert refused.value.body["code"] == "unsupported"
    assert "tools[0]: the 'custom' tool" in refused.value.body["message"]


@pytest.fixture(scope="module")
def slow_vendor():
    with node_process(
        "--profile", "custom", "--ttft-ms", "5", "--itl-ms", "20", "--jitter", "0",
        "--token", NODE_TOKEN, "--api-keys", KEY_A, "--models", VENDOR_MODELS, via="module",
    ) as node:  # fmt: skip
        yield node


def test_a_passed_through_stream_the_client_cuts_is_billed_for_its_text(
    tenant, start_gateway, slow_vendor
):
    channel(slow_vendor.base_url, "openai", "sim-gpt", "gpt-sim")
    key, raw = tenant.new_key(spend_cap_daily=10**12)
    gw = start_gateway()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    body = {"model": "sim-gpt", "input": "Tell a long story.", "max_output_tokens": 400}
    conn.request(
        "POST",
        "/v1/responses",
        body=json.dumps({**body, "stream": True}),
        headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    assert resp.status == 200
    deltas, response_id = 0, None
    while deltas < 10:
        line = resp.fp.readline()
        if line.startswith(b"data: "):
            event = json.loads(line[6:])
            response_id = response_id or event.get("response", {}).get("id")
            deltas += event["type"] == "response.output_text.delta"
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    [event] = gw.emitter.wait_for(1, timeout=15)
    assert event["status_code"] == 499 and event["endpoint"] == "responses"
    assert 5 <= event["output_tokens"] < 100  # the text streamed, not the budget, not zero
    assert reserved_on(gw, key) == 0
    client = openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response_id)
