"""The Responses API on vendor channels: translated to the chat pivot, then
sent in each channel's own protocol (OpenAI's chat completions, Anthropic's
Messages, Gemini's generateContent), streamed back as Responses events, the
usage billed equal to what the SDK reports."""

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
        ("sim-gpt", "/v1/chat/completions"),
        ("sim-claude", "/v1/messages"),
        ("sim-gemini", "/v1beta/models/gemini-sim:streamGenerateContent"),
    ],
)
def test_a_streamed_response_on_each_vendor_channel(vendor, tenant, start_gateway, model, path):
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
