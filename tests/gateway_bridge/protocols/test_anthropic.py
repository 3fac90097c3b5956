"""The Anthropic Messages adapter: Anthropic's validation, the translation to
the node's OpenAI chat protocol, and the answers (plain and streamed) back —
checked against the official ``anthropic`` SDK, which must see the same
messages, events, tool calls and usage it would see from Anthropic."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from console import tokens as tokenizer
from gateway_bridge.protocols import anthropic as ap
from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    NOT_FOUND,
    OVERLOADED,
    PAYMENT_REQUIRED,
    RATE_LIMIT,
    REQUEST_TOO_LARGE,
    TIMEOUT,
    UPSTREAM,
    GatewayError,
    ModelInfo,
)
from gateway_bridge.usage_mapping import from_openai
from inference_node.server import protocol as node_protocol

MODEL = "claude-local"
USER = {"role": "user", "content": "What is the weather in Paris?"}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def body(**fields) -> dict:
    base = {"model": MODEL, "max_tokens": 64, "messages": [USER]}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ...}


def parse(**fields):
    return ap.parse_messages(body(**fields), {"anthropic-version": "2023-06-01"})


def events(data: bytes) -> list[tuple[str, dict]]:
    """The (event, data) pairs of an SSE byte stream."""
    out = []
    for frame in data.decode().split("\n\n"):
        if not frame.strip():
            continue
        lines = dict(line.split(": ", 1) for line in frame.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


# --------------------------------------------------------------------------- validation

TOOL_USE_TURN = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
}

BAD_REQUESTS = [
    # (request fields, param, words the message must contain)
    ({"model": ...}, "model", "Field required"),
    ({"model": 7}, "model", "valid string"),
    ({"model": ""}, "model", "at least 1 character"),
    ({"max_tokens": ...}, "max_tokens", "Field required"),
    ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    ({"max_tokens": 1.5}, "max_tokens", "valid integer"),
    ({"max_tokens": True}, "max_tokens", "valid integer"),
    ({"messages": ...}, "messages", "Field required"),
    ({"messages": []}, "messages", "at least one message"),
    ({"messages": "hi"}, "messages", "valid list"),
    ({"messages": ["hi"]}, "messages.0", "valid dictionary"),
    ({"messages": [{"content": "hi"}]}, "messages.0.role", "Field required"),
    ({"messages": [{"role": "user"}]}, "messages.0.content", "Field required"),
    ({"messages": [{"role": "bot", "content": "hi"}]}, "messages.0.role", "'user' or 'assistant'"),
    (
        {"messages": [{"role": "system", "content": "hi"}]},
        "messages.0.role",
        "top-level `system` parameter",
    ),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content", "valid list"),
    (
        {"messages": [{"role": "user", "content": "hi", "name": "bob"}]},
        "messages.0.name",
        "Extra inputs are not permitted",
    ),
    ({"messages": [{"role": "user", "content": ""}]}, "messages.0", "non-empty content"),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
        "messages.0.content.0.text",
        "must be non-empty",
    ),
    (
        {"messages": [{"role": "user", "content": [{"text": "hi"}]}]},
        "messages.0.content.0.type",
        "Field required",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
        "messages.0.content.0.type",
        "Input tag 'video'",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                        }
                    ],
                }
            ]
        },
        "messages.0.content.0",
        "image content blocks are not supported",
    ),
    (
        {"messages": [USER, {"role": "assistant", "content": "Sunny. "}]},
        "messages.1",
        "trailing whitespace",
    ),
    (
        {"messages": [{"role": "user", "content": [TOOL_USE_TURN["content"][0]]}]},
        "messages.0.content.0.type",
        "only allowed in assistant messages",
    ),
    (
        {"messages": [USER, TOOL_USE_TURN]},
        "messages.1",
        "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1",
    ),
    (
        {"messages": [USER, TOOL_USE_TURN, {"role": "user", "content": "and?"}]},
        "messages.1",
        "without `tool_result` blocks",
    ),
    (
        {
            "messages": [
                USER,
                TOOL_USE_TURN,
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}],
                },
            ]
        },
        "messages.2.content.0",
        "unexpected `tool_use_id` found in `tool_result` blocks: toolu_9",
    ),
    (
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "bad id!", "name": "f", "input": {}}],
                },
            ]
        },
        "messages.1.content.0.id",
        "should match pattern",
    ),
    (
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": "{}"}],
                },
            ]
        },
        "messages.1.content.0.input",
        "valid dictionary",
    ),
    ({"system": 3}, "system", "valid list"),
    ({"system": [{"type": "image"}]}, "system.0", "image content blocks are not supported"),
    ({"temperature": 1.5}, "temperature", "less than or equal to 1"),
    ({"temperature": -0.1}, "temperature", "greater than or equal to 0"),
    ({"temperature": "hot"}, "temperature", "valid number"),
    ({"top_p": 2}, "top_p", "less than or equal to 1"),
    ({"top_k": -1}, "top_k", "greater than or equal to 0"),
    ({"stream": "yes"}, "stream", "valid boolean"),
    ({"stop_sequences": "END"}, "stop_sequences", "valid list"),
    ({"stop_sequences": ["END", 3]}, "stop_sequences.1", "valid string"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema", "Field required"),
    (
        {"tools": [{"name": "bad name", "input_schema": {"type": "object"}}]},
        "tools.0.name",
        "pattern",
    ),
    (
        {"tools": [{"name": "f", "input_schema": {"type": "array"}}]},
        "tools.0.input_schema.type",
        "'object'",
    ),
    ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "tools", "unique"),
    (
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        "tools.0",
        "not supported by this gateway",
    ),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "some"}}, "tool_choice.type", "'auto'"),
    (
        {"tools": [WEATHER_TOOL], "tool_choice": {"type": "tool"}},
        "tool_choice.name",
        "Field required",
    ),
    (
        {"tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "nope"}},
        "tool_choice.name",
        "not found",
    ),
    ({"tool_choice": {"type": "any"}}, "tool_choice", "only be specified while providing tools"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens", "Field required"),
    ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens", "1024"),
    (
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},
        "max_tokens",
        "greater than `thinking.budget_tokens`",
    ),
    ({"thinking": {"type": "deep"}}, "thinking.type", "'enabled'"),
    ({"cache_control": {"type": "forever"}}, "cache_control.type", "'ephemeral'"),
    ({"speed": "warp"}, "speed", "'standard' or 'fast'"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort", "'low'"),
    (
        {"output_config": {"format": {"type": "json_schema"}}},
        "output_config.format.schema",
        "Field required",
    ),
    (
        {"output_config": {"format": {"type": "regex"}}},
        "output_config.format.type",
        "'json_schema'",
    ),
    ({"workspace_id": 5}, "workspace_id", "valid string"),
    ({"metadata": "u1"}, "metadata", "valid dictionary"),
    ({"service_tier": "gold"}, "service_tier", "'auto'"),
    ({"xyz": 1}, "xyz", "xyz: Extra inputs are not permitted"),
    ({"stop": ["END"]}, "stop", "Extra inputs are not permitted"),
    ({"mcp_servers": []}, "mcp_servers", "not supported by this gateway"),
]


@pytest.mark.parametrize(("fields", "param", "words"), BAD_REQUESTS)
def test_bad_request_is_a_400_naming_the_field(fields, param, words):
    with pytest.raises(GatewayError) as caught:
        parse(**fields)
    err = caught.value
    assert err.param == param
    assert err.message.startswith(f"{param}: ")
    assert words in err.message
    status, raw = ap.error_response(err)
    assert status == 400
    assert json.loads(raw) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": err.message},
    }


@pytest.mark.parametrize("not_an_object", [[], "hi", 3, None])
def test_body_that_is_not_an_object_is_refused(not_an_object):
    with pytest.raises(GatewayError) as caught:
        ap.parse_messages(not_an_object, {})
    assert caught.value.status == 400


def test_accepted_extras_are_not_forwarded():
    call = parse(
        top_k=5,
        metadata={"user_id": "u-1"},
        service_tier="auto",
        thinking={"type": "enabled", "budget_tokens": 1024},
        max_tokens=4096,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    )
    for name in ("top_k", "metadata", "service_tier", "thinking", "system"):
        assert name not in call.body
    assert call.body["messages"][0] == {"role": "system", "content": "Be brief."}
    newer = parse(
        cache_control={"type": "ephemeral", "ttl": "1h"},
        diagnostics={"previous_message_id": None},
        inference_geo="eu",
        speed="fast",
        user_profile_id="p1",
        workspace_id="w1",
        thinking={"type": "adaptive"},
        output_config={"effort": "low"},
    )
    assert set(newer.body) == {"model", "messages", "max_tokens"}


def test_structured_output_format_becomes_response_format():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    call = parse(
        output_config={"effort": "high", "format": {"type": "json_schema", "schema": schema}}
    )
    assert call.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


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


# --------------------------------------------------------------------------- plain answers


def upstream_answer(content="Sunny, 18 C.", tool_calls=(), finish="stop", **choice_extra):
    return {
        "id": "chatcmpl-3f2a",
        "object": "chat.completion",
        "created": 1,
        "model": "upstream-name",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": list(tool_calls),
                },
                "logprobs": None,
                "finish_reason": finish,
                **choice_extra,
            }
        ],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 9,
            "total_tokens": 1209,
            "prompt_tokens_details": {"cached_tokens": 1024},
        },
    }


def render(call, upstream):
    return json.loads(call.response.render(upstream, call.response.usage_of(upstream), MODEL))


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


# --------------------------------------------------------------------------- streams


def chunk(delta=None, finish=None, **choice_extra):
    choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
    choice.update(choice_extra)
    return {
        "id": "chatcmpl-77",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "upstream-name",
        "choices": [choice],
        "usage": None,
    }


def usage_chunk(prompt=40, completion=5, cached=32):
    return {
        "id": "chatcmpl-77",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "upstream-name",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


ROLE = chunk({"role": "assistant", "content": ""})
TEXT_STREAM = [
    ROLE,
    chunk({"content": "Sunny"}),
    chunk({"content": ", 18 C."}),
    chunk({}, "stop"),
    usage_chunk(),
]
TOOL_STREAM = [
    ROLE,
    chunk({"content": "Checking."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "chatcmpl-tool-9a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "chatcmpl-tool-9b",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                }
            ]
        }
    ),
    chunk({}, "tool_calls"),
    usage_chunk(completion=20),
]


def play(call, chunks) -> bytes:
    """What the gateway does with a node's stream: start, every chunk, end."""
    adapter = call.response
    out = [adapter.stream_start(MODEL)]
    usage = None
    for c in chunks:
        out.append(adapter.stream_chunk(c, MODEL))
        if c.get("usage"):
            usage = from_openai(c["usage"])
    out.append(adapter.stream_end(usage, MODEL))
    return b"".join(out)


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


