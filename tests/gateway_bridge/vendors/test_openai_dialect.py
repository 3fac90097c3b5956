"""The OpenAI dialect (OpenAI and OpenAI-compatible channels): the pivot passes
as it is, answers and streams pass back with their usage, and the vendors'
error bodies become the gateway's errors."""

from __future__ import annotations

import json

import pytest

from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.usage_mapping import TokenUsage
from gateway_bridge.vendors import dialect_for, takes_as_sent

oa = dialect_for("openai")


def test_both_openai_kinds_and_unknown_kinds_use_this_dialect():
    assert dialect_for("openai_compatible") is oa
    assert dialect_for("something_new") is oa
    assert oa.PROTOCOL == "openai"


def test_bearer_auth_and_none_without_a_secret():
    assert oa.auth_headers("sk-test", {"anthropic-version": "x"}) == [
        ("authorization", "Bearer sk-test")
    ]
    assert oa.auth_headers("", {}) == []


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        ("chat.completions", "/v1/chat/completions"),
        ("completions", "/v1/completions"),
        ("embeddings", "/v1/embeddings"),
    ],
)
def test_paths(endpoint, path):
    assert oa.path(endpoint, "m", True) == path
    assert oa.native_path(endpoint, "m", True, "") == path
    assert oa.models_path == "/v1/models"


def test_an_endpoint_openai_lacks_is_a_400():
    with pytest.raises(GatewayError) as caught:
        oa.path("generateContent", "m", False)
    assert (caught.value.status, caught.value.code) == (400, "unsupported")


def test_from_chat_sets_the_channels_model_on_a_copy():
    body = {"model": "public", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    out = oa.from_chat(body, "gpt-4o-2024-08-06", False)
    assert out == {**body, "model": "gpt-4o-2024-08-06"}
    assert body["model"] == "public"


def test_a_streamed_pivot_asks_for_the_usage_chunk_and_stays_as_the_client_sent_it():
    body = {"model": "public", "messages": [], "stream": True}
    out = oa.from_chat(body, "served", True)
    assert out == {**body, "model": "served", "stream_options": {"include_usage": True}}
    assert body == {"model": "public", "messages": [], "stream": True}  # the next try's pivot


@pytest.mark.parametrize(
    ("kind", "protocol", "endpoint", "as_sent"),
    [
        ("openai", "openai", "responses", True),
        ("openai", "openai", "chat.completions", False),
        ("openai_compatible", "openai", "responses", False),
        ("anthropic", "anthropic", "messages", True),
        ("anthropic", "openai", "chat.completions", False),
        ("gemini", "gemini", "generateContent", True),
        ("some_future_kind", "openai", "chat.completions", False),
    ],
)
def test_which_calls_a_channel_takes_as_the_client_sent_them(kind, protocol, endpoint, as_sent):
    assert takes_as_sent(kind, protocol, endpoint) is as_sent


ANSWER = {
    "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello!", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 120, "audio_tokens": 0},
    },
}


def test_the_answer_is_the_pivots_as_it_came_and_its_usage_is_read_from_it():
    answer, usage = oa.to_chat(ANSWER, "public")
    assert answer is ANSWER and usage is None  # the client's adapter reads a chat object's
    assert oa.native_usage(ANSWER) == TokenUsage(
        input=176, cache_read=1024, output=300, reasoning=120
    )
    assert oa.stream_reader("public") is None  # chunks are relayed as they came


@pytest.mark.parametrize(
    ("status", "expected_status", "code"),
    [
        (400, 400, "upstream_rejected"),
        (404, 404, "upstream_rejected"),
        (429, 429, "upstream_rate_limited"),
        (500, 502, "upstream_error"),
        (503, 502, "upstream_error"),
    ],
)
def test_a_failed_answer_is_the_clients_error_or_the_nodes_failure(status, expected_status, code):
    err = oa.translated_error(status, b'{"error": {"message": "nope"}}')
    assert (err.status, err.code) == (expected_status, code)
    assert "nope" in err.message


def chunk(delta, finish=None, usage=None):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }


USAGE = {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}
STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Thinking."}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
    chunk({}, "stop"),
    {**chunk({}), "choices": [], "usage": USAGE},
]


def payloads(chunks) -> list[bytes]:
    return [json.dumps(c, separators=(", ", ": ")).encode() for c in chunks] + [b"[DONE]"]


def test_a_native_stream_is_read_for_usage_first_token_and_end():
    native = oa.NativeStreamUsage()
    content = []
    for data in payloads(STREAM):
        native.feed(None, data)
        content.append(native.content)
    assert content[:2] == [False, True]  # the role chunk is no token; reasoning is
    assert native.usage == TokenUsage(input=40, output=5)
    assert native.finished and native.error is None


