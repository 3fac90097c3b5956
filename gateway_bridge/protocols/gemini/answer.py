"""Answers in the Gemini protocol: the node's chat completion as a
GenerateContentResponse (plain, or streamed with ``alt=sse`` or as the JSON
array without it), its embeddings as ``embedContent`` / ``batchEmbedContents``
answers, and the model list.

* Finish reasons: ``stop`` and ``tool_calls`` → ``STOP``, ``length`` →
  ``MAX_TOKENS``, ``content_filter`` → ``SAFETY``.
* Streams: a chunk per text delta; function calls are sent whole (Gemini never
  streams partial arguments) in the last chunk, which also carries
  ``finishReason`` and the billed ``usageMetadata``.
* Log probabilities (``responseLogprobs``): the node's ``logprobs.content``
  becomes ``logprobsResult`` (``chosenCandidates``, ``topCandidates``) and
  ``avgLogprobs``, per candidate, and per chunk in a stream.
* Thoughts: an upstream's ``reasoning_content`` (a vendor channel that thinks)
  becomes ``thought: true`` parts before the text, as Gemini sends them, when
  the client asked with ``thinkingConfig.includeThoughts``; otherwise it is not
  shown (its tokens are still in ``thoughtsTokenCount`` when the upstream
  reported them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from console.kernel.tokens import count_tokens
from gateway_bridge.protocols.base import (
    GatewayError,
    ModelInfo,
    ResponseAdapter,
    dumps,
    invalid_answer,
    sse,
    tool_arguments,
)
from gateway_bridge.protocols.checks import ID_CHARS
from gateway_bridge.protocols.gemini.errors import error_object
from gateway_bridge.usage_mapping import TokenUsage, to_gemini

_FINISH = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}


# A node's answer is untrusted JSON: these read its fields without assuming types.


def _list_of(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _choice_index(value: object, default: int) -> int:
    return value if type(value) is int and value >= 0 else default


def _text_or_empty(value: object) -> str:
    return value if isinstance(value, str) else ""


def _finish_reason(value: object) -> str:
    return _FINISH.get(value, "STOP") if isinstance(value, str) else "STOP"


def _response_id(upstream_id: object) -> str:
    raw = upstream_id if isinstance(upstream_id, str) else ""
    for prefix in ("chatcmpl-", "chatcmpl_", "cmpl-"):
        raw = raw.removeprefix(prefix)
    return ID_CHARS.sub("", raw) or "gateway"


def _logprob(entry: object) -> dict[str, Any] | None:
    if not isinstance(entry, dict):
        return None
    token, value = entry.get("token"), entry.get("logprob")
    if not isinstance(token, str) or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return {"token": token, "logProbability": value}


def _logprobs(choice: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's ``logprobs.content`` of a choice → Gemini's ``logprobsResult`` and
    ``avgLogprobs`` (nothing when the node sent none)."""
    probs = choice.get("logprobs")
    content = probs.get("content") if isinstance(probs, dict) else None
    if not isinstance(content, list) or not content:
        return {}
    chosen, top = [], []
    for entry in content:
        token = _logprob(entry)
        if token is None:
            continue
        chosen.append(token)
        alternatives = (_logprob(t) for t in _list_of(entry.get("top_logprobs")))
        top.append({"candidates": [t for t in alternatives if t is not None]})
    if not chosen:
        return {}
    average = sum(t["logProbability"] for t in chosen) / len(chosen)
    result = {"topCandidates": top, "chosenCandidates": chosen}
    return {"logprobsResult": result, "avgLogprobs": average}


def _call_part(name: object, arguments: object) -> dict[str, Any]:
    return {
        "functionCall": {
            "name": name if isinstance(name, str) else "",
            "args": tool_arguments(arguments),
        }
    }


