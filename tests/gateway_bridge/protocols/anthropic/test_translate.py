"""The Anthropic adapter's translation to the node's OpenAI chat body, its prompt
estimate and affinity prefix, and ``count_tokens``."""

from __future__ import annotations

import json

import pytest

from console.kernel import tokens as tokenizer
from gateway_bridge.protocols import anthropic as ap
from gateway_bridge.protocols.base import GatewayError
from tests.gateway_bridge.protocols.anthropic.common import (
    MODEL,
    TOOL_USE_TURN,
    USER,
    WEATHER_TOOL,
    body,
    parse,
)
from tooling.simulator import protocol as node_protocol

# --------------------------------------------------------------------------- translation


def test_system_multi_turn_and_sampling_translate_to_an_openai_chat_body():
    call = parse(
        system="You are terse.",
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Part one"}, {"type": "text", "text": "two"}],
            },
        ],
        temperature=0,
        top_p=0.9,
        stop_sequences=["END"],
        stream=True,
    )
    assert call.protocol == "anthropic"
    assert call.endpoint == "messages"
    assert call.upstream_path == "/v1/chat/completions"
    assert call.model == MODEL
    assert call.body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Part one"}, {"type": "text", "text": "two"}],
            },
        ],
        "max_tokens": 64,
        "stream": True,
        "stop": ["END"],
        "temperature": 0,
        "top_p": 0.9,
    }
    assert call.stream is True
    assert call.client_wants_usage is True
    assert call.max_output_tokens == 64
    assert call.deterministic is True
    assert call.prefix_text.startswith(
        "<|start|>system<|sep|>You are terse.<|end|><|start|>user<|sep|>Hi<|end|>"
    )
    assert call.extra["anthropic_version"] == "2023-06-01"


def test_prefix_text_is_the_start_of_a_long_prompt_only():
    call = parse(system="S" * 3000, messages=[{"role": "user", "content": "U" * 3000}, USER])
    assert len(call.prefix_text) == ap.PREFIX_CHARS
    assert call.prefix_text.startswith("<|start|>system<|sep|>SSS")
    assert "<|start|>user<|sep|>UUU" in call.prefix_text


def test_default_temperature_is_not_deterministic():
    assert parse().deterministic is False
    assert parse(temperature=0.5).deterministic is False


def test_tool_use_and_tool_result_round_trip_to_tool_calls_and_tool_messages():
    call = parse(
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": "toolu_a",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_b",
                        "name": "get_weather",
                        "input": {"city": "Lyon"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here you go."},
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "18 C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_b",
                        "content": [{"type": "text", "text": "station down"}],
                        "is_error": True,
                    },
                ],
            },
        ],
    )
    assert call.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": WEATHER_TOOL["input_schema"],
            },
        }
    ]
    assert call.body["tool_choice"] == "required"
    assert call.body["parallel_tool_calls"] is False
    assert call.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "toolu_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "toolu_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Lyon"}'},
                },
            ],
        },
        # tool results first, in order, then the user's text of the same turn
        {"role": "tool", "tool_call_id": "toolu_a", "content": "18 C"},
        {"role": "tool", "tool_call_id": "toolu_b", "content": "Error: station down"},
        {"role": "user", "content": "Here you go."},
    ]
    assert call.extra["tool_names"] == ["get_weather"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice_maps_to_openai(choice, expected):
    assert parse(tools=[WEATHER_TOOL], tool_choice=choice).body["tool_choice"] == expected


def test_a_final_assistant_message_is_a_prefill_the_node_continues():
    call = parse(messages=[USER, {"role": "assistant", "content": "The weather is"}])
    assert call.body["messages"][-1] == {"role": "assistant", "content": "The weather is"}
    assert call.body["continue_final_message"] is True
    assert call.body["add_generation_prompt"] is False
    assert "continue_final_message" not in parse().body


def test_the_translated_body_is_one_the_node_accepts_and_counts_as_estimated():
    call = parse(
        system=[{"type": "text", "text": "Long shared system prompt, 東京."}],
        messages=[
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ],
    )
    node = node_protocol.parse_chat(call.body)
    assert len(node.prompt_ids) == call.prompt_tokens_estimate
    assert call.prompt_tokens_estimate == len(tokenizer.chat_prompt_tokens(call.body["messages"]))


def test_tools_and_tool_calls_add_to_the_estimate():
    plain = parse().prompt_tokens_estimate
    with_tools = parse(tools=[WEATHER_TOOL]).prompt_tokens_estimate
    assert with_tools > plain + 10
    call = parse(
        messages=[
            USER,
            TOOL_USE_TURN,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ]
    )
    assert call.prompt_tokens_estimate > len(tokenizer.chat_prompt_tokens(call.body["messages"]))
    node_protocol.parse_chat(call.body)  # tool messages and tool calls pass the node's checks


def test_count_tokens_validates_without_max_tokens():
    assert json.loads(ap.count_tokens(body(max_tokens=...))) == {
        "input_tokens": parse().prompt_tokens_estimate
    }
    assert ap.count_tokens_request(body(max_tokens=...)) == (MODEL, parse().prompt_tokens_estimate)
    with pytest.raises(GatewayError) as caught:
        ap.count_tokens(body(max_tokens=..., messages=[]))
    assert caught.value.param == "messages"
