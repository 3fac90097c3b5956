"""The Gemini adapter: Google's validation (proto JSON, both spellings), the
translation to the node's OpenAI protocol, and the answers (plain, SSE and
JSON-array streams) back — checked with the official ``google-genai`` types,
which must read the same text, function calls and usage they would read from
Google."""

from __future__ import annotations

import json

import pytest
from google.genai import types

from console.kernel import tokens as tokenizer
from gateway_bridge.protocols import gemini as gp
from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    OVERLOADED,
    PAYMENT_REQUIRED,
    RATE_LIMIT,
    GatewayError,
    ModelInfo,
)
from gateway_bridge.usage_mapping import TokenUsage, from_gemini
from tooling.simulator import protocol as node_protocol

MODEL = "sim-chat-small"
WEATHER = {
    "functionDeclarations": [
        {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "OBJECT",
                "properties": {
                    "city": {"type": "STRING"},
                    "unit": {"type": "STRING", "enum": ["C", "F"], "nullable": True},
                },
                "required": ["city"],
                "propertyOrdering": ["city", "unit"],
            },
        }
    ]
}


def user(text: str) -> dict:
    return {"role": "user", "parts": [{"text": text}]}


def parse(body: dict, *, stream=False, alt_sse=True):
    return gp.parse_generate(MODEL, body, stream=stream, alt_sse=alt_sse)


def error_of(body: dict, **kwargs) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        parse(body, **kwargs)
    return caught.value


# --------------------------------------------------------------------------- requests


def test_system_multi_turn_and_generation_config_translate():
    req = parse(
        {
            "contents": [user("Hello"), {"role": "model", "parts": [{"text": "Hi."}]}, user("Go")],
            "systemInstruction": {"parts": [{"text": "Be terse."}]},
            "generationConfig": {
                "maxOutputTokens": 25,
                "temperature": 0,
                "topP": 0.9,
                "topK": 40,
                "stopSequences": ["END"],
                "candidateCount": 2,
                "seed": 7,
                "presencePenalty": 0.5,
            },
        }
    )
    assert req.protocol == "gemini" and req.endpoint == "generateContent"
    assert req.upstream_path == "/v1/chat/completions"
    assert req.body["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Go"},
    ]
    assert req.body["max_tokens"] == 25 and req.max_output_tokens == 25
    assert req.body["temperature"] == 0 and req.body["top_p"] == 0.9
    assert req.body["stop"] == ["END"] and req.body["n"] == 2 and req.body["seed"] == 7
    assert req.body["presence_penalty"] == 0.5
    assert "top_k" not in req.body
    # two candidates are not one deterministic answer
    assert req.deterministic is False
    # the estimate is the node's own count of the same chat
    node_count = len(tokenizer.chat_prompt_tokens(req.body["messages"]))
    assert req.prompt_tokens_estimate == node_count


def test_snake_case_fields_are_accepted_like_camel_case():
    req = parse(
        {
            "contents": [user("Hi")],
            "system_instruction": {"parts": [{"text": "S"}]},
            "generation_config": {"max_output_tokens": "12"},
        }
    )
    assert req.body["messages"][0] == {"role": "system", "content": "S"}
    assert req.body["max_tokens"] == 12


def test_stream_request_asks_the_node_to_stream():
    req = parse({"contents": [user("Hi")]}, stream=True)
    assert req.stream and req.body["stream"] is True
    assert req.endpoint == "streamGenerateContent"
    assert req.response.stream_content_type == "text/event-stream"
    plain_array = parse({"contents": [user("Hi")]}, stream=True, alt_sse=False)
    assert plain_array.response.stream_content_type == "application/json"


def test_function_declarations_become_json_schema_tools():
    req = parse(
        {
            "contents": [user("Weather in Paris?")],
            "tools": [WEATHER],
            "toolConfig": {
                "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
            },
        }
    )
    [tool] = req.body["tools"]
    assert tool["function"]["name"] == "get_weather"
    assert tool["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": ["string", "null"], "enum": ["C", "F"]},
        },
        "required": ["city"],
    }
    assert req.body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    # the node validates the translated body as its own chat request
    node_protocol.parse_chat({**req.body, "model": MODEL})


