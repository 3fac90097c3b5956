"""Property tests of the Anthropic paths added for vendor channels: whatever a
client or the vendor sends, the client adapter (media blocks, untranslatable
fields) and the Anthropic and OpenAI dialects either return a valid result or
raise a ``GatewayError`` — never another exception, which would be a 500 with
no protocol body."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway_bridge.protocols import anthropic
from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.usage_mapping import TokenUsage
from gateway_bridge.vendors import dialect_for
from tests.gateway_bridge.protocols.test_properties import (
    ANTHROPIC_KEYS,
    JSON,
    PROPERTY,
    check,
    check_call,
    near,
)

an = dialect_for("anthropic")
oa = dialect_for("openai")

IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
MEDIA_MESSAGES = [
    {
        "model": "c",
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "container": "container_1",
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look."},
                    IMAGE,
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
                        "title": "a.pdf",
                        "context": "From the archive.",
                        "citations": {"enabled": True},
                    },
                    {"type": "document", "source": {"type": "content", "content": [IMAGE]}},
                    {"type": "search_result", "source": "s", "title": "t", "content": []},
                ],
            }
        ],
    }
]  # fmt: skip


def attempt(fn, *args) -> tuple[object, GatewayError | None]:
    """(result, None), or (None, the GatewayError): any other exception fails the test."""
    try:
        return fn(*args), None
    except GatewayError as err:
        return None, err


MEDIA_KEYS = (*ANTHROPIC_KEYS, "source", "media_type", "url", "file_id", "title", "context")

PIVOTS = [
    {
        "model": "m",
        "max_tokens": 4096,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hi"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                    {"type": "file", "file": {"filename": "a.pdf", "file_data": "JVBE"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "parallel_tool_calls": False,
        "reasoning_effort": "medium",
        "stop": ["END"],
        "temperature": 0.5,
        "user": "u",
    }
]
PIVOT_KEYS = ("n", "logprobs", "response_format", "seed", "audio", "modalities", "stream_options")

ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "text", "text": "Hi"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 4, "cache_creation": {"ephemeral_1h_input_tokens": 2}},
}  # fmt: skip
EVENTS = [
    {"type": "message_start", "message": {**ANSWER, "content": [], "stop_reason": None}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "x"}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "thinking_delta", "thinking": "y"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
]  # fmt: skip


@PROPERTY
@given(st.sampled_from(MEDIA_MESSAGES).flatmap(lambda b: near(b, MEDIA_KEYS)) | JSON)
def test_client_bodies_with_media_parse_or_are_refused(body):
    call = check(anthropic.parse_messages, body, {})
    check_call(call)
    if call is not None:
        assert all(isinstance(e, str) and ": " in e for e in call.untranslatable)
        # what reaches another vendor is what the Anthropic dialect can write or refuse
        check(an.from_chat, {**call.body, "max_tokens": 4096}, "claude", call.stream)


@PROPERTY
@given(st.sampled_from(PIVOTS).flatmap(lambda b: near(b, PIVOT_KEYS)) | JSON, st.booleans())
def test_any_pivot_becomes_a_messages_request_or_a_400(body, stream):
    if not isinstance(body, dict):
        return
    out, err = attempt(an.from_chat, body, "claude", stream)
    if err is not None:
        assert err.status == 400 and err.message.startswith(f"{err.param}: ")
        return
    orjson.dumps(out)
    assert out["messages"] and isinstance(out["max_tokens"], int)
    for turn in out["messages"]:
        assert turn["role"] in ("user", "assistant") and turn["content"]


@PROPERTY
@given(near(ANSWER) | JSON)
def test_any_answer_becomes_a_chat_completion_or_a_502(obj):
    result, err = attempt(an.to_chat, obj, "public")
    if err is not None:
        assert err.status == 502
        return
    answer, usage = result
    orjson.dumps(answer)
    assert usage is None or isinstance(usage, TokenUsage)


@PROPERTY
@given(st.lists(st.sampled_from(EVENTS).flatmap(near) | JSON, max_size=8))
def test_any_event_stream_is_read_or_ends_with_a_gateway_error(events):
    reader = an.StreamReader("public")
    native = an.NativeStreamUsage()
    for data in events:
        native.feed(None, orjson.dumps(data))
        if not isinstance(data, dict):
            continue
        chunks, err = attempt(reader.feed, None, data)
        if err is not None:
            assert err.status in (502, 503)
            break
        orjson.dumps(chunks)
    assert reader.usage is None or isinstance(reader.usage, TokenUsage)
    assert native.usage is None or isinstance(native.usage, TokenUsage)


@PROPERTY
@given(st.integers(100, 599), st.binary(max_size=64) | JSON.map(orjson.dumps))
def test_any_error_answer_is_a_gateway_error(status, raw):
    for dialect in (an, oa):
        err = dialect.error_of(status, raw)
        assert isinstance(err, GatewayError) and 400 <= err.status <= 599 and err.message
        native = dialect.NativeStreamUsage()
        native.feed(None, raw)  # never raises
