"""The Gemini dialect: the OpenAI chat pivot written as Google's
GenerateContentRequest (checked against the official ``google-genai`` types,
which refuse unknown fields), Google's answers and SSE streams read back as
OpenAI chat objects with the usage Google reported, and Google's errors
mapped to the gateway's."""

from __future__ import annotations

import importlib
import json

import pytest
from google.genai import types

from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.usage_mapping import TokenUsage
from gateway_bridge.vendors import dialect_for

gemini = importlib.import_module("gateway_bridge.vendors.gemini")

MODEL = "gemini-2.5-flash"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "city": {"type": "string", "format": "uri-reference", "minLength": 1},
                "unit": {"type": ["string", "null"], "enum": ["C", "F"]},
                "days": {"type": "integer", "enum": [1, 3, 7]},
                "when": {"anyOf": [{"$ref": "#/$defs/Day"}, {"type": "null"}]},
            },
            "required": ["city", "ghost"],
            "additionalProperties": False,
            "$defs": {"Day": {"type": "string", "format": "date-time"}},
        },
        "strict": True,
    },
}


def from_chat(body: dict, stream: bool = False) -> dict:
    out = gemini.from_chat({"model": MODEL, **body}, MODEL, stream)
    # Google's own types take every field we send (they forbid unknown ones)
    for content in out["contents"]:
        types.Content.model_validate(content)
    if "systemInstruction" in out:
        types.Content.model_validate(out["systemInstruction"])
    for tool in out.get("tools", []):
        types.Tool.model_validate(tool)
    if "toolConfig" in out:
        types.ToolConfig.model_validate(out["toolConfig"])
    if "generationConfig" in out:
        types.GenerationConfig.model_validate(out["generationConfig"])
    return out


def refused(body: dict) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        gemini.from_chat({"model": MODEL, **body}, MODEL, False)
    assert caught.value.status == 400
    return caught.value


# --------------------------------------------------------------------------- the interface


def test_the_kind_gemini_gets_this_dialect_and_its_paths():
    assert dialect_for("gemini") is gemini and gemini.PROTOCOL == "gemini"
    assert gemini.auth_headers("AIza-secret", {"x-goog-api-key": "client"}) == [
        ("x-goog-api-key", "AIza-secret")
    ]
    assert gemini.auth_headers("", {}) == []
    assert gemini.path("chat.completions", MODEL, False) == (
        "/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert gemini.path("chat.completions", f"models/{MODEL}", True) == (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert gemini.path("embeddings", "gemini-embedding-001", False) == (
        "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    )
    with pytest.raises(GatewayError) as caught:
        gemini.path("completions", MODEL, False)
    assert caught.value.code == "unsupported" and caught.value.status == 400
    assert gemini.models_path == "/v1beta/models"


def test_native_path_keeps_the_query_but_never_a_key():
    assert gemini.native_path("streamGenerateContent", MODEL, True, "alt=sse") == (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert gemini.native_path("countTokens", MODEL, False, "") == (
        "/v1beta/models/gemini-2.5-flash:countTokens"
    )
    leaked = gemini.native_path("streamGenerateContent", MODEL, True, "key=AIza-secret&alt=sse")
    assert "AIza" not in leaked and leaked.endswith("?alt=sse")
    with pytest.raises(GatewayError):
        gemini.native_path("generateContent/../../files", MODEL, False, "")


# --------------------------------------------------------------------------- pivot → Gemini


def test_a_conversation_with_system_images_and_tools_becomes_generate_content():
    out = from_chat(
        {
            "messages": [
                {"role": "system", "content": "Be terse."},
                {"role": "developer", "content": [{"type": "text", "text": "Metric units."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Where is this, and what's the weather?"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://ex.com/a/street.JPG?s=1"},
                        },
                    ],
                },
                {"role": "user", "content": "Be quick."},
                {
                    "role": "assistant",
                    "content": "Paris. Checking the weather.",
                    "reasoning_content": "The Eiffel tower is visible.",
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp_c": 21}'},
                {"role": "user", "content": "Thanks!"},
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
        }
    )
    assert out["systemInstruction"] == {"parts": [{"text": "Be terse."}, {"text": "Metric units."}]}
    user, model, answer = out["contents"]
    assert user["role"] == "user" and user["parts"] == [
        {"text": "Where is this, and what's the weather?"},
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"fileData": {"fileUri": "https://ex.com/a/street.JPG?s=1", "mimeType": "image/jpeg"}},
        {"text": "Be quick."},  # consecutive user turns merge
    ]
    assert model == {
        "role": "model",
        "parts": [
            {"text": "Paris. Checking the weather."},
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": "skip_thought_signature_validator",
            },
        ],
    }
    # the tool message is named after its call; the user's text joins its turn
    assert answer == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp_c": 21}}},
            {"text": "Thanks!"},
        ],
    }
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


