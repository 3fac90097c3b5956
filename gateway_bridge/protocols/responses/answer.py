"""Answers in the Responses API: the node's chat completion as a ``response``
object (plain) or as Responses' typed events (streamed), each event with its
``type`` and ``sequence_number``:

    response.created, response.in_progress,
    per text answer:  response.output_item.added (message), response.content_part.added,
                      response.output_text.delta ..., response.output_text.done,
                      response.content_part.done, response.output_item.done
    per reasoning:    response.output_item.added (reasoning),
                      response.reasoning_text.delta ..., response.reasoning_text.done,
                      response.output_item.done
    per tool call:    response.output_item.added (function_call),
                      response.function_call_arguments.delta ..., ....done,
                      response.output_item.done
    response.completed (or response.incomplete when the output budget ran out)
    with the billed usage.

A node's failure after the first event: ``error`` then ``response.failed``.

The response's id and ``created_at`` are given by the pipeline (the adapter
has no clock); when the answer is complete, ``result`` holds the finished
response object (what ``GET /v1/responses/{id}`` shows) and ``output`` its
items (what ``previous_response_id`` continues from). A node's reasoning
(vLLM's ``reasoning_content``) is a ``reasoning`` item with its text as
``reasoning_text`` content (no summary, no encrypted content: a client that
sends it back gets it dropped from the next prompt, as the pivot has no
place for it).
"""

from __future__ import annotations

from typing import Any

from console.kernel.tokens import count_tokens
from gateway_bridge.protocols.base import (
    GatewayError,
    ResponseAdapter,
    dumps,
    invalid_answer,
    sse,
    tool_call_deltas,
)
from gateway_bridge.protocols.openai.errors import ERROR_TYPES
from gateway_bridge.usage_mapping import TokenUsage, to_responses

_INCOMPLETE: dict[object, str] = {"length": "max_output_tokens", "content_filter": "content_filter"}


