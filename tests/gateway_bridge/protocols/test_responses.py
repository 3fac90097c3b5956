"""The Responses API adapter on its own: a request's items, tools and options
as the chat pivot the node gets, and the node's chunks as Responses' typed
events and response object."""

from __future__ import annotations

import json

import pytest

from gateway_bridge.protocols.base import UPSTREAM, GatewayError
from gateway_bridge.protocols.responses import continue_from, conversation, parse_responses
from gateway_bridge.usage_mapping import TokenUsage, from_openai, to_responses

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def events_of(frames: bytes) -> list[dict]:
    out = []
    for frame in frames.decode().split("\n\n"):
        if frame.strip():
            event, data = frame.split("\n")
            payload = json.loads(data.removeprefix("data: "))
            assert event == f"event: {payload['type']}"
            out.append(payload)
    return out


def test_input_items_become_the_pivots_messages():
    req = parse_responses(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"type": "message", "role": "developer", "content": "Sandbox: read-only."},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this? "},
                        {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
                    ],
                },
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me look."}],
                },
                {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a cat"},
            ],
        }
    )
    assert req.protocol == "openai" and req.endpoint == "responses"
    assert req.upstream_path == "/v1/chat/completions"
    assert req.body["messages"] == [
        {"role": "system", "content": "Be brief.\n\nSandbox: read-only."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this? "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
    ]


def test_tools_and_options_translate_and_account_fields_stay_behind():
    req = parse_responses(
        {
            "model": "m",
            "input": "Weather in Paris?",
            "tools": [TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "max_output_tokens": 50,
            "reasoning": {"effort": "high", "summary": "auto"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "temperature": 0.2,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k",
            "metadata": {"a": "b"},
        }
    )
    assert req.body == {
        "model": "m",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather in a city",
                    "parameters": TOOL["parameters"],
                    "strict": True,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "max_tokens": 50,
        "temperature": 0.2,
        "reasoning_effort": "high",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "w", "schema": {"type": "object"}},
        },
    }
    assert req.max_output_tokens == 50 and not req.deterministic
    assert req.extra["responses"]["store"] is False


def test_a_plain_answer_with_a_tool_call_is_a_response_object():
    req = parse_responses({"model": "m", "input": "hi", "tools": [TOOL]})
    adapter = req.response
    adapter.response_id, adapter.created_at = "resp_abc", 1700000000
    upstream = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    usage = TokenUsage(input=7, cache_read=3, output=9, reasoning=2)
    body = json.loads(adapter.render(upstream, usage, "public-model"))
    assert body["id"] == "resp_abc" and body["created_at"] == 1700000000
    assert body["model"] == "public-model" and body["status"] == "completed"
    assert [item["type"] for item in body["output"]] == ["message", "function_call"]
    assert body["output"][0]["content"][0]["text"] == "Checking."
    assert body["output"][1]["call_id"] == "call_1"
    assert body["output"][1]["arguments"] == '{"city":"Paris"}'
    assert body["tools"] == [TOOL] and body["tool_choice"] == "auto"
    assert body["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 3},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 19,
    }
    assert adapter.result == body


def test_stream_events_for_text_then_a_tool_call():
    req = parse_responses({"model": "m", "input": "hi", "tools": [TOOL], "stream": True})
    adapter = req.response
    adapter.response_id = "resp_s"
    frames = adapter.stream_start("pub")
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "Let me "}}]},
        {"choices": [{"index": 0, "delta": {"content": "check."}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_9",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": ""},
                            }
                        ]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 8}},
    ]  # fmt: skip
    for chunk in chunks:
        frames += adapter.stream_chunk(chunk, "pub")
    frames += adapter.stream_end(TokenUsage(input=12, output=8), "pub")
    events = events_of(frames)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["response"]["status"] == "in_progress"
    assert events[6]["text"] == "Let me check."
    assert events[12]["arguments"] == '{"city":"Oslo"}' and events[12]["output_index"] == 1
    final = events[-1]["response"]
    assert final["id"] == "resp_s" and final["model"] == "pub"
    assert final["output"][1] == {
        "type": "function_call",
        "id": events[9]["item"]["id"],
        "call_id": "call_9",
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
        "status": "completed",
    }
    assert final["usage"]["input_tokens"] == 12 and final["usage"]["output_tokens"] == 8


