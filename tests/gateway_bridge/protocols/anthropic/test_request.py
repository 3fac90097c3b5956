"""The Anthropic adapter's validation: Anthropic's messages, ``param`` set to the
dotted path, and what is accepted but not forwarded."""

from __future__ import annotations

import json

import pytest

from gateway_bridge.protocols import anthropic as ap
from gateway_bridge.protocols.base import GatewayError
from tests.gateway_bridge.protocols.anthropic.common import (
    TOOL_USE_TURN,
    USER,
    WEATHER_TOOL,
    parse,
)

# --------------------------------------------------------------------------- validation

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
    (
        {"messages": [{"role": "bot", "content": "hi"}]},
        "messages.0.role",
        "'user', 'assistant' or 'system'",
    ),
    ({"messages": [USER, {"role": "system", "content": ""}]}, "messages.1.content", "non-empty"),
    (
        {"messages": [USER, {"role": "system", "content": [{"type": "image"}]}]},
        "messages.1.content.0.type",
        "Input should be 'text'",
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
                            "source": {"type": "base64", "media_type": "image/bmp", "data": "AA"},
                        }
                    ],
                }
            ]
        },
        "messages.0.content.0.source.media_type",
        "'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "image"}]}]},
        "messages.0.content.0.source",
        "Field required",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]}]},
        "messages.0.content.0.source.type",
        "'base64', 'url' or 'file'",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "base64", "media_type": "text/html", "data": "AA"},
                        }
                    ],
                }
            ]
        },
        "messages.0.content.0.source.media_type",
        "'application/pdf'",
    ),
    (
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": [{"type": "image", "source": {"type": "url", "url": "http://x/a"}}],
                },
            ]
        },
        "messages.1.content.0.type",
        "only allowed in user messages",
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
    ({"system": [{"type": "image"}]}, "system.0.type", "Input should be 'text'"),
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


def test_accepted_extras_are_not_forwarded_and_thinking_becomes_an_effort():
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
    assert call.body["reasoning_effort"] == "low"  # a budget of 1024 tokens
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
    # adaptive thinking carries output_config.effort as the pivot's reasoning_effort
    assert set(newer.body) == {"model", "messages", "max_tokens", "reasoning_effort"}
    assert newer.body["reasoning_effort"] == "low"
    assert newer.untranslatable == ()


def test_a_system_message_in_the_conversation_stays_in_place():
    # Claude Code 2.1 sends its environment as a system message after the first
    # user turn; the API applies one from where it stands
    environment = {"role": "system", "content": [{"type": "text", "text": "cwd: /repo"}]}
    call = parse(system="Be brief.", messages=[USER, environment, USER])
    assert [m["role"] for m in call.body["messages"]] == ["system", "user", "system", "user"]
    assert call.body["messages"][2] == {"role": "system", "content": "cwd: /repo"}
    assert call.untranslatable == () and call.dropped == ()


def test_an_unknown_top_level_field_is_dropped_from_a_translation_and_named():
    call = parse(xyz=1, stop=["END"])
    assert "xyz" not in call.body and "stop" not in call.body
    assert call.dropped == (
        "xyz: a field the translation does not carry",
        "stop: a field the translation does not carry",
    )
    assert call.client_body["xyz"] == 1  # a native channel gets it as sent


def test_structured_output_format_becomes_response_format():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    call = parse(
        output_config={"effort": "high", "format": {"type": "json_schema", "schema": schema}}
    )
    assert call.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
