"""Anthropic answers → OpenAI chat objects (``to_chat``, ``StreamReader``) and
the usage of native answers (``native_usage``, ``NativeStreamUsage``).

Usage is read from Anthropic's own fields by ``usage_mapping.from_anthropic``;
in a stream ``message_start`` and each ``message_delta`` carry cumulative
counts, merged as ``usage_mapping.from_anthropic_stream`` does (a later value
replaces an earlier one, never added).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway_bridge.protocols.base import GatewayError, dumps, invalid_answer
from gateway_bridge.usage_mapping import (
    TokenUsage,
    from_anthropic,
    from_anthropic_stream,
    to_openai,
)
from gateway_bridge.vendors.anthropic.errors import stream_error

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: object) -> str | None:
    """OpenAI's finish_reason for Anthropic's ``stop_reason`` (None while unknown)."""
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) and value else default


def to_chat(obj: dict[str, Any], model: str) -> tuple[dict[str, Any], TokenUsage | None]:
    """An Anthropic message → an OpenAI ``chat.completion`` and its usage."""
    if not isinstance(obj, dict) or obj.get("type") != "message":
        raise invalid_answer("The vendor's answer is not an Anthropic message.")
    content = obj.get("content")
    if not isinstance(content, list):
        raise invalid_answer("The vendor's message has no content list.")
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
        elif kind == "tool_use":
            calls.append(
                {
                    "id": _text(block.get("id"), f"toolu_{len(calls)}"),
                    "type": "function",
                    "function": {
                        "name": _text(block.get("name")),
                        "arguments": dumps(block.get("input") or {}).decode(),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    usage = native_usage(obj)
    answer = {
        "id": _text(obj.get("id"), "msg_vendor"),
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(obj.get("stop_reason")) or "stop",
            }
        ],
    }
    if usage is not None:
        answer["usage"] = to_openai(usage)
    return answer, usage


def native_usage(obj: dict[str, Any]) -> TokenUsage | None:
    return from_anthropic(obj.get("usage")) if isinstance(obj, dict) else None


class StreamReader:
    """Anthropic stream events → OpenAI ``chat.completion.chunk`` dicts."""

    def __init__(self, model: str):
        self.model = model
        self.finished = False
        self._id = "msg_vendor"
        self._usages: list[Any] = []
        self._tools: dict[int, int] = {}  # content block index → tool call index

    @property
    def usage(self) -> TokenUsage | None:
        return from_anthropic_stream(self._usages) if self._usages else None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def _tool_start(self, index: object, block: dict[str, Any]) -> list[dict[str, Any]]:
        position = len(self._tools)
        if isinstance(index, int):
            self._tools[index] = position
        call = {
            "index": position,
            "id": _text(block.get("id"), f"toolu_{position}"),
            "type": "function",
            "function": {"name": _text(block.get("name")), "arguments": ""},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _delta(self, index: object, delta: object) -> list[dict[str, Any]]:
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and (text := _text(delta.get("text"))):
            return [self._chunk({"content": text})]
        if kind == "thinking_delta" and (thought := _text(delta.get("thinking"))):
            return [self._chunk({"reasoning_content": thought})]
        if kind == "input_json_delta" and (part := _text(delta.get("partial_json"))):
            position = self._tools.get(index) if isinstance(index, int) else None
            if position is not None:
                call = {"index": position, "function": {"arguments": part}}
                return [self._chunk({"tool_calls": [call]})]
        return []  # signature_delta, citations_delta, ...

    def feed(self, event: str | None, data: dict[str, Any]) -> list[dict[str, Any]]:
        kind = data.get("type") if isinstance(data, dict) else None
        kind = kind or event
        if kind == "message_start":
            message = data.get("message")
            message = message if isinstance(message, dict) else {}
            if isinstance(message.get("id"), str):
                self._id = message["id"]
            if message.get("usage") is not None:
                self._usages.append(message["usage"])
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = data.get("content_block")
            block = block if isinstance(block, dict) else {}
            if block.get("type") == "tool_use":
                return self._tool_start(data.get("index"), block)
            if block.get("type") == "text" and (text := _text(block.get("text"))):
                return [self._chunk({"content": text})]
            return []
        if kind == "content_block_delta":
            return self._delta(data.get("index"), data.get("delta"))
        if kind == "message_delta":
            if data.get("usage") is not None:
                self._usages.append(data["usage"])
            delta = data.get("delta")
            stop = delta.get("stop_reason") if isinstance(delta, dict) else None
            finish = finish_reason(stop)
            return [self._chunk({}, finish)] if finish else []
        if kind == "message_stop":
            self.finished = True
            return []
        if kind == "error":
            raise stream_error(data)
        return []  # ping, content_block_stop, events added later


# The event type at the start of an Anthropic data payload ({"type":"...", ...}).
_TYPE = re.compile(rb'\s*\{\s*"type"\s*:\s*"([a-z_]+)"')
_USAGE_EVENTS = frozenset({"message_start", "message_delta", "error"})


class NativeStreamUsage:
    """Usage, first token and end of a native Anthropic stream: only
    ``message_start``, ``message_delta`` and ``error`` data are parsed."""

    def __init__(self) -> None:
        self.content = False
        self.finished = False
        self.error: GatewayError | None = None
        self._usages: list[Any] = []

    @property
    def usage(self) -> TokenUsage | None:
        return from_anthropic_stream(self._usages) if self._usages else None

    def feed(self, event: str | None, data: bytes) -> None:
        kind = event
        if not kind:
            match = _TYPE.match(data)
            kind = match.group(1).decode() if match else None
        if kind == "content_block_delta":
            self.content = True
            return
        if kind == "message_stop":
            self.finished = True
            return
        if kind is not None and kind not in _USAGE_EVENTS:
            return
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(parsed, dict):
            return
        kind = parsed.get("type") or kind
        if kind == "message_start":
            message = parsed.get("message")
            if isinstance(message, dict) and message.get("usage") is not None:
                self._usages.append(message["usage"])
        elif kind == "message_delta":
            if parsed.get("usage") is not None:
                self._usages.append(parsed["usage"])
        elif kind == "error":
            self.error = stream_error(parsed)
        elif kind == "content_block_delta":
            self.content = True
        elif kind == "message_stop":
            self.finished = True


def stream_reader(model: str) -> StreamReader:
    """The reader that turns this vendor's stream into OpenAI chunks."""
    return StreamReader(model)
