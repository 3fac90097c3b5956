"""What a caller asks of the output's form reaches the model or is refused,
never silently dropped (official SDKs through the gateway): JSON mode, JSON
schemas and logprobs on an OpenAI-speaking node; Anthropic's stop sequences
reported as ``stop_sequence`` through translation; a JSON schema sent to an
Anthropic channel as its structured output; a channel that cannot honour a
parameter answers 400 naming it."""

from __future__ import annotations

import base64
import json

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors
from google.genai import types

from tests.gateway_bridge.test_gateway_openai import client
from tests.gateway_bridge.test_gateway_sdk_paths import default_gemini_client
from tests.gateway_bridge.test_gateway_sdks import anthropic_client
from tests.gateway_bridge.vendor_fixtures import captured, demo_channels

ASK = [{"role": "user", "content": "Describe the weather in Paris."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "celsius": {"type": "number"},
        "sky": {"type": "string", "enum": ["clear", "cloudy"]},
        "hours": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["city", "celsius", "sky", "hours"],
    "additionalProperties": False,
}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}


def assert_weather(value: dict) -> None:
    assert set(value) == set(SCHEMA["required"])
    assert isinstance(value["city"], str) and value["city"]
    assert isinstance(value["celsius"], int | float) and not isinstance(value["celsius"], bool)
    assert value["sky"] in ("clear", "cloudy")
    assert value["hours"] and all(isinstance(h, int) for h in value["hours"])


def test_openai_json_modes_and_logprobs_reach_the_node_and_come_back(gw, tenant):
    c = client(gw, tenant.raw)
    shaped = c.chat.completions.create(
        model="sim-chat-small", messages=ASK, response_format=JSON_SCHEMA, max_tokens=300
    )
    assert_weather(json.loads(shaped.choices[0].message.content))
    obj = c.chat.completions.create(
        model="sim-chat-small",
        messages=ASK,
        response_format={"type": "json_object"},
        max_tokens=300,
    )
    assert isinstance(json.loads(obj.choices[0].message.content), dict)
    plain = c.chat.completions.create(
        model="sim-chat-small", messages=ASK, logprobs=True, top_logprobs=2, max_tokens=12
    )
    entries = plain.choices[0].logprobs.content
    assert len(entries) == plain.usage.completion_tokens
    assert "".join(e.token for e in entries) == plain.choices[0].message.content
    assert all(len(e.top_logprobs) == 2 and e.logprob < 0 for e in entries)
    stream = c.chat.completions.create(
        model="sim-chat-small",
        messages=ASK,
        logprobs=True,
        top_logprobs=2,
        max_tokens=12,
        stream=True,
    )
    streamed = [
        e
        for ch in stream
        if ch.choices and ch.choices[0].logprobs
        for e in ch.choices[0].logprobs.content
    ]
    assert [e.token for e in streamed] == [e.token for e in entries]


def stop_word(c: anthropic.Anthropic) -> str:
    """A word from the middle of this prompt's free answer (the text is deterministic)."""
    free = c.messages.create(model="sim-chat-small", max_tokens=60, messages=ASK)
    return free.content[0].text.split()[4]


def test_anthropic_stop_sequences_through_translation_report_the_match(gw, tenant):
    c = anthropic_client(gw, tenant.raw)
    stop = stop_word(c)
    message = c.messages.create(
        model="sim-chat-small", max_tokens=60, messages=ASK, stop_sequences=["zz-never", stop]
    )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
    assert stop not in message.content[0].text
    with c.messages.stream(
        model="sim-chat-small", max_tokens=60, messages=ASK, stop_sequences=[stop]
    ) as stream:
        deltas = [e for e in stream if e.type == "message_delta"]
        final = stream.get_final_message()
    assert (deltas[-1].delta.stop_reason, deltas[-1].delta.stop_sequence) == ("stop_sequence", stop)
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
    # No stop sequence matched: a plain end, none named.
    free = c.messages.create(
        model="sim-chat-small", max_tokens=60, messages=ASK, stop_sequences=["zz-never"]
    )
    assert free.stop_reason in ("end_turn", "max_tokens") and free.stop_sequence is None


def test_anthropic_structured_output_through_translation_is_json_of_the_schema(gw, tenant):
    c = anthropic_client(gw, tenant.raw)
    message = c.messages.create(
        model="sim-chat-small",
        max_tokens=300,
        messages=ASK,
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
    )
    assert_weather(json.loads(message.content[0].text))