class GenerateResponse(ResponseAdapter):
    """The node's chat completion as a GenerateContentResponse; a stream
    keeps its state (open function calls, finish reasons) here."""

    def __init__(
        self,
        *,
        input_estimate: int,
        stream: bool,
        alt_sse: bool,
        tool_names: Iterable[str] = (),
        include_thoughts: bool = False,
    ) -> None:
        self.input_estimate = input_estimate
        self.include_thoughts = include_thoughts
        self.alt_sse = alt_sse
        self.stream_content_type = (
            "text/event-stream" if alt_sse or not stream else "application/json"
        )
        self.tool_names = tuple(tool_names)
        self._id = "gateway"
        self._upstream_id: str | None = None
        self._sent = 0  # chunks sent (the JSON-array form needs commas)
        # (candidate, call index) → name/args
        self._calls: dict[tuple[int, int], dict[str, Any]] = {}
        self._finish: dict[int, str] = {}
        self._output: list[str] = []

    def _usage(self, usage: TokenUsage | None) -> dict[str, Any]:
        if usage is None:
            usage = TokenUsage(
                input=self.input_estimate, output=count_tokens("".join(self._output))
            )
        return to_gemini(usage)

    def render(self, upstream: dict[str, Any], usage: TokenUsage | None, model: str) -> bytes:
        choices = upstream.get("choices") if isinstance(upstream, dict) else None
        if not isinstance(choices, list) or not choices:
            raise invalid_answer()
        candidates = []
        for position, choice in enumerate(choices):
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                raise invalid_answer()
            parts: list[dict[str, Any]] = self._thought(message.get("reasoning_content"))
            text = message.get("content")
            if isinstance(text, str) and text:
                parts.append({"text": text})
                self._output.append(text)
            for call in _list_of(message.get("tool_calls")):
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    parts.append(_call_part(function.get("name"), function.get("arguments")))
            candidates.append(
                {
                    "content": {"parts": parts or [{"text": ""}], "role": "model"},
                    "finishReason": _finish_reason(choice.get("finish_reason")),
                    "index": _choice_index(choice.get("index"), position),
                    **_logprobs(choice),
                }
            )
        return dumps(
            {
                "candidates": candidates,
                "usageMetadata": self._usage(usage),
                "modelVersion": model,
                "responseId": _response_id(upstream.get("id")),
            }
        )

    def _thought(self, text: object) -> list[dict[str, Any]]:
        """A thought part for ``reasoning_content`` (counted as output either way)."""
        if not isinstance(text, str) or not text:
            return []
        self._output.append(text)
        return [{"text": text, "thought": True}] if self.include_thoughts else []

    # ---- streams

    def _frame(self, obj: dict[str, Any]) -> bytes:
        self._sent += 1
        if self.alt_sse:
            return sse(obj)
        head = b"[" if self._sent == 1 else b",\r\n"
        return head + dumps(obj)

    def stream_start(self, model: str) -> bytes:
        return b""

    def stream_chunk(self, chunk: dict[str, Any], model: str) -> bytes:
        upstream_id = chunk.get("id")
        if isinstance(upstream_id, str) and upstream_id != self._upstream_id:
            self._upstream_id = upstream_id  # the same in every chunk: derived once
            self._id = _response_id(upstream_id)
        candidates = []
        for choice in _list_of(chunk.get("choices")):
            if not isinstance(choice, dict):
                continue
            index = _choice_index(choice.get("index"), 0)
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            for call in _list_of(delta.get("tool_calls")):
                if not isinstance(call, dict):
                    continue
                slot = self._calls.setdefault(
                    (index, _choice_index(call.get("index"), 0)), {"name": "", "arguments": ""}
                )
                function = call.get("function")
                function = function if isinstance(function, dict) else {}
                slot["name"] += _text_or_empty(function.get("name"))
                slot["arguments"] += _text_or_empty(function.get("arguments"))
            if choice.get("finish_reason") is not None:
                self._finish[index] = _finish_reason(choice["finish_reason"])
            parts = self._thought(delta.get("reasoning_content"))
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._output.append(text)
                parts.append({"text": text})
            if parts:
                candidates.append(
                    {
                        "content": {"parts": parts, "role": "model"},
                        "index": index,
                        **_logprobs(choice),
                    }
                )
        if not candidates:
            return b""
        return self._frame(
            {"candidates": candidates, "modelVersion": model, "responseId": self._id}
        )

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        indexes = sorted({i for i, _ in self._calls} | set(self._finish) | {0})
        candidates = []
        for index in indexes:
            parts = [
                _call_part(slot["name"], slot["arguments"])
                for (i, _), slot in sorted(self._calls.items())
                if i == index
            ]
            candidates.append(
                {
                    "content": {"parts": parts or [{"text": ""}], "role": "model"},
                    "finishReason": self._finish.get(index, "STOP"),
                    "index": index,
                }
            )
        last = {
            "candidates": candidates,
            "usageMetadata": self._usage(usage),
            "modelVersion": model,
            "responseId": self._id,
        }
        out = self._frame(last)
        return out if self.alt_sse else out + b"]"

    def stream_error(self, error: GatewayError) -> bytes:
        body = error_object(error)
        if self.alt_sse:
            return sse(body)
        return (b"[" if self._sent == 0 else b",\r\n") + dumps(body) + b"]"


class EmbedResponse(ResponseAdapter):
    """OpenAI embeddings → ``{"embedding": {...}}`` or ``{"embeddings": [...]}``."""

    def __init__(self, *, batch: bool) -> None:
        self.batch = batch

    def render(self, upstream: dict[str, Any], usage: TokenUsage | None, model: str) -> bytes:
        data = upstream.get("data") if isinstance(upstream, dict) else None
        if not isinstance(data, list) or not data:
            raise invalid_answer()
        vectors = []
        for item in sorted(
            (d for d in data if isinstance(d, dict)),
            key=lambda d: _choice_index(d.get("index"), 0),
        ):
            values = item.get("embedding")
            if not isinstance(values, list):
                raise invalid_answer(
                    "The model node sent an embedding that is not a list of numbers."
                )
            vectors.append({"values": values})
        if not vectors:
            raise invalid_answer("The model node sent no embeddings.")
        if self.batch:
            return dumps({"embeddings": vectors})
        return dumps({"embedding": vectors[0]})

    # Embeddings are never streamed: these are never called.
    def stream_chunk(self, chunk: dict[str, Any], model: str) -> bytes:
        raise NotImplementedError

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        raise NotImplementedError

    def stream_error(self, error: GatewayError) -> bytes:
        raise NotImplementedError


_METHODS = {
    "chat": ["generateContent", "streamGenerateContent", "countTokens"],
    "embedding": ["embedContent", "batchEmbedContents"],
}


def render_models(models: list[ModelInfo]) -> bytes:
    """Gemini's ``/v1beta/models`` page (everything on one page)."""
    data = [
        {
            "name": f"models/{m.name}",
            "baseModelId": m.name,
            "version": "001",
            "displayName": m.display_name,
            "description": m.display_name,
            "inputTokenLimit": m.context_window,
            "outputTokenLimit": m.context_window,
            "supportedGenerationMethods": _METHODS[m.kind],
        }
        for m in models
        if m.kind in _METHODS
    ]
    return dumps({"models": data})
