"""The Anthropic dialect: the OpenAI chat pivot written as a Messages request,
Anthropic's documented answers and event streams read back as OpenAI chat
objects with Anthropic's own usage, and Anthropic's errors as the gateway's."""

from __future__ import annotations

import json

import openai
import pytest

from gateway_bridge.protocols.base import OVERLOADED, UPSTREAM, GatewayError
from gateway_bridge.usage_mapping import TokenUsage
from gateway_bridge.vendors import dialect_for

an = dialect_for("anthropic")

# --------------------------------------------------------------------------- plumbing


def test_auth_headers_carry_the_key_the_version_and_the_clients_beta():
    assert an.auth_headers("sk-ant-1", {}) == [
        ("x-api-key", "sk-ant-1"),
        ("anthropic-version", "2023-06-01"),
    ]
    client = {"anthropic-version": "2024-01-01", "anthropic-beta": "files-api-2025-04-14"}
    assert an.auth_headers("", client) == [
        ("anthropic-version", "2024-01-01"),
        ("anthropic-beta", "files-api-2025-04-14"),
    ]


def test_paths():
    assert an.path("chat.completions", "claude-x", True) == "/v1/messages"
    assert an.native_path("messages", "claude-x", False, "") == "/v1/messages"
    assert an.models_path == "/v1/models"
    with pytest.raises(GatewayError) as caught:
        an.path("embeddings", "claude-x", False)
    assert (caught.value.status, caught.value.code) == (400, "unsupported")
    assert "embeddings" in caught.value.message


# --------------------------------------------------------------------------- from_chat

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PDF = "JVBERi0xLjQKJcfsj6IKNSAwIG9iago8PC9MZW5ndGggNiAwIFI+PgpzdHJlYW0K"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}


def pivot(**fields):
    body = {"model": "public", "max_tokens": 4096, "messages": [{"role": "user", "content": "Hi"}]}
    body.update(fields)
    return body


def test_a_full_conversation_becomes_a_messages_request():
    body = pivot(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric."}]},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "And this picture:"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x.test/a.jpg", "detail": "low"},
                    },
                    {
                        "type": "file",
                        "file": {
                            "filename": "r.pdf",
                            "file_data": f"data:application/pdf;base64,{PDF}",
                        },
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
            {"role": "user", "content": "Thanks. Tomorrow?"},
        ],
        max_completion_tokens=1000,
        stop="END",
        temperature=0.2,
        top_p=0.9,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        user="u-42",
        seed=7,
        stream_options={"include_usage": True},
        presence_penalty=0,
    )
    out = an.from_chat(body, "claude-sonnet-4-5", True)
    assert out == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather in Paris?"},
                    {"type": "text", "text": "And this picture:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                        "title": "r.pdf",
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": [{"type": "text", "text": "18 C"}],
                    },
                    {"type": "text", "text": "Thanks. Tomorrow?"},
                ],
            },
        ],
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric."}],
        "stream": True,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-42"},
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather",
                "input_schema": WEATHER["function"]["parameters"],
            }
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    }
    assert body["model"] == "public"  # the pivot is not changed


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather"},
        ),
    ],
)
def test_tool_choice(choice, expected):
    assert (
        an.from_chat(pivot(tools=[WEATHER], tool_choice=choice), "c", False)["tool_choice"]
        == expected
    )


@pytest.mark.parametrize(
    ("effort", "max_tokens", "budget"),
    [
        ("minimal", 4096, 1024),
        ("low", 4096, 2048),
        ("medium", 16000, 8192),
        ("medium", 4096, 4095),  # the budget stays under max_tokens
        ("high", 64000, 24576),
        ("xhigh", 64000, 32768),
    ],
)
def test_reasoning_effort_becomes_a_thinking_budget(effort, max_tokens, budget):
    out = an.from_chat(pivot(reasoning_effort=effort, max_tokens=max_tokens), "c", False)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}


