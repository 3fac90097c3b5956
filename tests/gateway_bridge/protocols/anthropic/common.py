"""What the Anthropic adapter's tests share: a request builder, node answers and
streams, and the gateway's way of playing a stream through the adapter."""

from __future__ import annotations

import json

from gateway_bridge.protocols import anthropic as ap
from gateway_bridge.usage_mapping import from_openai

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

TOOL_USE_TURN = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
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