# --------------------------------------------------------------------------- errors, models


@pytest.mark.parametrize(
    ("kind", "status", "type_"),
    [
        (AUTHENTICATION, 401, "authentication_error"),
        (PAYMENT_REQUIRED, 402, "billing_error"),
        (NOT_FOUND, 404, "not_found_error"),
        (REQUEST_TOO_LARGE, 413, "request_too_large"),
        (RATE_LIMIT, 429, "rate_limit_error"),
        (UPSTREAM, 502, "api_error"),
        (OVERLOADED, 529, "overloaded_error"),
        (TIMEOUT, 504, "timeout_error"),
    ],
)
def test_error_types_and_statuses(kind, status, type_):
    status_got, raw = ap.error_response(GatewayError(kind, "code", "Something."))
    assert status_got == status
    assert json.loads(raw) == {"type": "error", "error": {"type": type_, "message": "Something."}}


def test_models_list_has_anthropics_shape_and_only_chat_models():
    models = [
        ModelInfo("claude-local", "Claude Local", 200_000, "chat", 1_700_000_000),
        ModelInfo("embed-1", "Embed", 8192, "embedding", 1_700_000_000),
        ModelInfo("small", "Small", 32_000, "chat", 0),
    ]
    assert json.loads(ap.render_models(models)) == {
        "data": [
            {
                "type": "model",
                "id": "claude-local",
                "display_name": "Claude Local",
                "created_at": "2023-11-14T22:13:20Z",
            },
            {
                "type": "model",
                "id": "small",
                "display_name": "Small",
                "created_at": "1970-01-01T00:00:00Z",
            },
        ],
        "has_more": False,
        "first_id": "claude-local",
        "last_id": "small",
    }
    assert json.loads(ap.render_models([]))["first_id"] is None