def test_a_spent_budget_ends_incomplete():
    adapter = parse_responses({"model": "m", "input": "hi", "max_output_tokens": 2}).response
    adapter.stream_start("m")
    adapter.stream_chunk({"choices": [{"index": 0, "delta": {"content": "Once upon"}}]}, "m")
    adapter.stream_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, "m")
    last = events_of(adapter.stream_end(None, "m"))[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    # No usage from the node: the prompt estimate and the streamed text's tokens.
    assert last["response"]["usage"]["input_tokens"] == adapter.input_estimate
    assert last["response"]["usage"]["output_tokens"] > 0


def test_a_broken_stream_ends_with_error_and_failed():
    adapter = parse_responses({"model": "m", "input": "hi", "stream": True}).response
    adapter.stream_start("m")
    adapter.stream_chunk({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}, "m")
    error = GatewayError(UPSTREAM, "upstream_stream_broken", "The node's stream broke.")
    events = events_of(adapter.stream_error(error))
    assert [e["type"] for e in events] == ["error", "response.failed"]
    assert events[0]["code"] == "upstream_stream_broken"
    assert events[1]["response"]["status"] == "failed"
    assert events[1]["response"]["error"]["message"] == "The node's stream broke."
    assert adapter.result is None  # nothing to store


def test_a_continued_conversation_comes_before_the_new_input():
    first = parse_responses({"model": "m", "instructions": "Old rules.", "input": "I am Ada."})
    first.response.render(
        {"choices": [{"message": {"content": "Hello Ada."}, "finish_reason": "stop"}]},
        TokenUsage(input=5, output=3),
        "m",
    )
    history = conversation(first)
    assert [item.get("role") for item in history] == ["user", "assistant"]
    req = parse_responses(
        {"model": "m", "instructions": "New rules.", "input": "Who am I?", "previous_response_id": "resp_1"}
    )  # fmt: skip
    alone = req.prompt_tokens_estimate
    continue_from(req, history)
    assert req.body["messages"] == [
        {"role": "system", "content": "New rules."},  # earlier instructions are not carried
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "Who am I?"},
    ]
    assert req.prompt_tokens_estimate > alone
    assert conversation(req)[:2] == history


@pytest.mark.parametrize(
    "usage",
    [TokenUsage(input=10), TokenUsage(input=4, cache_read=6, output=20, reasoning=5)],
)
def test_responses_usage_reads_back_to_the_same_counts(usage):
    assert from_openai(to_responses(usage)) == usage


def test_the_nodes_reasoning_is_a_reasoning_item_before_the_answer():
    adapter = parse_responses({"model": "m", "input": "2+2?", "stream": True}).response
    frames = adapter.stream_start("m")
    for delta in (
        {"reasoning_content": "Two and two "},
        {"reasoning_content": "make four."},
        {"content": "4"},
    ):
        frames += adapter.stream_chunk({"choices": [{"index": 0, "delta": delta}]}, "m")
    frames += adapter.stream_end(TokenUsage(input=5, output=7, reasoning=5), "m")
    events = events_of(frames)
    assert [e["type"] for e in events][2:7] == [
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
    ]
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][0]["content"] == [
        {"type": "reasoning_text", "text": "Two and two make four."}
    ]
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 5}
    plain = parse_responses({"model": "m", "input": "2+2?"}).response
    body = json.loads(
        plain.render(
            {"choices": [{"message": {"reasoning_content": "Sum.", "content": "4"}}]}, None, "m"
        )
    )
    assert [item["type"] for item in body["output"]] == ["reasoning", "message"]
