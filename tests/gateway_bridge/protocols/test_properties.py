"""Property tests of the protocol adapters and the usage mapping: whatever a
client sends and whatever a node answers, an adapter either returns a valid
result or raises a ``GatewayError`` (which the gateway renders in the
client's protocol). Any other exception would be a 500 with no protocol body.

Inputs come from two strategies: arbitrary JSON (recursive), and "near-valid"
requests, which start from realistic, valid requests of each protocol and
drop, replace or add fields with plausible values and with arbitrary JSON, so
the translators are exercised deep inside, not just rejected at the top.
Crashes found are kept as explicit ``@example``s."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway_bridge import usage_mapping
from gateway_bridge.protocols import anthropic, gemini, openai
from gateway_bridge.protocols.base import CallRequest, GatewayError, ResponseAdapter
from gateway_bridge.protocols.gemini import request as gemini_request
from gateway_bridge.usage_mapping import TokenUsage

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies ----------------------------------------------------------------------------

# What a JSON parser (orjson) can hand over: 64-bit integers, finite floats,
# valid Unicode (no lone surrogates).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
SCALARS = (
    st.none()
    | st.booleans()
    | INTS
    | st.integers(-3, 3)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=16,
)
JSON_OBJECT = st.dictionaries(TEXT, JSON, max_size=6)

# Plausible values of the fields the protocols know.
PLAUSIBLE = st.one_of(
    st.sampled_from(
        [
            "",
            "user",
            "assistant",
            "system",
            "tool",
            "model",
            "function",
            "developer",
            "text",
            "tool_use",
            "tool_result",
            "image",
            "image_url",
            "thinking",
            "auto",
            "none",
            "required",
            "any",
            "json_object",
            "json_schema",
            "enabled",
            "disabled",
            "AUTO",
            "ANY",
            "NONE",
            "STRING",
            "OBJECT",
            "ARRAY",
            "application/json",
            "text/plain",
            "get_weather",
            "call_1",
            "toolu_1",
            "stop",
            "length",
            "tool_calls",
            "STOP",
            "MAX_TOKENS",
            "RETRIEVAL_QUERY",
            "float",
            "base64",
            "m",
            "models/m",
        ]
    ),
    st.integers(-2, 70000),
    st.floats(-3, 3, allow_nan=False),
    st.booleans(),
    st.none(),
    st.lists(TEXT, max_size=3),
    st.lists(st.integers(-1, 100_000), max_size=3),
)


def _draw_scalar_near(draw, value):
    if isinstance(value, bool):
        return draw(st.booleans() | PLAUSIBLE)
    if isinstance(value, int):
        return draw(st.sampled_from([value, 0, -1, 1, 2**31, 2**63 - 1]) | st.integers(-5, 10**6))
    if isinstance(value, float):
        return draw(st.sampled_from([value, 0.0, -0.5, 1e308, 2.0]) | st.floats(-10, 10))
    if isinstance(value, str):
        return draw(st.sampled_from([value, value, "", " ", value * 3]) | PLAUSIBLE | TEXT)
    return draw(PLAUSIBLE)


def near(value, extra_keys: tuple[str, ...] = ()):
    """Values close to ``value``: mostly the same shape with some fields
    dropped, changed or added, sometimes anything at all."""

    @st.composite
    def strategy(draw):
        return _near(draw, value, extra_keys, depth=0)

    return strategy()


def _near(draw, value, extra_keys, depth):
    roll = draw(st.integers(0, 29))
    if roll == 0:
        return draw(JSON)
    if roll == 1:
        return draw(PLAUSIBLE)
    if roll < 12 and depth > 0:
        return value  # most of a request stays as it was
    if isinstance(value, dict):
        out = {}
        for key, child in value.items():
            if draw(st.integers(0, 11)) == 0:
                continue  # drop the field
            out[key] = _near(draw, child, extra_keys, depth + 1)
        for _ in range(draw(st.integers(0, 2))):
            key = (
                draw(st.sampled_from(extra_keys) if extra_keys else TEXT)
                if draw(st.integers(0, 3))
                else draw(TEXT)
            )
            out[key] = draw(PLAUSIBLE | JSON)
        return out
    if isinstance(value, list):
        out = [
            _near(draw, child, extra_keys, depth + 1) for child in value if draw(st.integers(0, 9))
        ]
        if value and draw(st.integers(0, 3)) == 0:
            out.insert(
                draw(st.integers(0, len(out))),
                _near(draw, draw(st.sampled_from(value)), extra_keys, depth + 1),
            )
        return out
    return _draw_scalar_near(draw, value)


# --- realistic valid requests per protocol ----------------------------------------------------

WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}

OPENAI_CHAT = [
    {"model": "m", "messages": [{"role": "user", "content": "Hello"}]},
    {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Rules"}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Weather in Paris?"}],
                "name": "u1",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather",
                    "parameters": WEATHER_PARAMS,
                    "strict": True,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "max_completion_tokens": 100,
        "temperature": 0,
        "top_p": 0.9,
        "seed": 7,
        "n": 1,
        "stop": ["\n\n", "END"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"50256": -100},
        "logprobs": True,
        "top_logprobs": 2,
        "user": "someone",
        "metadata": {"k": "v"},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": WEATHER_PARAMS, "strict": True},
        },
    },
    {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "response_format": {"type": "json_object"},
    },
]
OPENAI_COMPLETION = [
    {"model": "m", "prompt": "Once upon a time"},
    {
        "model": "m",
        "prompt": ["a", "b"],
        "max_tokens": 16,
        "suffix": "end",
        "echo": False,
        "best_of": 1,
        "n": 1,
        "stop": "\n",
        "stream": True,
        "stream_options": {"include_usage": False},
        "logprobs": 2,
        "temperature": 0.2,
    },
    {"model": "m", "prompt": [1, 2, 3]},
    {"model": "m", "prompt": [[1, 2], [3]]},
]
OPENAI_EMBEDDINGS = [
    {"model": "e", "input": "hello"},
    {"model": "e", "input": ["a", "b"], "encoding_format": "float", "dimensions": 8, "user": "u"},
    {"model": "e", "input": [[1, 2, 3]], "encoding_format": "base64"},
]

ANTHROPIC_MESSAGES = [
    {"model": "c", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]},
    {
        "model": "c",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
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
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "sunny"}],
                        "is_error": False,
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
            {"role": "assistant", "content": "Prefill"},
        ],
        "tools": [
            {"name": "get_weather", "description": "Weather", "input_schema": WEATHER_PARAMS}
        ],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"],
        "stream": True,
        "temperature": 0,
        "top_p": 0.9,
        "top_k": 5,
        "metadata": {"user_id": "u1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "service_tier": "auto",
        "output_config": {"format": {"type": "json_schema", "schema": WEATHER_PARAMS}},
    },
    {
        "model": "c",
        "max_tokens": 8,
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": [{"type": "text", "text": "4"}]},
            {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]},
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "disabled"},
    },
]

GEMINI_GENERATE = [
    {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]},
    {
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Checking", "thought": True},
                    {
                        "functionCall": {
                            "name": "get_weather",
                            "args": {"city": "Paris"},
                            "id": "c1",
                        }
                    },
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "get_weather",
                            "response": {"result": "sunny"},
                            "id": "c1",
                        }
                    }
                ],
            },
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Weather",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"city": {"type": "STRING"}},
                            "required": ["city"],
                        },
                    }
                ]
            }
        ],
        "toolConfig": {
            "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
        },
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "generationConfig": {
            "stopSequences": ["END"],
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "STRING"}}},
            "candidateCount": 1,
            "maxOutputTokens": 100,
            "temperature": 0,
            "topP": 0.9,
            "topK": 4,
            "seed": 3,
            "presencePenalty": 0.1,
            "frequencyPenalty": 0.1,
            "responseLogprobs": False,
            "thinkingConfig": {"includeThoughts": False, "thinkingBudget": 0},
        },
        "labels": {"team": "a"},
    },
    {
        "model": "models/g",
        "contents": [{"parts": [{"text": "hi"}]}],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object"},
            "candidateCount": 2,
        },
    },
]
GEMINI_COUNT = [
    {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]},
    {"generateContentRequest": {"model": "models/g", **GEMINI_GENERATE[1]}},
]
GEMINI_EMBED = [
    {"content": {"parts": [{"text": "hello"}]}},
    {
        "model": "models/g",
        "content": {"parts": [{"text": "a"}, {"text": "b"}]},
        "taskType": "RETRIEVAL_QUERY",
        "title": "t",
        "outputDimensionality": 8,
    },
]
GEMINI_BATCH = [
    {"requests": [{"model": "models/g", "content": {"parts": [{"text": "a"}]}}]},
    {
        "requests": [
            {"model": "models/g", "content": {"parts": [{"text": t}]}, "taskType": "CLUSTERING"}
            for t in ("a", "b")
        ]
    },
]

OPENAI_KEYS = (
    *sorted(openai.CHAT_FIELDS | openai.COMPLETION_FIELDS | openai.EMBEDDING_FIELDS),
    *("content", "role", "tool_calls", "tool_call_id", "name", "type", "function", "text"),
)
ANTHROPIC_KEYS = (*sorted(anthropic.FIELDS), *(
    "content", "role", "type", "text", "id", "name", "input", "tool_use_id", "is_error",
    "cache_control", "budget_tokens", "citations", "source", "signature", "data",
))  # fmt: skip
GEMINI_KEYS = (
    *sorted(
        gemini_request.REQUEST
        | gemini_request.PART
        | gemini_request.GENERATION
        | gemini_request.EMBED
        | gemini_request.THINKING
    ),
    *("role", "parts", "name", "args", "response", "id", "requests", "generateContentRequest"),
)


def requests_for(examples, keys):
    return st.sampled_from(examples).flatmap(lambda body: near(body, keys)) | JSON


def check(parse, *args) -> object | None:
    """Run ``parse``; a GatewayError is a protocol answer, anything else a crash."""
    try:
        return parse(*args)
    except GatewayError as err:
        error = err
    assert error.status >= 400 and error.message and error.code
    return None


def check_call(result) -> None:
    if result is None:
        return
    assert isinstance(result, CallRequest)
    assert isinstance(result.response, ResponseAdapter)
    orjson.dumps(result.body)  # what the node gets is JSON
    assert result.prompt_tokens_estimate >= 0
    assert isinstance(result.model, str) and result.model
    assert result.max_output_tokens is None or result.max_output_tokens >= 0


# --- request translators ------------------------------------------------------------------


@PROPERTY
@given(requests_for(OPENAI_CHAT, OPENAI_KEYS))
def test_openai_parse_chat(body):
    check_call(check(openai.parse_chat, body))


@PROPERTY
@given(requests_for(OPENAI_COMPLETION, OPENAI_KEYS))
def test_openai_parse_completion(body):
    check_call(check(openai.parse_completion, body))


@PROPERTY
@given(requests_for(OPENAI_EMBEDDINGS, OPENAI_KEYS))
def test_openai_parse_embeddings(body):
    check_call(check(openai.parse_embeddings, body))


HEADERS = st.fixed_dictionaries(
    {}, optional={"anthropic-version": st.just("2023-06-01"), "anthropic-beta": TEXT}
)


@PROPERTY
@given(requests_for(ANTHROPIC_MESSAGES, ANTHROPIC_KEYS), HEADERS)
def test_anthropic_parse_messages(body, headers):
    check_call(check(anthropic.parse_messages, body, headers))


@PROPERTY
@given(requests_for(ANTHROPIC_MESSAGES, ANTHROPIC_KEYS))
def test_anthropic_count_tokens(body):
    out = check(anthropic.count_tokens, body)
    if out is not None:
        assert orjson.loads(out)["input_tokens"] >= 0


PATH_MODELS = st.sampled_from([None, "g", "models/g", ""]) | TEXT


@PROPERTY
@given(PATH_MODELS, requests_for(GEMINI_GENERATE, GEMINI_KEYS), st.booleans(), st.booleans())
def test_gemini_parse_generate(path_model, body, stream, alt_sse):
    check_call(
        check(lambda: gemini.parse_generate(path_model, body, stream=stream, alt_sse=alt_sse))
    )


@PROPERTY
@given(PATH_MODELS, requests_for(GEMINI_COUNT + GEMINI_GENERATE, GEMINI_KEYS))
def test_gemini_count_tokens(path_model, body):
    out = check(gemini.count_tokens, path_model, body)
    if out is not None:
        assert orjson.loads(out)["totalTokens"] >= 0


@PROPERTY
@given(PATH_MODELS, requests_for(GEMINI_EMBED, GEMINI_KEYS))
def test_gemini_parse_embed(path_model, body):
    check_call(check(gemini.parse_embed, path_model, body))


@PROPERTY
@given(PATH_MODELS, requests_for(GEMINI_BATCH, GEMINI_KEYS))
def test_gemini_parse_batch_embed(path_model, body):
    check_call(check(gemini.parse_batch_embed, path_model, body))


# --- response adapters -------------------------------------------------------------------

CHAT_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "up",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello there",
                "reasoning_content": "thought",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
            "stop_reason": "END",
        }
    ],
    "usage": {
        "prompt_tokens": 12,
        "completion_tokens": 5,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 1},
    },
}
COMPLETION_RESPONSE = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1700000000,
    "model": "up",
    "choices": [{"index": 0, "text": "Once", "logprobs": None, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
EMBEDDING_RESPONSE = {
    "object": "list",
    "model": "up",
    "data": [
        {"object": "embedding", "index": 0, "embedding": [0.1, -0.2, 0.3]},
        {"object": "embedding", "index": 1, "embedding": [0.0, 0.5, 1.0]},
    ],
    "usage": {"prompt_tokens": 2, "total_tokens": 2},
}
CHUNKS = [
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "up",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "up",
        "choices": [{"index": 0, "delta": {"content": "Hel", "reasoning_content": "t"}}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "up",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"ci'},
                        }
                    ]
                },
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ty"}'}}]}}
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}],
    },
    {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "Once"}]},
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": CHAT_RESPONSE["usage"],
    },
]
UPSTREAM_KEYS = (
    "id", "object", "created", "model", "choices", "usage", "message", "delta", "content",
    "tool_calls", "function", "name", "arguments", "index", "finish_reason", "text", "data",
    "embedding", "prompt_tokens", "completion_tokens", "reasoning_content", "stop_reason",
)  # fmt: skip

UPSTREAM = (
    st.sampled_from([CHAT_RESPONSE, COMPLETION_RESPONSE, EMBEDDING_RESPONSE]).flatmap(
        lambda body: near(body, UPSTREAM_KEYS)
    )
    | JSON_OBJECT
).filter(lambda v: isinstance(v, dict))
CHUNK = (st.sampled_from(CHUNKS).flatmap(lambda c: near(c, UPSTREAM_KEYS)) | JSON_OBJECT).filter(
    lambda v: isinstance(v, dict)
)
USAGE = st.none() | st.builds(
    TokenUsage,
    input=st.integers(0, 10**7),
    cache_read=st.integers(0, 10**7),
    cache_write=st.integers(0, 10**7),
    output=st.integers(0, 10**7),
    reasoning=st.just(0),
)


def _adapters() -> list[tuple[str, object]]:
    """One adapter of each kind, made the way the gateway makes them."""
    chat = OPENAI_CHAT[0]
    streamed = {"stream": True, "stream_options": {"include_usage": True}}
    msg = {k: v for k, v in ANTHROPIC_MESSAGES[1].items() if k != "stream"}
    g = GEMINI_GENERATE[1]
    out = [
        ("openai-chat", lambda: openai.parse_chat(chat).response),
        ("openai-chat-stream", lambda: openai.parse_chat({**chat, **streamed}).response),
        (
            "openai-chat-stream-no-usage",
            lambda: openai.parse_chat({**chat, "stream": True}).response,
        ),
        ("openai-completion", lambda: openai.parse_completion(OPENAI_COMPLETION[0]).response),
        (
            "openai-completion-stream",
            lambda: openai.parse_completion({**OPENAI_COMPLETION[0], **streamed}).response,
        ),
        ("openai-embeddings", lambda: openai.parse_embeddings(OPENAI_EMBEDDINGS[1]).response),
        ("anthropic", lambda: anthropic.parse_messages(msg, {}).response),
        (
            "anthropic-stream",
            lambda: anthropic.parse_messages({**msg, "stream": True}, {}).response,
        ),
        ("gemini", lambda: gemini.parse_generate("g", g, stream=False, alt_sse=False).response),
        (
            "gemini-stream-sse",
            lambda: gemini.parse_generate("g", g, stream=True, alt_sse=True).response,
        ),
        (
            "gemini-stream-array",
            lambda: gemini.parse_generate("g", g, stream=True, alt_sse=False).response,
        ),
        ("gemini-embed", lambda: gemini.parse_embed("g", GEMINI_EMBED[1]).response),
        ("gemini-batch-embed", lambda: gemini.parse_batch_embed("g", GEMINI_BATCH[1]).response),
    ]
    for _name, make in out:
        make()  # every seed request is valid
    return out


ADAPTERS = _adapters()


ADAPTER_PROPERTY = settings(PROPERTY, max_examples=60)
STREAMING = [(n, m) for n, m in ADAPTERS if "stream" in n]


@pytest.mark.parametrize(("name", "make"), ADAPTERS, ids=[n for n, _ in ADAPTERS])
@ADAPTER_PROPERTY
@given(upstream=UPSTREAM, usage=USAGE)
# Found by this test: a finish_reason that is not a string (gemini: unhashable).
@example(upstream={"choices": [{"message": {}, "finish_reason": []}]}, usage=None)
# Embeddings whose indexes mix types, or with no usable item (gemini: TypeError, IndexError).
@example(upstream={"data": [{"index": "a", "embedding": []}, {"embedding": []}]}, usage=None)
@example(upstream={"data": [1]}, usage=None)
@example(upstream={"choices": [{"message": {"tool_calls": 1}}]}, usage=None)
# A node's usage too large for 64-bit sums (the usage mapping now refuses it).
@example(
    upstream={
        "choices": [{"message": {"content": "x"}}],
        "usage": {"prompt_tokens": 2**64 - 1, "completion_tokens": 2**64 - 1},
    },
    usage=None,
)
def test_render_any_upstream_answer(name, make, upstream, usage):
    # As the gateway does: the node's own usage when it is valid, else a count.
    for billed in (make().usage_of(upstream), usage):
        adapter = make()
        out = check(adapter.render, upstream, billed, "public-model")
        if out is not None:
            assert isinstance(out, bytes)
            orjson.loads(out)


@pytest.mark.parametrize(("name", "make"), STREAMING, ids=[n for n, _ in STREAMING])
@ADAPTER_PROPERTY
@given(chunks=st.lists(CHUNK, max_size=6), usage=USAGE, end=st.booleans())
# Found by this test (anthropic, gemini): choices, delta, tool_calls or function of the
# wrong type; an unhashable or non-integer index; a tool name that is not a string.
@example(chunks=[{"choices": 1}], usage=None, end=True)
@example(chunks=[{"choices": [{"delta": "x"}]}], usage=None, end=True)
@example(chunks=[{"choices": [{"delta": {"tool_calls": [1]}}]}], usage=None, end=True)
@example(
    chunks=[{"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]}], usage=None, end=True
)
@example(
    chunks=[{"choices": [{"delta": {"tool_calls": [{"function": {"name": 1}}]}}]}],
    usage=None,
    end=True,
)
@example(chunks=[{"choices": [{"index": [], "finish_reason": "stop"}]}], usage=None, end=True)
@example(
    chunks=[{"choices": [{"index": "a", "finish_reason": 1}]}, {"choices": [{"index": 1}]}],
    usage=None,
    end=True,
)
def test_stream_any_upstream_chunks(name, make, chunks, usage, end):
    adapter = make()
    parts = [check(adapter.stream_start, "public-model")]
    for chunk in chunks:
        parts.append(check(adapter.stream_chunk, chunk, "public-model"))
    if end:
        parts.append(check(adapter.stream_end, usage, "public-model"))
    else:
        parts.append(adapter.stream_error(GatewayError("upstream", "upstream_error", "broke")))
    assert all(p is None or isinstance(p, bytes) for p in parts)


# --- usage mapping ---------------------------------------------------------------------------

USAGE_SHAPES = [
    CHAT_RESPONSE["usage"],
    {"input_tokens": 3, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 1},
     "output_tokens_details": {"reasoning_tokens": 1}},
    {"input_tokens": 3, "cache_read_input_tokens": 2, "cache_creation_input_tokens": 1,
     "output_tokens": 4},
    {"promptTokenCount": 5, "cachedContentTokenCount": 2, "candidatesTokenCount": 3,
     "thoughtsTokenCount": 1, "toolUsePromptTokenCount": 1, "totalTokenCount": 10},
]  # fmt: skip
USAGE_INPUT = st.sampled_from(USAGE_SHAPES).flatmap(near) | JSON


@PROPERTY
@given(USAGE_INPUT)
# Found by this test: counts whose sums overflow 64 bits (orjson refused to encode them).
@example({"promptTokenCount": 2**64 - 1, "toolUsePromptTokenCount": 1})
@example({"prompt_tokens": 2**64 - 1, "completion_tokens": 2**64 - 1})
def test_usage_mapping_total(usage):
    for mapper in (
        usage_mapping.from_openai,
        usage_mapping.from_anthropic,
        usage_mapping.from_gemini,
    ):
        result = mapper(usage)
        if result is not None:
            assert isinstance(result, TokenUsage)
            assert min(result.input, result.cache_read, result.cache_write, result.output) >= 0
            assert 0 <= result.reasoning <= result.output
            for back in (
                usage_mapping.to_openai,
                usage_mapping.to_anthropic,
                usage_mapping.to_gemini,
            ):
                orjson.dumps(back(result))


@PROPERTY
@given(st.lists(USAGE_INPUT, max_size=4))
def test_stream_usage_merging_total(usages):
    for merge in (usage_mapping.from_anthropic_stream, usage_mapping.from_gemini_stream):
        result = merge(usages)
        assert result is None or isinstance(result, TokenUsage)


@pytest.mark.parametrize(
    ("parse", "examples"),
    [
        (openai.parse_chat, OPENAI_CHAT),
        (openai.parse_completion, OPENAI_COMPLETION),
        (openai.parse_embeddings, OPENAI_EMBEDDINGS),
        (lambda b: anthropic.parse_messages(b, {}), ANTHROPIC_MESSAGES),
        (lambda b: gemini.parse_generate("g", b, stream=False, alt_sse=False), GEMINI_GENERATE),
        (lambda b: gemini.count_tokens("g", b), GEMINI_COUNT),
        (lambda b: gemini.parse_embed("g", b), GEMINI_EMBED),
        (lambda b: gemini.parse_batch_embed("g", b), GEMINI_BATCH),
    ],
)
def test_the_seed_requests_are_valid(parse, examples):
    for body in examples:
        parse(body)


class _ReachedDeep(Exception):
    """A near-valid draw parsed with three or more messages (ends the search)."""


def test_near_valid_requests_reach_deep():
    """The near-valid strategy really produces valid calls (not only rejections):
    among its draws near the multi-turn seeds, some parse with three or more
    messages. Drawn near those seeds only (the mixed strategy, with arbitrary
    JSON beside them, parsed about one draw in 300 — too rare to hold whatever
    constants Hypothesis picks up from the code). About one draw in a hundred
    reaches deep, and which ones depends on the constants of every module
    loaded (Hypothesis draws them), so the search stops at the first success
    instead of counting on a fixed number of draws. Generation only: ``find``
    spent a minute shrinking what it found."""
    from hypothesis import Phase

    @settings(
        max_examples=5000, deadline=None, derandomize=True, database=None, phases=[Phase.generate]
    )
    @given(
        st.sampled_from([b for b in ANTHROPIC_MESSAGES if len(b["messages"]) >= 3]).flatmap(
            lambda body: near(body, ANTHROPIC_KEYS)
        )
    )
    def draw(body):
        if (
            check(anthropic.parse_messages, body, {}) is not None
            and isinstance(body, dict)
            and len(body.get("messages") or []) >= 3
        ):
            raise _ReachedDeep

    # No draw of the near-valid strategy parsed with 3+ messages when this does not raise.
    with pytest.raises(_ReachedDeep):
        draw()