# --------------------------------------------------------------------------- the official SDK


class FakeGateway:
    """An httpx transport that answers like the gateway would: parse with the
    adapter, answer from a canned node reply through the adapter."""

    def __init__(self, *, answer=None, chunks=None, error=None, stream_error_after=None):
        self.answer, self.chunks, self.error = answer, chunks, error
        self.stream_error_after = stream_error_after
        self.calls = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        try:
            if self.error is not None:
                raise self.error
            call = ap.parse_messages(json.loads(request.content), dict(request.headers))
        except GatewayError as err:
            status, raw = ap.error_response(err)
            return httpx2.Response(
                status, content=raw, headers={"content-type": "application/json"}
            )
        self.calls.append(call)
        node_protocol.parse_chat(call.body)  # what we forward is what a node accepts
        if not call.stream:
            raw = call.response.render(self.answer, call.response.usage_of(self.answer), call.model)
            return httpx2.Response(200, content=raw, headers={"content-type": "application/json"})
        if self.stream_error_after is not None:
            adapter = call.response
            raw = b"".join(
                adapter.stream_chunk(c, call.model) for c in self.chunks[: self.stream_error_after]
            )
            raw += adapter.stream_error(
                GatewayError(UPSTREAM, "upstream_dropped", "Node went away.")
            )
        else:
            raw = play(call, self.chunks)
        return httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"})