class ResponsesResponse(ResponseAdapter):
    """Renders the node's chat completion as a Responses API answer. One
    instance per call: a stream keeps its state here."""

    def __init__(self, *, echo: dict[str, Any], input_estimate: int):
        # The request's fields a response object repeats (instructions, tools, ...).
        self.echo = echo
        self.input_estimate = input_estimate
        self.response_id = "resp_gateway"
        self.created_at = 0
        self.result: dict[str, Any] | None = None
        self.output: list[dict[str, Any]] = []
        self._seq = 0
        # ("text",) or ("call", upstream index, upstream id)
        self._open: tuple[Any, ...] | None = None
        self._text: list[str] = []  # of the open message
        self._args: list[str] = []  # of the open function call
        self._produced: list[str] = []  # every output text, for a count without node usage
        self._finish: object = None
        self._model = ""

    # ---- shared

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{self.response_id.removeprefix('resp_')}_{len(self.output)}"

    def _usage(self, usage: TokenUsage | None) -> dict[str, Any]:
        if usage is None:
            usage = TokenUsage(
                input=self.input_estimate, output=count_tokens("".join(self._produced))
            )
        return to_responses(usage)

    def _response(
        self, model: str, status: str, usage: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": model,
            "output": list(self.output) if status != "in_progress" else [],
            **self.echo,
            "usage": usage,
        }
        if status == "incomplete":
            reason = _INCOMPLETE.get(self._finish, "max_output_tokens")
            body["incomplete_details"] = {"reason": reason}
        return body

    def _status(self) -> str:
        return "incomplete" if self._finish in _INCOMPLETE else "completed"

    def _finished(self, model: str, usage: TokenUsage | None) -> dict[str, Any]:
        self.result = self._response(model, self._status(), self._usage(usage))
        return self.result

    # ---- plain

    def render(self, upstream: dict[str, Any], usage: TokenUsage | None, model: str) -> bytes:
        choices = upstream.get("choices") if isinstance(upstream, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            raise invalid_answer()
        message = choice.get("message")
        if not isinstance(message, dict):
            raise invalid_answer()
        thought = _reasoning(message)
        if thought:
            self._produced.append(thought)
            self.output.append(_reasoning_item(self._id("rs"), thought))
        text = message.get("content")
        if isinstance(text, str) and text:
            self._produced.append(text)
            self.output.append(_message(self._id("msg"), text, "completed"))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments = function.get("arguments")
            arguments = arguments if isinstance(arguments, str) else ""
            self._produced.append(arguments)
            item = _call(self._id("fc"), call.get("id"), function.get("name"), "completed")
            item["arguments"] = arguments
            self.output.append(item)
        self._finish = choice.get("finish_reason")
        return dumps(self._finished(model, usage))

    # ---- streams

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return sse(event, kind)

    def stream_start(self, model: str) -> bytes:
        self._model = model
        head = self._response(model, "in_progress")
        return self._event("response.created", response=head) + self._event(
            "response.in_progress", response=head
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        index = len(self.output) - 1
        item = self.output[index]
        if self._open[0] == "reasoning":
            item = _reasoning_item(item["id"], "".join(self._text))
            out = self._event(
                "response.reasoning_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=item["content"][0]["text"],
            )
        elif self._open[0] == "text":
            text = "".join(self._text)
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            item = _message(item["id"], text, "completed")
            out = self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            ) + self._event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            )
        else:
            item = {**item, "arguments": "".join(self._args), "status": "completed"}
            out = self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        self.output[index] = item
        self._open = None
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def _begin_reasoning(self) -> bytes:
        head = self._close()
        item = {**_reasoning_item(self._id("rs"), ""), "content": []}
        self.output.append(item)
        self._open, self._text = ("reasoning",), []
        index = len(self.output) - 1
        return head + self._event("response.output_item.added", output_index=index, item=item)

    def _begin_text(self) -> bytes:
        head = self._close()
        item = _message(self._id("msg"), None, "in_progress")
        self.output.append(item)
        self._open, self._text = ("text",), []
        index = len(self.output) - 1
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return (
            head
            + self._event("response.output_item.added", output_index=index, item=item)
            + self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            )
        )

    def _begin_call(
        self, key: tuple[Any, ...], call: dict[str, Any], function: dict[str, Any]
    ) -> bytes:
        head = self._close()
        item = _call(self._id("fc"), call.get("id"), function.get("name"), "in_progress")
        self.output.append(item)
        self._open, self._args = key, []
        index = len(self.output) - 1
        return head + self._event("response.output_item.added", output_index=index, item=item)

    def stream_chunk(self, chunk: dict[str, Any], model: str) -> bytes:
        out: list[bytes] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            thought = _reasoning(delta)
            if thought:
                if self._open != ("reasoning",):
                    out.append(self._begin_reasoning())
                self._text.append(thought)
                self._produced.append(thought)
                out.append(
                    self._event(
                        "response.reasoning_text.delta",
                        item_id=self.output[-1]["id"],
                        output_index=len(self.output) - 1,
                        content_index=0,
                        delta=thought,
                    )
                )
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._open != ("text",):
                    out.append(self._begin_text())
                self._text.append(text)
                self._produced.append(text)
                item_id = self.output[-1]["id"]
                out.append(
                    self._event(
                        "response.output_text.delta",
                        item_id=item_id,
                        output_index=len(self.output) - 1,
                        content_index=0,
                        delta=text,
                        logprobs=[],
                    )
                )
            for call, function, key, opens in tool_call_deltas(delta, lambda: self._open, "call"):
                if opens:
                    out.append(self._begin_call(key, call, function))
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    self._args.append(arguments)
                    self._produced.append(arguments)
                    out.append(
                        self._event(
                            "response.function_call_arguments.delta",
                            item_id=self.output[-1]["id"],
                            output_index=len(self.output) - 1,
                            delta=arguments,
                        )
                    )
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        return b"".join(out)

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        tail = self._close()
        final = self._finished(model, usage)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return tail + self._event(kind, response=final)

    def stream_error(self, error: GatewayError) -> bytes:
        code = ERROR_TYPES.get(error.kind, "server_error")
        failed = self._response(self._model, "failed")
        failed["output"] = list(self.output)
        failed["error"] = {"code": code, "message": error.message}
        return self._event(
            "error", code=error.code, message=error.message, param=error.param
        ) + self._event("response.failed", response=failed)


def _reasoning(message: dict[str, Any]) -> str:
    """The reasoning of a pivot message or delta (vLLM's ``reasoning_content``,
    newer servers' ``reasoning``)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def _message(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = []
    if text is not None:
        content.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _call(item_id: str, call_id: object, name: object, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id if isinstance(call_id, str) and call_id else item_id,
        "name": name if isinstance(name, str) else "",
        "arguments": "",
        "status": status,
    }