def test_gemini_json_response_and_logprobs_through_translation(gw, tenant):
    c = default_gemini_client(gw, tenant.raw)
    gemini_schema = {
        "type": "OBJECT",
        "properties": {
            "city": {"type": "STRING"},
            "celsius": {"type": "NUMBER"},
            "sky": {"type": "STRING", "enum": ["clear", "cloudy"]},
            "hours": {"type": "ARRAY", "items": {"type": "INTEGER"}},
        },
        "required": ["city", "celsius", "sky", "hours"],
    }
    answer = c.models.generate_content(
        model="sim-chat-small",
        contents="Describe the weather in Paris.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=gemini_schema
        ),
    )
    assert_weather(json.loads(answer.text))
    # Log probabilities: asked in Gemini's terms, answered in Gemini's shape.
    config = types.GenerateContentConfig(response_logprobs=True, logprobs=2, max_output_tokens=10)
    plain = c.models.generate_content(model="sim-chat-small", contents="Hello", config=config)
    result = plain.candidates[0].logprobs_result
    assert "".join(t.token for t in result.chosen_candidates) == plain.text
    assert all(len(top.candidates) == 2 for top in result.top_candidates)
    assert plain.candidates[0].avg_logprobs < 0
    chunks = list(
        c.models.generate_content_stream(model="sim-chat-small", contents="Hello", config=config)
    )
    streamed = [
        t.token
        for ch in chunks
        if ch.candidates and ch.candidates[0].logprobs_result
        for t in ch.candidates[0].logprobs_result.chosen_candidates
    ]
    assert streamed == [t.token for t in result.chosen_candidates]
    with pytest.raises(genai_errors.ClientError) as refused:
        c.models.generate_content(
            model="sim-chat-small", contents="Hello", config=types.GenerateContentConfig(logprobs=2)
        )
    assert refused.value.code == 400 and "response_logprobs" in refused.value.message


def test_an_anthropic_channel_takes_a_json_schema_and_refuses_the_rest_by_name(
    vendor, tenant, start_gateway
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    c = client(gw, tenant.raw)
    before = len(captured(vendor))
    for fields, param in (
        ({"logprobs": True}, "logprobs"),
        ({"logprobs": True, "top_logprobs": 2}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="sim-claude", messages=ASK, max_tokens=20, **fields)
        assert refused.value.body["param"] == param
        assert "Anthropic" in refused.value.body["message"]
    gemini = default_gemini_client(gw, tenant.raw)
    with pytest.raises(genai_errors.ClientError) as refused_gemini:
        gemini.models.generate_content(
            model="sim-claude",
            contents="Hello",
            config=types.GenerateContentConfig(response_logprobs=True),
        )
    assert refused_gemini.value.code == 400 and "logprobs" in refused_gemini.value.message
    assert len(captured(vendor)) == before  # nothing was sent to the vendor
    # A JSON schema it can honour: sent as Anthropic's output_config.format.
    shaped = c.chat.completions.create(
        model="sim-claude", messages=ASK, max_tokens=300, response_format=JSON_SCHEMA
    )
    assert_weather(json.loads(shaped.choices[0].message.content))
    sent = json.loads(base64.b64decode(captured(vendor)[-1]["body_base64"]))
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}


def test_anthropic_native_channel_reports_stop_sequence_and_structured_output(
    vendor, tenant, start_gateway
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    c = anthropic_client(gw, tenant.raw)
    free = c.messages.create(model="sim-claude", max_tokens=60, messages=ASK)
    stop = free.content[0].text.split()[4]
    cut = c.messages.create(model="sim-claude", max_tokens=60, messages=ASK, stop_sequences=[stop])
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", stop)
    shaped = c.messages.create(
        model="sim-claude",
        max_tokens=300,
        messages=ASK,
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
    )
    assert_weather(json.loads(shaped.content[0].text))


def test_openai_logprobs_through_a_gemini_channel(vendor, tenant, start_gateway):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    c = client(gw, tenant.raw)
    plain = c.chat.completions.create(
        model="sim-gemini", messages=ASK, logprobs=True, top_logprobs=2, max_tokens=10
    )
    entries = plain.choices[0].logprobs.content
    assert "".join(e.token for e in entries) == plain.choices[0].message.content
    assert all(len(e.top_logprobs) == 2 and e.logprob < 0 for e in entries)
    sent = json.loads(base64.b64decode(captured(vendor)[-1]["body_base64"]))
    assert sent["generationConfig"]["responseLogprobs"] is True
    stream = c.chat.completions.create(
        model="sim-gemini",
        messages=ASK,
        logprobs=True,
        top_logprobs=2,
        max_tokens=10,
        stream=True,
    )
    streamed = [
        e.token
        for ch in stream
        if ch.choices and ch.choices[0].logprobs
        for e in ch.choices[0].logprobs.content
    ]
    assert streamed == [e.token for e in entries]