@pytest.mark.parametrize(
    ("mode", "choice"), [("AUTO", "auto"), ("NONE", "none"), ("ANY", "required")]
)
def test_function_calling_modes(mode, choice):
    req = parse(
        {
            "contents": [user("Weather?")],
            "tools": [WEATHER],
            "toolConfig": {"functionCallingConfig": {"mode": mode}},
        }
    )
    assert req.body["tool_choice"] == choice


def test_function_call_and_response_turns_pair_up():
    req = parse(
        {
            "contents": [
                user("Weather in Paris?"),
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
                },
                {
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "name": "get_weather",
                                "response": {"temp": 21},
                            }
                        }
                    ],
                },
            ],
            "tools": [WEATHER],
        }
    )
    assistant, tool = req.body["messages"][1:]
    [call] = assistant["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert tool == {"role": "tool", "tool_call_id": call["id"], "content": '{"temp":21}'}
    node_protocol.parse_chat({**req.body, "model": MODEL})


def test_earlier_thoughts_are_dropped():
    req = parse(
        {
            "contents": [
                user("Q"),
                {"role": "model", "parts": [{"text": "hmm", "thought": True}, {"text": "A"}]},
                user("Q2"),
            ]
        }
    )
    assert req.body["messages"][1] == {"role": "assistant", "content": "A"}


def test_json_output_becomes_response_format():
    req = parse(
        {
            "contents": [user("A city as JSON")],
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseSchema": {"type": "OBJECT", "properties": {"name": {"type": "STRING"}}},
            },
        }
    )
    assert req.body["response_format"]["json_schema"]["schema"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}},
    }
    plain = parse(
        {"contents": [user("x")], "generationConfig": {"responseMimeType": "application/json"}}
    )
    assert plain.body["response_format"] == {"type": "json_object"}


def test_an_unknown_field_at_any_depth_is_dropped_from_a_translation_and_named():
    # the API grows: a Gemini channel gets the body as sent, a translation leaves it out
    req = parse(
        {
            "contents": [{"role": "user", "parts": [{"text": "x", "futurePart": 1}]}],
            "generationConfig": {"temperature": 0, "future_option": True},
            "bogus": 1,
        }
    )
    assert sorted(req.dropped) == [
        "bogus: a field the translation does not carry",
        "contents[0].parts[0].future_part: a field the translation does not carry",
        "generation_config.future_option: a field the translation does not carry",
    ]
    assert req.body["messages"] == [{"role": "user", "content": "x"}]
    assert req.body["temperature"] == 0


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        ({}, "GenerateContentRequest.contents", "contents is not specified"),
        ({"contents": []}, "GenerateContentRequest.contents", "contents is not specified"),
        ({"contents": [{"role": "user", "parts": []}]}, "contents[0].parts", "must not be empty"),
        ({"contents": [{"role": "robot", "parts": [{"text": "x"}]}]}, "contents[0].role", "role"),
        (
            {"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "x"}}]}]},
            "contents[0].parts[0].inline_data.data",
            "Base64 decoding failed",
        ),
        (
            {"contents": [{"parts": [{"inlineData": {"data": "aGk="}}]}]},
            "contents[0].parts[0].inline_data.mime_type",
            "required",
        ),
        (
            {"contents": [user("x")], "generationConfig": {"temperature": "hot"}},
            "generation_config.temperature",
            "TYPE_FLOAT",
        ),
        (
            {"contents": [user("x")], "generationConfig": {"temperature": 3}},
            "generation_config.temperature",
            "out of range",
        ),
        (
            {"contents": [user("x")], "generationConfig": {"maxOutputTokens": 0}},
            "generation_config.max_output_tokens",
            "out of range",
        ),
        (
            {"contents": [user("x")], "generationConfig": {"candidateCount": 9}},
            "generation_config.candidate_count",
            "out of range",
        ),
        (
            {
                "contents": [
                    user("x"),
                    {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                    user("no answer to f"),
                ]
            },
            "contents[1]",
            "without responses",
        ),
        (
            {"contents": [user("x")], "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}},
            "tool_config.function_calling_config",
            "needs function declarations",
        ),
        (
            {
                "contents": [user("x")],
                "generationConfig": {"responseSchema": {"type": "OBJECT"}},
            },
            "generation_config.response_mime_type",
            "application/json",
        ),
    ],
)
def test_bad_requests_name_the_field(body, param, needle):
    err = error_of(body)
    assert err.status == 400
    assert err.param == param
    assert needle in err.message
    status, raw = gp.error_response(err)
    error = json.loads(raw)["error"]
    assert status == 400 and error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"


def test_non_object_body_is_a_clear_400():
    for body in ([], "x", None):
        with pytest.raises(GatewayError) as caught:
            gp.parse_generate(MODEL, body, stream=False, alt_sse=False)
        assert caught.value.status == 400


def test_count_tokens_in_both_request_shapes():
    plain = json.loads(gp.count_tokens(MODEL, {"contents": [user("hello world")]}))
    wrapped = json.loads(
        gp.count_tokens(
            MODEL,
            {
                "generateContentRequest": {
                    "model": f"models/{MODEL}",
                    "contents": [user("hello world")],
                }
            },
        )
    )
    expected = len(tokenizer.chat_prompt_tokens([{"role": "user", "content": "hello world"}]))
    assert plain == wrapped == {"totalTokens": expected}


def test_embed_and_batch_embed_requests():
    one = gp.parse_embed("sim-embed", {"content": {"parts": [{"text": "hello"}]}})
    assert one.upstream_path == "/v1/embeddings" and one.body["input"] == "hello"
    assert one.max_output_tokens == 0
    batch = gp.parse_batch_embed(
        "sim-embed",
        {
            "requests": [
                {"model": "models/sim-embed", "content": {"parts": [{"text": "a"}]}},
                {"model": "models/sim-embed", "content": {"parts": [{"text": "b"}]}},
            ]
        },
    )
    assert batch.body["input"] == ["a", "b"] and batch.endpoint == "batchEmbedContents"
    with pytest.raises(GatewayError) as other:
        gp.parse_batch_embed(
            "sim-embed",
            {"requests": [{"model": "models/x", "content": {"parts": [{"text": "a"}]}}]},
        )
    assert other.value.param == "requests[0].model"


# --------------------------------------------------------------------------- answers


def chat_completion(**message) -> dict:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5},
    }