def test_a_json_schema_becomes_anthropics_structured_output():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    out = an.from_chat(pivot(response_format=fmt), "c", False)
    assert out["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "output_config" not in an.from_chat(pivot(response_format={"type": "text"}), "c", False)
    with pytest.raises(GatewayError) as caught:
        an.from_chat(pivot(response_format={"type": "json_schema", "json_schema": {}}), "c", False)
    assert caught.value.param == "response_format.json_schema.schema"


def test_reasoning_effort_none_sends_no_thinking():
    assert "thinking" not in an.from_chat(pivot(reasoning_effort="none"), "c", False)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"temperature": 1.5}, "temperature"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
        ({"reasoning_effort": "low", "max_tokens": 1000}, "reasoning_effort"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools.0.type"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}]},
            "messages.0.content.0",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]}]},
            "messages.0.content.0.file.file_id",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AA"}}]}]},
            "messages.0.content.0.image_url.url",
        ),
    ],
)  # fmt: skip
def test_what_anthropic_cannot_do_is_a_400_naming_the_field(fields, param):
    with pytest.raises(GatewayError) as caught:
        an.from_chat(pivot(**fields), "c", False)
    err = caught.value
    assert (err.status, err.code, err.param) == (400, "unsupported", param)
    assert err.message.startswith(f"{param}: ")


def test_broken_tool_arguments_in_history_are_refused_not_guessed():
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]
    body = pivot(
        messages=[{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": calls}]
    )
    with pytest.raises(GatewayError) as caught:
        an.from_chat(body, "c", False)
    assert caught.value.param == "messages.1.tool_calls.0.function.arguments"


def test_tool_ids_are_rewritten_alike_for_the_call_and_its_result():
    calls = [{"id": "fc:1/a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    body = pivot(
        messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "fc:1/a", "content": "ok"},
        ]
    )
    turns = an.from_chat(body, "c", False)["messages"]
    assert turns[1]["content"][0]["id"] == turns[2]["content"][0]["tool_use_id"] == "fc_1_a"


# --------------------------------------------------------------------------- answers

# Anthropic's documented answers (Messages API reference, extended thinking, tool use).
PLAIN = {
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Hi! My name is Claude."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 2095,
        "output_tokens": 503,
        "cache_creation_input_tokens": 2051,
        "cache_read_input_tokens": 4000,
        "cache_creation": {"ephemeral_5m_input_tokens": 2051, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
    },
}
THINKING_TOOL = {
    **PLAIN,
    "content": [
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQBCgIYAhIM"},
        {"type": "text", "text": "I'll check."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"location": "Paris"}},
    ],
    "stop_reason": "tool_use",
}  # fmt: skip


def test_a_plain_answer_becomes_a_chat_completion_with_anthropic_usage():
    answer, usage = an.to_chat(PLAIN, "public")
    assert usage == TokenUsage(input=2095, cache_read=4000, cache_write=2051, output=503)
    parsed = openai.types.chat.ChatCompletion.model_validate(answer)
    assert parsed.model == "public"
    assert parsed.choices[0].message.content == "Hi! My name is Claude."
    assert parsed.choices[0].finish_reason == "stop"
    assert an.native_usage(PLAIN) == usage


def test_thinking_and_tool_use_become_reasoning_content_and_tool_calls():
    answer, _ = an.to_chat(THINKING_TOOL, "public")
    message = answer["choices"][0]["message"]
    assert message["content"] == "I'll check."
    assert message["reasoning_content"] == "The user wants the weather."
    assert message["tool_calls"] == [
        {
            "id": "toolu_01A09q90qw90lq917835lq9",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
        }
    ]
    assert answer["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("stop", "finish"),
    [("stop_sequence", "stop"), ("max_tokens", "length"), ("refusal", "content_filter")],
)
def test_stop_reasons(stop, finish):
    assert (
        an.to_chat({**PLAIN, "stop_reason": stop}, "m")[0]["choices"][0]["finish_reason"] == finish
    )


def test_an_answer_that_is_not_a_message_is_a_502():
    with pytest.raises(GatewayError) as caught:
        an.to_chat({"type": "completion", "completion": "hi"}, "m")
    assert (caught.value.status, caught.value.code) == (502, "upstream_invalid_response")


