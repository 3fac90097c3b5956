"""The Anthropic adapter's answers: a node's chat completion, plain and
streamed, as Anthropic messages and events."""

from __future__ import annotations

import json

import pytest

from console.kernel import tokens as tokenizer
from gateway_bridge.protocols import anthropic as ap
from gateway_bridge.protocols.base import (
    UPSTREAM,
    GatewayError,
)
from tests.gateway_bridge.protocols.anthropic.common import (
    MODEL,
    ROLE,
    TEXT_STREAM,
    TOOL_STREAM,
    WEATHER_TOOL,
    chunk,
    events,
    parse,
    play,
    render,
    upstream_answer,
)


def test_plain_text_answer_renders_as_an_anthropic_message():
    assert render(parse(), upstream_answer()) == {
        "id": "msg_3f2a",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "Sunny, 18 C."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            # input_tokens excludes the cache read, which is its own field
            "input_tokens": 176,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 1024,
            "output_tokens": 9,
        },
    }


def test_plain_tool_call_renders_as_tool_use_blocks():
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{not json"},
        },
    ]
    message = render(parse(tools=[WEATHER_TOOL]), upstream_answer(None, calls, "tool_calls"))
    assert message["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
    ]
    assert message["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("finish", "extra", "stop_reason", "stop_sequence"),
    [
        ("length", {}, "max_tokens", None),
        ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),
        ("stop", {"stop_reason": 2}, "end_turn", None),  # vLLM: an EOS token id
        ("stop", {"stop_reason": "OTHER"}, "end_turn", None),
    ],
)
def test_stop_reasons(finish, extra, stop_reason, stop_sequence):
    message = render(parse(stop_sequences=["END"]), upstream_answer(finish=finish, **extra))
    assert (message["stop_reason"], message["stop_sequence"]) == (stop_reason, stop_sequence)


@pytest.mark.parametrize(
    "garbage",
    [{}, {"choices": []}, {"choices": ["x"]}, {"choices": [{"message": "hi"}]}, {"error": "boom"}],
)
def test_a_node_answer_that_is_not_a_chat_completion_is_an_upstream_error(garbage):
    with pytest.raises(GatewayError) as caught:
        parse().response.render(garbage, None, MODEL)
    assert caught.value.kind == UPSTREAM
    status, raw = ap.error_response(caught.value)
    assert (status, json.loads(raw)["error"]["type"]) == (502, "api_error")


def test_without_node_usage_the_answer_counts_by_the_tokenizer_rule():
    call = parse()
    message = json.loads(call.response.render(upstream_answer(), None, MODEL))
    assert message["usage"]["input_tokens"] == call.prompt_tokens_estimate
    assert message["usage"]["output_tokens"] == tokenizer.count_tokens("Sunny, 18 C.")


def test_text_stream_is_anthropics_event_sequence():
    call = parse(stream=True)
    got = events(play(call, TEXT_STREAM))
    assert [name for name, _ in got] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in got)
    start = got[0][1]["message"]
    assert start["id"] == "msg_77"
    assert start["model"] == MODEL
    assert start["content"] == []
    assert start["usage"]["input_tokens"] == call.prompt_tokens_estimate
    assert got[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert [d["delta"] for _, d in got[3:5]] == [
        {"type": "text_delta", "text": "Sunny"},
        {"type": "text_delta", "text": ", 18 C."},
    ]
    assert got[5][1] == {"type": "content_block_stop", "index": 0}
    assert got[6][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {
            "input_tokens": 8,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 32,
            "output_tokens": 5,
        },
    }


def test_tool_call_stream_has_one_block_per_part_with_increasing_indexes():
    got = events(play(parse(stream=True, tools=[WEATHER_TOOL]), TOOL_STREAM))
    blocks = [(n, d) for n, d in got if n.startswith("content_block")]
    assert [(n, d["index"]) for n, d in blocks] == [
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_delta", 2),
        ("content_block_stop", 2),
    ]
    assert blocks[3][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_9a",
        "name": "get_weather",
        "input": {},
    }
    assert [d["delta"] for _, d in blocks[4:6]] == [
        {"type": "input_json_delta", "partial_json": '{"city": '},
        {"type": "input_json_delta", "partial_json": '"Paris"}'},
    ]
    assert blocks[7][1]["content_block"]["id"] == "toolu_9b"
    assert got[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert got[-1][0] == "message_stop"


def test_parallel_calls_all_numbered_zero_still_become_separate_blocks():
    def call(id_, name, args):
        return chunk(
            {"tool_calls": [{"index": 0, "id": id_, "function": {"name": name, "arguments": args}}]}
        )

    chunks = [ROLE, call("c1", "get_weather", '{"city":"Oslo"}'), call("c2", "get_time", "{}")]
    got = events(play(parse(stream=True), [*chunks, chunk({}, "tool_calls")]))
    starts = [d["content_block"] for n, d in got if n == "content_block_start"]
    assert [(b["id"], b["name"]) for b in starts] == [
        ("toolu_c1", "get_weather"),
        ("toolu_c2", "get_time"),
    ]


def test_stream_stopping_on_a_stop_sequence_says_so():
    call = parse(stream=True, stop_sequences=["\n\nHuman:"])
    chunks = [ROLE, chunk({"content": "Hi"}), chunk({}, "stop", stop_reason="\n\nHuman:")]
    delta = events(play(call, chunks))[-2][1]["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "\n\nHuman:"}


def test_stream_without_node_usage_still_reports_counted_usage():
    call = parse(stream=True)
    got = events(play(call, TEXT_STREAM[:-1]))
    assert got[-2][1]["usage"] == {
        "input_tokens": call.prompt_tokens_estimate,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": tokenizer.count_tokens("Sunny, 18 C."),
    }


def test_stream_that_ends_before_any_chunk_is_still_a_whole_message():
    got = events(play(parse(stream=True), []))
    assert [n for n, _ in got] == ["message_start", "ping", "message_delta", "message_stop"]


def test_stream_error_is_an_error_event_in_anthropics_format():
    call = parse(stream=True)
    call.response.stream_chunk(ROLE, MODEL)
    frame = call.response.stream_error(
        GatewayError(UPSTREAM, "upstream_dropped", "Node went away.")
    )
    assert events(frame) == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": "Node went away."}})
    ]
