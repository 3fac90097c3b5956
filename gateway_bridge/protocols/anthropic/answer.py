"""Answers in Anthropic's Messages protocol: the node's chat completion as an
Anthropic message, plain or streamed event by event, and the model list.

* ``stop_reason`` is ``stop_sequence`` when the node names the matched stop
  string (vLLM's ``choices[].stop_reason``) and it is one of the request's
  ``stop_sequences``; otherwise a plain stop is ``end_turn``.
* Streams: ``message_start`` is sent with the first upstream chunk (it carries
  the message id, derived from the node's) and its ``input_tokens`` is the
  gateway's estimate; the final ``message_delta`` carries the real cumulative
  usage (input, cache read/creation, output), which the SDK's accumulated
  message takes over.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from console.kernel.tokens import count_tokens
from gateway_bridge.protocols.anthropic.errors import error_body
from gateway_bridge.protocols.base import (
    GatewayError,
    ModelInfo,
    ResponseAdapter,
    dumps,
    invalid_answer,
    sse,
    tool_arguments,
    tool_call_deltas,
)
from gateway_bridge.protocols.checks import ID_CHARS
from gateway_bridge.usage_mapping import TokenUsage, to_anthropic


def _message_id(upstream_id: object) -> str:
    raw = upstream_id if isinstance(upstream_id, str) else ""
    for prefix in ("chatcmpl-", "chatcmpl_", "cmpl-"):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    raw = ID_CHARS.sub("", raw)
    return f"msg_{raw or 'gateway'}"


def _tool_id(call_id: object, message_id: str, index: int) -> str:
    raw = ID_CHARS.sub("", call_id) if isinstance(call_id, str) else ""
    if raw.startswith("toolu_"):
        return raw
    for prefix in ("call_", "chatcmpl-tool-", "chatcmpl-tool"):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    return f"toolu_{raw}" if raw else f"toolu_{message_id[4:]}_{index}"


class MessagesResponse(ResponseAdapter):
    """Renders the node's chat completion as an Anthropic message. One
    instance per call: a stream keeps its state (open block, indexes) here."""

    def __init__(self, *, input_estimate: int, stop_sequences: list[str] | tuple[str, ...] = ()):
        self.input_estimate = input_estimate
        self.stop_sequences = tuple(stop_sequences)
        self._started = False
        self._message_id = "msg_gateway"
        self._index = -1  # index of the last opened content block
        # ("text",) or ("tool", upstream index, upstream id)
        self._open: tuple[Any, ...] | None = None
        self._finish: str | None = None
        self._matched: object = None
        self._saw_tool = False
        self._output_text: list[str] = []  # for an output count when the node sends no usage

    # ---- shared

    def _stop(self, finish: object, matched: object, saw_tool: bool) -> tuple[str, str | None]:
        if finish in ("tool_calls", "function_call") or (saw_tool and finish in ("stop", None)):
            return "tool_use", None
        if finish == "length":
            return "max_tokens", None
        if finish == "content_filter":
            return "refusal", None
        if isinstance(matched, str) and matched in self.stop_sequences:
            return "stop_sequence", matched
        return "end_turn", None

    def _usage(self, usage: TokenUsage | None, output_text: str) -> dict[str, Any]:
        if usage is None:
            usage = TokenUsage(input=self.input_estimate, output=count_tokens(output_text))
        return to_anthropic(usage)

    # ---- plain

    def render(self, upstream: dict[str, Any], usage: TokenUsage | None, model: str) -> bytes:
        """The Anthropic message; a GatewayError (UPSTREAM) when the node's
        answer is not a chat completion."""
        choices = upstream.get("choices") if isinstance(upstream, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            raise invalid_answer()
        message = choice.get("message")
        if not isinstance(message, dict):
            raise invalid_answer()
        message_id = _message_id(upstream.get("id"))
        content: list[dict[str, Any]] = []
        text = message.get("content")
        if isinstance(text, str) and text:
            content.append({"type": "text", "text": text})
        produced = [text if isinstance(text, str) else ""]
        calls = message.get("tool_calls")
        for i, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments = function.get("arguments")
            produced.append(arguments if isinstance(arguments, str) else "")
            content.append(
                {
                    "type": "tool_use",
                    "id": _tool_id(call.get("id"), message_id, i),
                    "name": function.get("name") or "",
                    "input": tool_arguments(arguments),
                }
            )
        saw_tool = any(block["type"] == "tool_use" for block in content)
        stop_reason, stop_sequence = self._stop(
            choice.get("finish_reason"), choice.get("stop_reason"), saw_tool
        )
        return dumps(
            {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": stop_sequence,
                "usage": self._usage(usage, "".join(produced)),
            }
        )

    # ---- streams

    def stream_start(self, model: str) -> bytes:
        # message_start waits for the first chunk: it carries the node's id.
        return b""

    def _message_start(self, upstream_id: object, model: str) -> bytes:
        self._started = True
        self._message_id = _message_id(upstream_id)
        message: dict[str, Any] = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_estimate,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 0,
            },
        }
        return sse({"type": "message_start", "message": message}, "message_start") + sse(
            {"type": "ping"}, "ping"
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse({"type": "content_block_stop", "index": self._index}, "content_block_stop")

    def _begin(self, key: tuple[Any, ...], block: dict[str, Any]) -> bytes:
        head = self._close()
        self._index += 1
        self._open = key
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return head + sse(start, "content_block_start")

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse(
            {"type": "content_block_delta", "index": self._index, "delta": delta},
            "content_block_delta",
        )

    def stream_chunk(self, chunk: dict[str, Any], model: str) -> bytes:
        out = []
        if not self._started:
            out.append(self._message_start(chunk.get("id"), model))
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._open != ("text",):
                    out.append(self._begin(("text",), {"type": "text", "text": ""}))
                out.append(self._delta({"type": "text_delta", "text": text}))
                self._output_text.append(text)
            for call, function, key, opens in tool_call_deltas(delta, lambda: self._open, "tool"):
                if opens:
                    self._saw_tool = True
                    block: dict[str, Any] = {
                        "type": "tool_use",
                        "id": _tool_id(call.get("id"), self._message_id, self._index + 1),
                        "name": function.get("name") or "",
                        "input": {},
                    }
                    out.append(self._begin(key, block))
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
                    self._output_text.append(arguments)
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
                self._matched = choice.get("stop_reason")
        return b"".join(out)

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        out = [] if self._started else [self._message_start(None, model)]
        out.append(self._close())
        stop_reason, stop_sequence = self._stop(self._finish, self._matched, self._saw_tool)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": self._usage(usage, "".join(self._output_text)),
        }
        out.append(sse(delta, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return b"".join(out)

    def stream_error(self, error: GatewayError) -> bytes:
        return sse(error_body(error), "error")


def _created_at(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_models(models: list[ModelInfo]) -> bytes:
    """Anthropic's ``/v1/models`` page (one page with everything). Only chat
    models: the Messages API cannot use embedding or completion-only ones."""
    data = [
        {
            "type": "model",
            "id": m.name,
            "display_name": m.display_name,
            "created_at": _created_at(m.created),
        }
        for m in models
        if m.kind == "chat"
    ]
    return dumps(
        {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )
