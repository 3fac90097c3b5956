"""The Gemini dialect's answers: Google's answers and SSE streams read back as
OpenAI chat objects with the usage Google reported (native ones too), and
Google's errors mapped to the gateway's."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.usage_mapping import TokenUsage

gemini = importlib.import_module("gateway_bridge.vendors.gemini")

MODEL = "gemini-2.5-flash"

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
    calls = choice["message"]["tool_calls"]
    prefix = calls[0]["id"][: -len("0")]
    assert re.fullmatch(r"call_[0-9a-f]{12}_", prefix)
    assert calls == [
        {
            "id": prefix + "0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        },
        {
            "id": prefix + "1",
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
    assert re.fullmatch(r"call_[0-9a-f]{12}_0", call.pop("id"))
    assert call == {
        "index": 0,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    assert finish["choices"][0]["finish_reason"] == "tool_calls" and reader.finished


def test_the_calls_of_two_answers_never_share_an_id():
    # Gemini's calls carry no id; a client keyed on ids (Claude Code) took a later
    # answer's "call_0" for the earlier call answered again
    event = answer([{"functionCall": {"name": "Read", "args": {"file_path": "/a"}}}])
    first, _ = gemini.StreamReader("m").feed(None, event)
    second, _ = gemini.StreamReader("m").feed(None, event)
    ids = {c["choices"][0]["delta"]["tool_calls"][0]["id"] for c in (first, second)}
    assert len(ids) == 2


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