def test_a_native_stream_counts_tool_calls_as_content_and_ends_at_done():
    native = oa.NativeStreamUsage()
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    native.feed(None, json.dumps(chunk({"role": "assistant"})).encode())
    assert not native.content
    native.feed(None, json.dumps(chunk({"tool_calls": [call]})).encode())
    assert native.content and not native.finished
    native.feed(None, b"[DONE]")
    assert native.finished and native.usage is None


@pytest.mark.parametrize(
    "error",
    [
        {"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}},
        {"object": "error", "message": "CUDA out of memory", "type": "InternalServerError"},
    ],
)
def test_an_error_chunk_mid_stream_is_the_vendors_failure(error):
    native = oa.NativeStreamUsage()
    for data in payloads(STREAM[:3])[:-1]:  # the first token came, no [DONE]
        native.feed(None, data)
    native.feed(None, json.dumps(error).encode())
    assert native.error.status == 502 and native.error.message == "CUDA out of memory"


@pytest.mark.parametrize(
    ("status", "raw", "expected_status", "code", "words"),
    [
        (
            400,
            {"error": {"message": "Invalid value for 'n'", "type": "invalid_request_error", "param": "n", "code": "invalid_value"}},
            400, "invalid_value", "Invalid value for 'n'",
        ),
        (
            401,
            {"error": {"message": "Incorrect API key provided: sk-proj-****************abcd.", "type": "invalid_request_error", "code": "invalid_api_key"}},
            401, "upstream_auth_failed", "Incorrect API key provided: sk-***",
        ),
        (403, {"error": {"message": "Project does not have access", "type": "invalid_request_error"}}, 403, "upstream_auth_failed", "access"),
        (
            429,
            {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}},
            429, "insufficient_quota", "quota",
        ),
        (400, {"object": "error", "message": "max_tokens is too large", "type": "BadRequestError", "code": 400}, 400, "BadRequestError", "too large"),
        (404, {"detail": "Not Found"}, 404, "upstream_client_error", "Not Found"),
        (500, {"error": {"message": "The server had an error", "type": "server_error"}}, 502, "upstream_error", "server had an error"),
        (502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", 502, "upstream_error", "not JSON"),
        (503, b"", 502, "upstream_error", "no body"),
    ],
)  # fmt: skip
def test_error_of(status, raw, expected_status, code, words):
    raw = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    err = oa.error_of(status, raw)
    assert (err.status, err.code) == (expected_status, code)
    assert words in err.message
    assert "abcd" not in err.message and "<html>" not in err.message


def responses_events(*events: dict) -> list[bytes]:
    return [json.dumps({"sequence_number": i, **e}).encode() for i, e in enumerate(events)]


def test_a_native_responses_stream_is_read_for_usage_text_and_its_final_response():
    head = {"id": "resp_1", "status": "in_progress", "error": None, "usage": None}
    final = {
        **head,
        "status": "completed",
        "output": [{"type": "message", "id": "msg_1", "content": []}],
        "usage": {
            "input_tokens": 30,
            "input_tokens_details": {"cached_tokens": 10},
            "output_tokens": 4,
            "output_tokens_details": {"reasoning_tokens": 1},
        },
    }
    native = oa.NativeStreamUsage()
    events = responses_events(
        {"type": "response.created", "response": head},
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_1"}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hello"},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": " there"},
        {"type": "response.completed", "response": final},
    )
    for data in events[:2]:
        native.feed("x", data)
    assert not native.content and native.usage is None
    for data in events[2:4]:
        native.feed("x", data)
    # A stream cut here is billed for the text streamed so far.
    assert native.content and native.streamed_text == "Hello there" and not native.finished
    native.feed("response.completed", events[4])
    assert native.usage == TokenUsage(input=20, cache_read=10, output=4, reasoning=1)
    assert native.finished and native.final == final and native.error is None


def test_a_failed_native_response_is_the_vendors_failure():
    native = oa.NativeStreamUsage()
    failed = {
        "id": "resp_1",
        "status": "failed",
        "error": {"code": "server_error", "message": "boom"},
    }
    native.feed(
        "response.failed", responses_events({"type": "response.failed", "response": failed})[0]
    )
    assert native.error is not None and native.error.status == 502
    assert "boom" in native.error.message and native.final is None


@pytest.mark.parametrize("response", [None, "broken", ["a list"]])
def test_a_failed_native_response_without_its_response_object_is_still_a_502(response):
    """A broken vendor's ``response.failed`` with no (or no object as) ``response``:
    the call ends as the vendor's failure, not as an error of the gateway's own."""
    native = oa.NativeStreamUsage()
    event = {"type": "response.failed"}
    if response is not None:
        event["response"] = response
    native.feed("response.failed", responses_events(event)[0])
    assert native.error is not None and native.error.status == 502
    assert native.error.message == "The vendor's response failed." and native.final is None