def test_json_schemas_are_cut_to_what_gemini_takes():
    out = from_chat(
        {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER_TOOL]}
    )
    [declaration] = out["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "get_weather"
    assert declaration["parameters"] == {
        "type": "OBJECT",
        "properties": {
            "city": {"type": "STRING", "minLength": 1},  # a format Gemini refuses is dropped
            "unit": {"type": "STRING", "nullable": True, "enum": ["C", "F"]},
            "days": {"type": "INTEGER"},  # Gemini's enums are strings
            "when": {"type": "STRING", "format": "date-time", "nullable": True},
        },
        "required": ["city"],
    }
    types.Schema.model_validate(declaration["parameters"])


def test_a_function_without_parameters_is_declared_without_them():
    tool = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
    out = from_chat({"messages": [{"role": "user", "content": "Time?"}], "tools": [tool]})
    assert out["tools"] == [{"functionDeclarations": [{"name": "now"}]}]


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
def test_tool_choice_becomes_function_calling_config(choice, config):
    out = from_chat(
        {
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER_TOOL],
            "tool_choice": choice,
        }
    )
    assert out["toolConfig"] == {"functionCallingConfig": config}


def test_sampling_and_output_format_become_generation_config():
    out = from_chat(
        {
            "messages": [{"role": "user", "content": "A city as JSON"}],
            "max_tokens": 50,
            "max_completion_tokens": 200,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop": "END",
            "seed": 7,
            "n": 2,
            "presence_penalty": 0.5,
            "parallel_tool_calls": True,
            "user": "u-1",
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "city",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "pop": {"type": "integer"}},
                        "required": ["name", "pop"],
                        "additionalProperties": False,
                    },
                },
            },
        }
    )
    assert out["generationConfig"] == {
        "maxOutputTokens": 200,  # max_completion_tokens wins
        "temperature": 0.2,
        "topP": 0.9,
        "seed": 7,
        "presencePenalty": 0.5,
        "candidateCount": 2,
        "stopSequences": ["END"],
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "OBJECT",
            "properties": {"name": {"type": "STRING"}, "pop": {"type": "INTEGER"}},
            "propertyOrdering": ["name", "pop"],
            "required": ["name", "pop"],
        },
    }
    plain = from_chat(
        {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}
    )
    assert plain["generationConfig"] == {"responseMimeType": "application/json"}


@pytest.mark.parametrize(
    ("effort", "thinking"),
    [
        ("none", {"thinkingBudget": 0}),
        ("minimal", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("low", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("medium", {"thinkingBudget": 8192, "includeThoughts": True}),
        ("high", {"thinkingBudget": 24576, "includeThoughts": True}),
    ],
)
def test_reasoning_effort_becomes_a_thinking_budget(effort, thinking):
    out = from_chat({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": effort})
    assert out["generationConfig"]["thinkingConfig"] == thinking


def test_documents_and_audio_become_inline_data():
    pdf = "JVBERi0xLjQK"
    out = from_chat(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "file",
                            "file": {
                                "file_data": f"data:application/pdf;base64,{pdf}",
                                "filename": "a.pdf",
                            },
                        },
                        {"type": "file", "file": {"file_data": pdf}},
                        {
                            "type": "input_audio",
                            "input_audio": {"data": "UklGRg==", "format": "wav"},
                        },
                    ],
                }
            ]
        }
    )
    assert out["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "application/pdf", "data": pdf}},
        {"inlineData": {"mimeType": "application/pdf", "data": pdf}},
        {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://ex.com/pic"}}
                        ],
                    }
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}
                ]
            },
            "messages[0].content[0].file.file_id",
        ),
        (
            {"messages": [{"role": "tool", "tool_call_id": "nobody", "content": "x"}]},
            "messages[0].tool_call_id",
        ),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ],
)
def test_what_gemini_cannot_take_is_a_400_naming_it(body, param):
    err = refused({"messages": [{"role": "user", "content": "x"}], **body})
    assert err.param == param
    assert param.split(".")[0].split("[")[0] in err.message


def test_embeddings_become_batch_embed_contents():
    out = gemini.from_chat(
        {"model": "gemini-embedding-001", "input": ["a", "b"], "dimensions": 256},
        "gemini-embedding-001",
        False,
    )
    assert out == {
        "requests": [
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": t}]},
                "outputDimensionality": 256,
            }
            for t in ("a", "b")
        ]
    }
    with pytest.raises(GatewayError) as caught:
        gemini.from_chat({"input": [[1, 2, 3]]}, "gemini-embedding-001", False)
    assert caught.value.param == "input"
    answer, usage = gemini.to_chat(
        {"embeddings": [{"values": [0.1, 0.2]}, {"values": [0.3, 0.4]}]}, "emb"
    )
    assert [d["embedding"] for d in answer["data"]] == [[0.1, 0.2], [0.3, 0.4]]
    assert answer["object"] == "list" and usage is None  # Google reports none: the gateway counts


