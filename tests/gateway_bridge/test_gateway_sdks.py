"""The official anthropic and google-genai SDKs through the gateway, against
a real simulator node: plain, streamed, multi-turn with a system prompt, a
tool call; their usage objects match the call records stored."""

from __future__ import annotations

import anthropic
import pytest
from google import genai
from google.genai import types

from usage.ingest import ingest_events
from usage.models import CallRecord

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def anthropic_client(gw, raw) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=raw, base_url=gw.url, max_retries=0)


def gemini_client(gw, raw) -> genai.Client:
    return genai.Client(
        api_key=raw,
        http_options=types.HttpOptions(base_url=gw.url, api_version="v1beta", timeout=20_000),
    )


def records(gw, n):
    events = gw.emitter.wait_for(n)
    ingest_events(events)
    return {r.request_id: r for r in CallRecord.objects.all()}, events


def test_anthropic_plain_multi_turn_and_usage(gw, tenant):
    c = anthropic_client(gw, tenant.raw)
    message = c.messages.create(
        model="sim-chat-small",
        max_tokens=30,
        system="You are a helpful assistant.",
        messages=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi! How can I help?"},
            {"role": "user", "content": "Tell me a fact."},
        ],
    )
    assert message.role == "assistant" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    stored, events = records(gw, 1)
    record = stored[events[0]["request_id"]]
    assert record.protocol == "anthropic"
    # Anthropic's input_tokens excludes cache reads and writes.
    assert record.input_tokens == message.usage.input_tokens
    assert record.cache_read_tokens == (message.usage.cache_read_input_tokens or 0)
    assert record.output_tokens == message.usage.output_tokens


def test_anthropic_stream_and_tool_use(gw, tenant):
    c = anthropic_client(gw, tenant.raw)
    with c.messages.stream(
        model="sim-chat-small",
        max_tokens=20,
        messages=[{"role": "user", "content": "Count to five."}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0
    tool_msg = c.messages.create(
        model="sim-chat-small",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    )
    assert tool_msg.stop_reason == "tool_use"
    use = next(b for b in tool_msg.content if b.type == "tool_use")
    assert use.name == "get_weather" and "city" in use.input
    follow = c.messages.create(
        model="sim-chat-small",
        max_tokens=60,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": tool_msg.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "rainy"}],
            },
        ],
    )
    assert "rainy" in follow.content[0].text
    stored, events = records(gw, 3)
    streamed = stored[events[0]["request_id"]]
    assert streamed.stream and streamed.output_tokens == final.usage.output_tokens


def test_anthropic_errors_in_anthropic_format(gw, tenant):
    c = anthropic_client(gw, tenant.raw)
    with pytest.raises(anthropic.NotFoundError) as missing:
        c.messages.create(model="nope", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body["type"] == "error"
    assert missing.value.body["error"]["type"] == "not_found_error"
    bad = anthropic.Anthropic(api_key="sk-wrong_key", base_url=gw.url, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(
            model="sim-chat-small", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    count = c.messages.count_tokens(
        model="sim-chat-small", messages=[{"role": "user", "content": "hello world"}]
    )
    assert count.input_tokens > 0


def test_gemini_plain_stream_tools_and_usage(gw, tenant):
    c = gemini_client(gw, tenant.raw)
    reply = c.models.generate_content(
        model="sim-chat-small",
        contents=[
            types.Content(role="user", parts=[types.Part(text="Hello")]),
            types.Content(role="model", parts=[types.Part(text="Hi there.")]),
            types.Content(role="user", parts=[types.Part(text="Tell me a fact.")]),
        ],
        config=types.GenerateContentConfig(
            system_instruction="You are terse.", max_output_tokens=25
        ),
    )
    assert reply.text
    pieces = list(
        c.models.generate_content_stream(
            model="sim-chat-small",
            contents="Count to five.",
            config=types.GenerateContentConfig(max_output_tokens=20),
        )
    )
    assert "".join(p.text or "" for p in pieces)
    streamed_usage = pieces[-1].usage_metadata
    weather = types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="get_weather",
                description="Weather in a city",
                parameters=types.Schema(
                    type="OBJECT",
                    properties={"city": types.Schema(type="STRING")},
                    required=["city"],
                ),
            )
        ]
    )
    called = c.models.generate_content(
        model="sim-chat-small",
        contents="What is the weather in Paris?",
        config=types.GenerateContentConfig(
            tools=[weather], automatic_function_calling={"disable": True}
        ),
    )
    assert called.function_calls and called.function_calls[0].name == "get_weather"
    tokens = c.models.count_tokens(model="sim-chat-small", contents="hello world")
    assert tokens.total_tokens > 0
    stored, events = records(gw, 3)
    plain = stored[events[0]["request_id"]]
    assert plain.protocol == "gemini"
    # Gemini's promptTokenCount includes the cached part.
    u = reply.usage_metadata
    assert plain.input_tokens + plain.cache_read_tokens == u.prompt_token_count
    assert plain.output_tokens == u.candidates_token_count + (u.thoughts_token_count or 0)
    streamed = stored[events[1]["request_id"]]
    assert streamed.stream and streamed.output_tokens == streamed_usage.candidates_token_count


def test_gemini_embed_and_errors(gw, tenant):
    c = gemini_client(gw, tenant.raw)
    emb = c.models.embed_content(model="sim-embed", contents="hello")
    assert emb.embeddings[0].values
    with pytest.raises(genai.errors.ClientError) as missing:
        c.models.generate_content(model="nope", contents="hi")
    assert missing.value.code == 404