def client(gateway: FakeGateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="x",
        base_url="http://test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(gateway)),
    )


def test_sdk_plain_message_with_system_prompt():
    gateway = FakeGateway(answer=upstream_answer())
    message = client(gateway).messages.create(
        model=MODEL,
        max_tokens=100,
        system="You are terse.",
        messages=[{"role": "user", "content": "Weather?"}],
    )
    assert isinstance(message, anthropic.types.Message)
    assert message.id == "msg_3f2a"
    assert message.model == MODEL
    assert message.content[0].type == "text"
    assert message.content[0].text == "Sunny, 18 C."
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 176
    assert message.usage.cache_read_input_tokens == 1024
    assert message.usage.output_tokens == 9
    assert gateway.calls[0].body["messages"][0] == {"role": "system", "content": "You are terse."}


def test_sdk_streams_text_and_accumulates_the_final_message():
    gateway = FakeGateway(chunks=TEXT_STREAM)
    with client(gateway).messages.stream(model=MODEL, max_tokens=100, messages=[USER]) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert texts == ["Sunny", ", 18 C."]
    assert final.content[0].text == "Sunny, 18 C."
    assert final.stop_reason == "end_turn"
    # the real cumulative usage of message_delta wins over message_start's estimate
    assert final.usage.input_tokens == 8
    assert final.usage.cache_read_input_tokens == 32
    assert final.usage.cache_creation_input_tokens == 0
    assert final.usage.output_tokens == 5


def test_sdk_streamed_tool_call_then_tool_result_round_trip():
    gateway = FakeGateway(chunks=TOOL_STREAM)
    sdk = client(gateway)
    with sdk.messages.stream(
        model=MODEL, max_tokens=100, tools=[WEATHER_TOOL], messages=[USER]
    ) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    kinds = [b.type for b in final.content]
    assert kinds == ["text", "tool_use", "tool_use"]
    weather, clock = final.content[1], final.content[2]
    assert (weather.id, weather.name, weather.input) == (
        "toolu_9a",
        "get_weather",
        {"city": "Paris"},
    )
    assert (clock.name, clock.input) == ("get_time", {})
    assert final.usage.output_tokens == 20

    # the client answers the tool calls; the SDK sends its own message back
    gateway.answer = upstream_answer("It is sunny in Paris.")
    answer = sdk.messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER_TOOL, {"name": "get_time", "input_schema": {"type": "object"}}],
        messages=[
            USER,
            {"role": final.role, "content": final.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": weather.id, "content": "18 C"},
                    {"type": "tool_result", "tool_use_id": clock.id, "content": "12:00"},
                ],
            },
        ],
    )
    assert answer.content[0].text == "It is sunny in Paris."
    forwarded = gateway.calls[-1].body["messages"]
    assert [m["role"] for m in forwarded] == ["user", "assistant", "tool", "tool"]
    assert forwarded[1]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }
    assert forwarded[2] == {"role": "tool", "tool_call_id": "toolu_9a", "content": "18 C"}


def test_sdk_plain_tool_use_block():
    calls = [
        {
            "id": "call_x",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        }
    ]
    gateway = FakeGateway(answer=upstream_answer(None, calls, "tool_calls"))
    message = client(gateway).messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
        messages=[USER],
    )
    block = message.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    assert (block.id, block.input) == ("toolu_x", {"city": "Oslo"})
    assert message.stop_reason == "tool_use"
    assert gateway.calls[0].body["tool_choice"] == "required"


def test_sdk_sees_validation_errors_as_bad_request():
    image = {"type": "image", "source": {"type": "url", "url": "http://x/cat.png"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(FakeGateway()).messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": [image]}]
        )
    assert caught.value.status_code == 400
    assert caught.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "messages.0.content.0: image content blocks are not supported by this gateway",
    }