# --------------------------------------------------------------------------- Gemini → OpenAI

USAGE_CACHED = {
    "promptTokenCount": 2061,
    "candidatesTokenCount": 9,
    "totalTokenCount": 2170,
    "cachedContentTokenCount": 2048,
    "thoughtsTokenCount": 100,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 2061}],
    "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 2048}],
}


def answer(parts: list[dict], finish: str = "STOP", usage: dict | None = None) -> dict:
    return {
        "candidates": [
            {"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}
        ],
        "usageMetadata": usage or {"promptTokenCount": 8, "candidatesTokenCount": 3},
        "modelVersion": MODEL,
        "responseId": "mK9oaLeFHcGgz7IPq5rAyAU",
    }


def test_a_plain_answer_with_thoughts_and_an_implicit_cache_hit():
    chat, usage = gemini.to_chat(
        answer(
            [
                {"text": "**Recalling geography**\nFrance's capital...", "thought": True},
                {"text": "Paris is the capital"},
                {"text": " of France."},
            ],
            usage=USAGE_CACHED,
        ),
        "public-model",
    )
    assert chat["object"] == "chat.completion" and chat["model"] == "public-model"
    assert chat["id"] == "chatcmpl-mK9oaLeFHcGgz7IPq5rAyAU"
    [choice] = chat["choices"]
    assert choice["message"] == {
        "role": "assistant",
        "content": "Paris is the capital of France.",
        "reasoning_content": "**Recalling geography**\nFrance's capital...",
    }
    assert choice["finish_reason"] == "stop"
    # promptTokenCount includes the cached tokens; thoughts are output
    assert usage == TokenUsage(input=13, cache_read=2048, output=109, reasoning=100)
    assert chat["usage"]["prompt_tokens"] == 2061
    assert chat["usage"]["prompt_tokens_details"] == {"cached_tokens": 2048}


def test_function_calls_become_tool_calls():
    chat, _ = gemini.to_chat(
        answer(
            [
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                    "thoughtSignature": "CiQBcsjafF0h2mTG",
                },
                {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
            ]
        ),
        "m",
    )
    [choice] = chat["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        },
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        },
    ]


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("OTHER", "stop"),
    ],
)
def test_finish_reasons(finish, reason):
    chat, _ = gemini.to_chat(answer([{"text": "partial"}], finish=finish), "m")
    assert chat["choices"][0]["finish_reason"] == reason


def test_a_blocked_prompt_is_an_empty_content_filtered_answer():
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8},
        "modelVersion": MODEL,
        "responseId": "x1",
    }
    chat, usage = gemini.to_chat(blocked, "m")
    assert chat["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": ""},
            "finish_reason": "content_filter",
        }
    ]
    assert usage == TokenUsage(input=8)


@pytest.mark.parametrize("body", [{}, {"candidates": "no"}, {"candidates": ["x"]}, []])
def test_an_answer_of_the_wrong_shape_is_an_upstream_error(body):
    with pytest.raises(GatewayError) as caught:
        gemini.to_chat(body, "m")
    assert caught.value.status == 502 and caught.value.code == "upstream_invalid_response"


def sse_events(usages: list[dict]) -> list[dict]:
    base = {"modelVersion": MODEL, "responseId": "r-7"}
    parts = [
        [{"text": "**Planning a greeting**", "thought": True}],
        [{"text": "Hello"}],
        [{"text": " there!"}],
    ]
    events = []
    for i, (p, u) in enumerate(zip(parts, usages, strict=True)):
        candidate = {"content": {"parts": p, "role": "model"}, "index": 0}
        if i == len(parts) - 1:
            candidate["finishReason"] = "STOP"
        events.append({"candidates": [candidate], "usageMetadata": u, **base})
    return events


RUNNING = [
    {"promptTokenCount": 12, "totalTokenCount": 40, "thoughtsTokenCount": 28},
    {
        "promptTokenCount": 12,
        "candidatesTokenCount": 1,
        "totalTokenCount": 41,
        "thoughtsTokenCount": 28,
    },
    {
        "promptTokenCount": 12,
        "candidatesTokenCount": 3,
        "totalTokenCount": 43,
        "thoughtsTokenCount": 28,
    },
]