def test_plain_answer_reads_back_through_the_sdk_types():
    req = parse({"contents": [user("Hi")]})
    usage = TokenUsage(input=10, cache_read=20, output=5)
    raw = req.response.render(chat_completion(content="Hello!"), usage, MODEL)
    reply = types.GenerateContentResponse.model_validate(json.loads(raw))
    assert reply.text == "Hello!"
    assert reply.candidates[0].finish_reason == types.FinishReason.STOP
    meta = reply.usage_metadata
    assert meta.prompt_token_count == 30 and meta.cached_content_token_count == 20
    assert meta.candidates_token_count == 5
    # the mapping back is the one the billing used
    assert from_gemini(json.loads(raw)["usageMetadata"]) == usage


def test_plain_function_call_answer():
    req = parse({"contents": [user("Weather?")], "tools": [WEATHER]})
    upstream = chat_completion(
        content=None,
        tool_calls=[
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    )
    upstream["choices"][0]["finish_reason"] = "tool_calls"
    raw = req.response.render(upstream, TokenUsage(input=3, output=4), MODEL)
    reply = types.GenerateContentResponse.model_validate(json.loads(raw))
    [call] = reply.function_calls
    assert call.name == "get_weather" and call.args == {"city": "Paris"}


def test_length_finish_is_max_tokens():
    req = parse({"contents": [user("Hi")]})
    upstream = chat_completion(content="x")
    upstream["choices"][0]["finish_reason"] = "length"
    body = json.loads(req.response.render(upstream, None, MODEL))
    assert body["candidates"][0]["finishReason"] == "MAX_TOKENS"


def test_garbage_answer_is_an_upstream_error():
    req = parse({"contents": [user("Hi")]})
    with pytest.raises(GatewayError) as caught:
        req.response.render({"choices": "no"}, None, MODEL)
    assert caught.value.status == 502


def stream_of(response, texts, *, tool=None, finish="stop") -> list[bytes]:
    out = [response.stream_start(MODEL)]
    for text in texts:
        chunk = {"id": "chatcmpl-x", "choices": [{"index": 0, "delta": {"content": text}}]}
        out.append(response.stream_chunk(chunk, MODEL))
    if tool:
        for piece in tool:
            delta = {"tool_calls": [{"index": 0, "function": piece}]}
            out.append(response.stream_chunk({"choices": [{"index": 0, "delta": delta}]}, MODEL))
    out.append(
        response.stream_chunk(
            {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}, MODEL
        )
    )
    out.append(response.stream_chunk({"choices": [], "usage": {"prompt_tokens": 9}}, MODEL))
    out.append(response.stream_end(TokenUsage(input=9, output=3), MODEL))
    return out


def test_sse_stream_reads_back_chunk_by_chunk():
    req = parse({"contents": [user("Hi")], "tools": [WEATHER]}, stream=True)
    frames = b"".join(
        stream_of(
            req.response,
            ["Hel", "lo"],
            tool=[{"name": "get_weather", "arguments": '{"ci'}, {"arguments": 'ty": "Oslo"}'}],
            finish="tool_calls",
        )
    )
    chunks = [
        types.GenerateContentResponse.model_validate(json.loads(frame[len("data: ") :]))
        for frame in frames.decode().split("\n\n")
        if frame
    ]
    assert [c.text for c in chunks[:2]] == ["Hel", "lo"]
    last = chunks[-1]
    assert last.function_calls[0].args == {"city": "Oslo"}
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata.prompt_token_count == 9
    assert last.usage_metadata.candidates_token_count == 3


def test_json_array_stream_is_one_valid_json_document():
    req = parse({"contents": [user("Hi")]}, stream=True, alt_sse=False)
    body = b"".join(stream_of(req.response, ["a", "b", "c"]))
    chunks = json.loads(body)
    assert [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks[:3]] == list("abc")
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] == 12


