"""One prompt estimate and one affinity prefix for every protocol
(gateway_bridge/protocols/estimate.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.kernel import tokens as tokenizer
from gateway_bridge.protocols import anthropic, estimate, gemini, openai
from tooling.simulator import protocol as node_protocol

SYSTEM = "You are the support assistant of a token-billing console. Answer briefly. " * 4
PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city"}},
    "required": ["city"],
}

# One conversation (system prompt, tools, a tool call and its result, a new
# question), as each protocol's client sends it.
OPENAI_CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp":18}'},
        {"role": "user", "content": "And tomorrow?"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Weather now", "parameters": PARAMS},
        }
    ],
}
ANTHROPIC_MESSAGES = {
    "model": "m",
    "max_tokens": 64,
    "system": SYSTEM,
    "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp":18}'},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ],
    "tools": [{"name": "get_weather", "description": "Weather now", "input_schema": PARAMS}],
}
GEMINI_GENERATE = {
    "systemInstruction": {"parts": [{"text": SYSTEM}]},
    "contents": [
        {"role": "user", "parts": [{"text": "What is the weather in Paris?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Let me check."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"temp": 18}}},
                {"text": "And tomorrow?"},
            ],
        },
    ],
    "tools": [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather now",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {"city": {"type": "STRING", "description": "The city"}},
                        "required": ["city"],
                    },
                }
            ]
        }
    ],
}


def _calls():
    return [
        openai.parse_chat(OPENAI_CHAT),
        anthropic.parse_messages(ANTHROPIC_MESSAGES, {}),
        gemini.parse_generate("m", GEMINI_GENERATE, stream=False, alt_sse=False),
    ]


def test_the_same_conversation_gets_the_same_estimate_and_prefix_in_every_protocol():
    calls = _calls()
    estimates = {call.protocol: call.prompt_tokens_estimate for call in calls}
    prefixes = {call.protocol: call.prefix_text for call in calls}
    assert len(set(estimates.values())) == 1, estimates
    assert len(set(prefixes.values())) == 1, prefixes
    assert calls[0].prefix_text.startswith('<|start|>tools<|sep|>[{"type":"function"')
    assert f"<|start|>system<|sep|>{SYSTEM}<|end|>" in calls[0].prefix_text


@pytest.mark.parametrize("index", [0, 1, 2], ids=["openai", "anthropic", "gemini"])
def test_the_estimate_is_the_nodes_count_of_the_translated_body(index):
    call = _calls()[index]
    node = node_protocol.parse_chat({**call.body, "model": "sim-chat-small"})
    assert len(node.prompt_ids) == call.prompt_tokens_estimate


def test_count_tokens_answers_agree_with_the_call_estimate():
    estimate_ = openai.parse_chat(OPENAI_CHAT).prompt_tokens_estimate
    assert anthropic.count_tokens_request({**ANTHROPIC_MESSAGES}) == ("m", estimate_)
    assert gemini.count_tokens("m", {"generateContentRequest": GEMINI_GENERATE}) == (
        b'{"totalTokens":%d}' % estimate_
    )


def test_tool_json_is_counted_as_the_template_writes_it_even_where_orjson_differs():
    # orjson writes 1e-05 as 0.00001; the node's template (json.dumps) as 1e-05
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "minimum": 1e-05, "maximum": 1e16, "e": "é"},
            },
        }
    ]
    messages = [{"role": "user", "content": "hi"}]
    expected = len(tokenizer.chat_prompt_tokens(tokenizer.template_messages(messages, tools)))
    for _ in range(2):  # computed, then remembered
        tokens, prefix = estimate.chat_prompt(messages, tools)
        assert tokens == expected
        assert '"minimum":1e-05' in prefix


def test_long_prompts_keep_only_the_start_as_prefix():
    messages = [{"role": "system", "content": "S" * 5000}, {"role": "user", "content": "U"}]
    tokens, prefix = estimate.chat_prompt(messages)
    assert len(prefix) == estimate.PREFIX_CHARS
    assert prefix.startswith("<|start|>system<|sep|>SSS")
    assert tokens == len(tokenizer.chat_prompt_tokens(messages))


def _reference(messages: list[dict], tools: list | None) -> tuple[int, str]:
    """The rule spelled out: the node's template, counted and rendered."""
    rendered = tokenizer.template_messages(messages, tools)
    text = "".join(
        f"<|start|>{m.get('role', '')}"
        f"{' ' + m['name'] if isinstance(m.get('name'), str) and m['name'] else ''}"
        f"<|sep|>{tokenizer.content_text(m.get('content'))}<|end|>"
        for m in rendered
    )
    return len(tokenizer.chat_prompt_tokens(rendered)), text[: estimate.PREFIX_CHARS]


_TEXT = st.text(max_size=300)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_TEXT, children, max_size=3),
    max_leaves=8,
)
_CALL = st.fixed_dictionaries(
    {"id": _TEXT, "type": st.just("function")},
) | st.fixed_dictionaries(
    {"id": _TEXT, "function": st.fixed_dictionaries({"name": _TEXT, "arguments": _TEXT})}
)
_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(("system", "user", "assistant", "tool", "developer")),
        "content": st.one_of(
            st.none(),
            _TEXT,
            st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}), max_size=3),
        ),
    },
    optional={"name": _TEXT, "tool_calls": st.lists(_CALL, max_size=2)},
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_MESSAGE, min_size=1, max_size=5), st.none() | st.lists(_JSON, max_size=2))
def test_the_estimate_and_prefix_are_the_templates(messages, tools):
    assert estimate.chat_prompt(messages, tools) == _reference(messages, tools)
