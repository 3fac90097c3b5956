"""The Responses API on vendor channels: passed through as sent to an OpenAI
API channel (model id rewritten; ``previous_response_id`` replaced by the
stored items), translated through the chat pivot to Anthropic's Messages and
Gemini's generateContent; streamed back as Responses events, the usage
billed equal to what the SDK reports."""

from __future__ import annotations

import base64
import json

import openai
import pytest

from tests.gateway_bridge.vendor_fixtures import captured, demo_channels
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