def test_a_stream_reads_as_openai_chunks_with_the_last_running_usage():
    reader = gemini.StreamReader("public-model")
    chunks = []
    for event in sse_events(RUNNING):
        assert not reader.finished
        chunks += reader.feed(None, event)
    assert reader.finished
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-r-7" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [
        {"role": "assistant", "reasoning_content": "**Planning a greeting**"},
        {"content": "Hello"},
        {"content": " there!"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "stop"]
    # running totals: the last wins, never a sum
    assert reader.usage == TokenUsage(input=12, output=31, reasoning=28)


def test_a_streamed_function_call_is_one_complete_tool_call_chunk():
    reader = gemini.StreamReader("m")
    event = answer([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}])
    content, finish = reader.feed(None, event)
    [call] = content["choices"][0]["delta"]["tool_calls"]
    assert call == {
        "index": 0,
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    assert finish["choices"][0]["finish_reason"] == "tool_calls" and reader.finished


def test_a_stream_blocked_at_the_prompt_ends_content_filtered():
    reader = gemini.StreamReader("m")
    [chunk] = reader.feed(None, {"promptFeedback": {"blockReason": "SAFETY"}})
    assert chunk["choices"][0]["finish_reason"] == "content_filter" and reader.finished


def test_an_error_in_the_stream_raises_the_vendor_message():
    reader = gemini.StreamReader("m")
    reader.feed(None, sse_events(RUNNING)[0])
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    with pytest.raises(GatewayError) as caught:
        reader.feed(None, error)
    assert caught.value.status == 502 and "overloaded" in caught.value.message


def test_native_usage_of_an_answer_and_of_a_json_array_stream():
    assert gemini.native_usage(answer([{"text": "x"}], usage=USAGE_CACHED)) == TokenUsage(
        input=13, cache_read=2048, output=109, reasoning=100
    )
    assert gemini.native_usage(sse_events(RUNNING)) == TokenUsage(input=12, output=31, reasoning=28)
    assert gemini.native_usage({"embeddings": []}) is None


def test_native_stream_usage_watches_content_finish_and_usage():
    watch = gemini.NativeStreamUsage()
    events = [json.dumps(e).encode() for e in sse_events(RUNNING)]
    watch.feed(None, events[0])
    assert watch.content and not watch.finished  # a thought is the first token
    for data in events[1:]:
        watch.feed(None, data)
    assert watch.finished and watch.error is None
    assert watch.usage == TokenUsage(input=12, output=31, reasoning=28)
    broken = gemini.NativeStreamUsage()
    broken.feed(
        None, b'{"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}}'
    )
    assert broken.error.status == 429 and not broken.content


# --------------------------------------------------------------------------- errors

KEY_INVALID = {
    "error": {
        "code": 400,
        "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
        ],
    }
}
QUOTA = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "36.5s"},
        ],
    }
}


def google(code: int, status: str, message: str) -> dict:
    return {"error": {"code": code, "message": message, "status": status}}


@pytest.mark.parametrize(
    ("status", "body", "expected", "code"),
    [
        (400, KEY_INVALID, 401, "upstream_auth_failed"),
        (401, google(401, "UNAUTHENTICATED", "Request had invalid credentials."), 401, "upstream_auth_failed"),
        (403, google(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."), 403, "upstream_auth_failed"),
        (429, QUOTA, 429, "upstream_rate_limited"),
        (404, google(404, "NOT_FOUND", "models/gemini-9 is not found for API version v1beta."), 404, "upstream_client_error"),
        (400, google(400, "INVALID_ARGUMENT", "Budget 0 is invalid."), 400, "upstream_client_error"),
        (503, google(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), 502, "upstream_error"),
        (500, google(500, "INTERNAL", "An internal error has occurred."), 502, "upstream_error"),
    ],
)  # fmt: skip
def test_googles_errors_map_to_the_gateways(status, body, expected, code):
    err = gemini.error_of(status, json.dumps(body).encode())
    assert (err.status, err.code) == (expected, code)
    assert body["error"]["message"] in err.message


def test_quota_errors_carry_googles_retry_delay():
    err = gemini.error_of(429, json.dumps(QUOTA).encode())
    assert ("retry-after", "37") in err.headers


def test_an_error_wrapped_in_a_json_array_and_bodies_that_are_not_json():
    wrapped = gemini.error_of(400, json.dumps([KEY_INVALID]).encode())
    assert (wrapped.status, wrapped.code) == (401, "upstream_auth_failed")
    html = gemini.error_of(502, b"<html><body><h1>502 Bad Gateway</h1></body></html>")
    assert html.status == 502 and "HTTP 502" in html.message and "<html>" not in html.message
    empty = gemini.error_of(413, b"")
    assert empty.status == 413 and "HTTP 413" in empty.message