def test_stream_error_after_start_closes_the_array():
    req = parse({"contents": [user("Hi")]}, stream=True, alt_sse=False)
    first = req.response.stream_chunk({"choices": [{"index": 0, "delta": {"content": "a"}}]}, MODEL)
    err = GatewayError(OVERLOADED, "no_healthy_node", "gone")
    body = json.loads(first + req.response.stream_error(err))
    assert body[-1]["error"]["status"] == "UNAVAILABLE" and body[-1]["error"]["code"] == 503


def test_embed_answers():
    upstream = {"data": [{"index": 1, "embedding": [0.2]}, {"index": 0, "embedding": [0.1]}]}
    batch = gp.parse_batch_embed(
        "sim-embed", {"requests": [{"content": {"parts": [{"text": t}]}} for t in "ab"]}
    )
    assert json.loads(batch.response.render(upstream, None, "sim-embed")) == {
        "embeddings": [{"values": [0.1]}, {"values": [0.2]}]
    }
    one = gp.parse_embed("sim-embed", {"content": {"parts": [{"text": "a"}]}})
    assert json.loads(one.response.render(upstream, None, "sim-embed")) == {
        "embedding": {"values": [0.1]}
    }


# --------------------------------------------------------------------------- errors, models


@pytest.mark.parametrize(
    ("kind", "status", "name"),
    [
        (AUTHENTICATION, 401, "UNAUTHENTICATED"),
        (PAYMENT_REQUIRED, 402, "RESOURCE_EXHAUSTED"),
        (RATE_LIMIT, 429, "RESOURCE_EXHAUSTED"),
        (OVERLOADED, 503, "UNAVAILABLE"),
    ],
)
def test_errors_in_googles_format(kind, status, name):
    err = GatewayError(kind, "key_daily_cap_exceeded", "Daily cap reached.")
    code, raw = gp.error_response(err)
    body = json.loads(raw)["error"]
    assert code == status and body["code"] == status and body["status"] == name
    assert body["details"][0]["reason"] == "key_daily_cap_exceeded"


def test_models_page():
    models = [
        ModelInfo("sim-chat-small", "Sim chat", 8192, "chat", 0),
        ModelInfo("sim-embed", "Sim embed", 8192, "embedding", 0),
        ModelInfo("old-completion", "Old", 2048, "completion", 0),
    ]
    body = json.loads(gp.render_models(models))
    names = [m["name"] for m in body["models"]]
    assert names == ["models/sim-chat-small", "models/sim-embed"]
    assert "generateContent" in body["models"][0]["supportedGenerationMethods"]
    assert body["models"][1]["supportedGenerationMethods"] == ["embedContent", "batchEmbedContents"]