# The documented event sequence of a streamed answer with thinking and a tool call.
STREAM = [
    ("message_start", {"type": "message_start", "message": {"id": "msg_014p7gG3wDgGV9EUtLvnow3U", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 472, "output_tokens": 2, "cache_creation_input_tokens": 1800, "cache_read_input_tokens": 0, "cache_creation": {"ephemeral_5m_input_tokens": 600, "ephemeral_1h_input_tokens": 1200}}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
    ("ping", {"type": "ping"}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me solve this step by step."}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Okay, let's check "}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "the weather."}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("content_block_start", {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"location":'}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ' "San Francisco, CA"}'}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 2}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 89}}),
    ("message_stop", {"type": "message_stop"}),
]  # fmt: skip


def test_a_stream_becomes_chat_chunks_an_openai_client_assembles():
    reader = an.StreamReader("public")
    chunks = []
    for event, data in STREAM:
        assert not reader.finished
        chunks.extend(reader.feed(event, data))
    assert reader.finished
    for c in chunks:
        openai.types.chat.ChatCompletionChunk.model_validate(c)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content") or "" for d in deltas) == "Okay, let's check the weather."
    assert (
        "".join(d.get("reasoning_content", "") for d in deltas) == "Let me solve this step by step."
    )
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    assert calls[0] == {
        "index": 0,
        "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert "".join(c["function"]["arguments"] for c in calls) == '{"location": "San Francisco, CA"}'
    assert {c["index"] for c in calls} == {0}
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "tool_calls"
    # usage: message_start's input side, message_delta's cumulative output; both cache lifetimes
    assert reader.usage == TokenUsage(input=472, cache_read=0, cache_write=1800, output=89)


def test_a_native_stream_is_read_for_usage_first_token_and_end():
    for named in (True, False):  # with and without the SSE event names
        native = an.NativeStreamUsage()
        seen_content = []
        for event, data in STREAM:
            native.feed(event if named else None, json.dumps(data).encode())
            seen_content.append(native.content)
        assert seen_content.index(True) == 3  # the first content_block_delta
        assert native.finished and native.error is None
        assert native.usage == TokenUsage(input=472, cache_write=1800, output=89)


@pytest.mark.parametrize(
    ("kind", "status", "gateway_kind"),
    [("overloaded_error", 503, OVERLOADED), ("api_error", 502, UPSTREAM)],
)
def test_an_error_event_is_a_gateway_error_with_the_vendors_message(kind, status, gateway_kind):
    reader = an.StreamReader("public")
    reader.feed("message_start", STREAM[0][1])
    error = {"type": "error", "error": {"type": kind, "message": "Overloaded"}}
    with pytest.raises(GatewayError) as caught:
        reader.feed("error", error)
    assert (caught.value.status, caught.value.kind) == (status, gateway_kind)
    assert caught.value.message == "Overloaded"
    native = an.NativeStreamUsage()
    native.feed("error", json.dumps(error).encode())
    assert native.error.status == status and not native.finished


# --------------------------------------------------------------------------- errors


def body_of(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


@pytest.mark.parametrize(
    ("status", "raw", "expected_status", "code", "words"),
    [
        (400, body_of("invalid_request_error", "messages: field required"), 400, "invalid_request_error", "messages: field required"),
        (401, body_of("authentication_error", "invalid x-api-key"), 401, "upstream_auth_failed", "invalid x-api-key"),
        (403, body_of("permission_error", "no access to this model"), 403, "upstream_auth_failed", "no access"),
        (404, body_of("not_found_error", "model: claude-x"), 404, "not_found_error", "claude-x"),
        (413, body_of("request_too_large", "Request exceeds the maximum size"), 413, "request_too_large", "maximum size"),
        (429, body_of("rate_limit_error", "Number of request tokens has exceeded your rate limit"), 429, "rate_limit_error", "rate limit"),
        (529, body_of("overloaded_error", "Overloaded"), 503, "upstream_overloaded", "Overloaded"),
        (500, body_of("api_error", "Internal server error"), 502, "upstream_error", "Internal server error"),
        (502, b"<html><body>Bad gateway</body></html>", 502, "upstream_error", "not JSON"),
        (503, b"", 502, "upstream_error", "no body"),
        (401, b"", 401, "upstream_auth_failed", "credential"),
    ],
)  # fmt: skip
def test_error_of(status, raw, expected_status, code, words):
    err = an.error_of(status, raw)
    assert (err.status, err.code) == (expected_status, code)
    assert words in err.message
    assert "<html>" not in err.message