def test_sdk_older_style_sampling_fields_still_work():
    gateway = FakeGateway(answer=upstream_answer())
    client(gateway).messages.create(
        model=MODEL, max_tokens=100, messages=[USER], extra_body={"temperature": 0, "top_k": 3}
    )
    assert gateway.calls[0].body["temperature"] == 0
    assert gateway.calls[0].deterministic is True
    assert "top_k" not in gateway.calls[0].body


def test_sdk_prefill_and_thinking():
    gateway = FakeGateway(answer=upstream_answer("Helios)"))
    message = client(gateway).messages.create(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[USER, {"role": "assistant", "content": "The best answer is ("}],
    )
    assert message.content[0].text == "Helios)"
    assert gateway.calls[0].body["continue_final_message"] is True


@pytest.mark.parametrize(
    ("kind", "exc"),
    [
        (OVERLOADED, anthropic.OverloadedError),
        (RATE_LIMIT, anthropic.RateLimitError),
        (AUTHENTICATION, anthropic.AuthenticationError),
        (NOT_FOUND, anthropic.NotFoundError),
    ],
)
def test_sdk_maps_gateway_errors_to_its_exceptions(kind, exc):
    gateway = FakeGateway(error=GatewayError(kind, "code", "Nope."))
    with pytest.raises(exc) as caught:
        client(gateway).messages.create(model=MODEL, max_tokens=100, messages=[USER])
    assert caught.value.body["error"]["message"] == "Nope."


def test_sdk_raises_on_a_stream_that_breaks():
    gateway = FakeGateway(chunks=TEXT_STREAM, stream_error_after=2)
    texts = []
    sdk = client(gateway)
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        sdk.messages.stream(model=MODEL, max_tokens=100, messages=[USER]) as s,
    ):
        texts.extend(s.text_stream)
    assert texts == ["Sunny"]
    assert "Node went away." in str(caught.value)


def test_sdk_count_tokens():
    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages/count_tokens"
        return httpx2.Response(200, content=ap.count_tokens(json.loads(request.content)))

    sdk = anthropic.Anthropic(
        api_key="x",
        base_url="http://test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    result = sdk.messages.count_tokens(model=MODEL, messages=[USER], system="Be brief.")
    assert result.input_tokens == parse(system="Be brief.").prompt_tokens_estimate


# --------------------------------------------------------------------------- a real node


@pytest.fixture(scope="module")
def node():
    from tests.inference_node.server_helpers import inprocess_node

    with inprocess_node("--profile", "instant", "--seed", "3") as running:
        yield running


class NodeGateway:
    """parse → the simulator node over HTTP (as the gateway forwards) → adapter."""

    def __init__(self, node):
        self.node = node
        self.calls = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        call = ap.parse_messages(json.loads(request.content), dict(request.headers))
        self.calls.append(call)
        upstream = {**call.body, "model": "sim-chat-small"}
        if not call.stream:
            status, _, answer = self.node.post("/v1/chat/completions", upstream)
            assert status == 200, answer
            raw = call.response.render(answer, call.response.usage_of(answer), call.model)
            return httpx2.Response(200, content=raw, headers={"content-type": "application/json"})
        upstream["stream_options"] = {"include_usage": True}
        chunks, done = self.node.stream("/v1/chat/completions", upstream)
        assert done
        return httpx2.Response(
            200, content=play(call, chunks), headers={"content-type": "text/event-stream"}
        )


CONVERSATION = [
    {"role": "user", "content": "How do I rotate an API key?"},
    {"role": "assistant", "content": "Open Keys and press Rotate."},
    {"role": "user", "content": [{"type": "text", "text": "And revoke one?"}]},
]


def test_sdk_through_a_real_node_plain_and_streamed_usage_matches_the_node(node):
    gateway = NodeGateway(node)
    sdk = client(gateway)
    system = "You are the support assistant of a token-billing console. " * 8
    message = sdk.messages.create(model=MODEL, max_tokens=12, system=system, messages=CONVERSATION)
    assert message.content[0].text
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 12
    prompt = message.usage.input_tokens + message.usage.cache_read_input_tokens
    assert prompt == gateway.calls[0].prompt_tokens_estimate  # the estimate is the node's count

    with sdk.messages.stream(
        model=MODEL, max_tokens=12, system=system, messages=CONVERSATION
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text
    assert final.usage.output_tokens == 12
    # the second call reuses the node's prefix cache: reads are their own class
    assert final.usage.cache_read_input_tokens > 0
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == prompt
