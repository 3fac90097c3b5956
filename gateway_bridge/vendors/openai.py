"""The OpenAI dialect: channels of kind ``openai`` (the OpenAI API) and
``openai_compatible`` (vLLM, SGLang, llama.cpp, DeepSeek, Kimi, GLM, Qwen, ...).

The pivot is OpenAI chat, so this dialect is the identity translation: a
translated call is the pivot body as it is (only the model id set, and a
stream's usage chunk asked for), the answer is already the pivot's
(``to_chat`` gives it back as it came, ``stream_reader`` is None: the chunks
are relayed as they came), and a failed answer is the node's error
(``translated_error``, ``gateway_bridge.answers``).

Decisions:

* A stream is finished at ``[DONE]`` or at the first ``finish_reason`` (the
  usage chunk that follows it is still read while it comes): servers that
  close without ``[DONE]`` are common among the compatible ones.
* A native stream's first token is the first choice delta with ``content``,
  ``tool_calls``, ``reasoning_content`` / ``reasoning`` (or a completion's
  ``text``). Once it is seen, a chunk is parsed only when its ``usage`` or
  ``finish_reason`` is not null or it names an error.
* A passed-through Responses API stream (``/v1/responses`` on an ``openai``
  channel) is read by its typed events: the first text, arguments or
  reasoning delta is the first token, the usage is that of the final
  ``response.completed`` / ``response.incomplete`` (kept as ``final``, which
  the gateway stores), ``error`` / ``response.failed`` is the vendor's
  failure, and the deltas' text bills a stream cut before its end.
* An error streamed as a chunk (``{"error": {...}}``, vLLM's
  ``{"object": "error", ...}``) is the vendor's failure: a 502 with its message
  (``NativeStreamUsage.error`` holds it).
* Errors: OpenAI's ``{"error": {"message", "type", "code"}}``, vLLM's flat
  ``{"object": "error", "message", ...}``, ``{"detail": ...}`` and
  ``{"error": "text"}`` are read; HTML or an empty body gives a message
  naming the status only. A 401 or 403 keeps its status with the code
  ``upstream_auth_failed`` (the gateway then disables the credential), and any
  API key the vendor echoes (``sk-...``) is masked.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway_bridge.answers import upstream_client_error, upstream_status_error
from gateway_bridge.protocols.base import INVALID_REQUEST, GatewayError
from gateway_bridge.usage_mapping import TokenUsage, from_openai
from gateway_bridge.vendors.base import status_error

PROTOCOL = "openai"
models_path = "/v1/models"

_PATHS = {
    "chat.completions": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
}
_NATIVE_PATHS = {**_PATHS, "responses": "/v1/responses"}
AUTH_FAILED = "upstream_auth_failed"


def auth_headers(secret: str, client_headers: dict[str, str]) -> list[tuple[str, str]]:
    """``Authorization: Bearer <secret>`` (nothing for an empty secret)."""
    return [("authorization", f"Bearer {secret}")] if secret else []


def _unsupported(endpoint: str) -> GatewayError:
    return GatewayError(
        INVALID_REQUEST,
        "unsupported",
        f"The '{endpoint}' endpoint is not supported by this channel.",
    )


def path(endpoint: str, upstream_model: str, stream: bool) -> str:
    try:
        return _PATHS[endpoint]
    except KeyError:
        raise _unsupported(endpoint) from None


def native_path(endpoint: str, upstream_model: str, stream: bool, query: str) -> str:
    try:
        base = _NATIVE_PATHS[endpoint]
    except KeyError:
        raise _unsupported(endpoint) from None
    return f"{base}?{query}" if query else base


def from_chat(body: dict[str, Any], upstream_model: str, stream: bool) -> dict[str, Any]:
    """The pivot as it is, with the channel's model id and, on a stream, the
    usage chunk asked for (a shallow copy: the pivot itself is left as it is)."""
    if stream:
        return {**body, "model": upstream_model, "stream": True, "stream_options": _USAGE_CHUNK}
    return {**body, "model": upstream_model}


_USAGE_CHUNK = {"include_usage": True}


def to_chat(obj: dict[str, Any], model: str) -> tuple[dict[str, Any], TokenUsage | None]:
    """The answer as it came (a chat object already); its usage is the client's
    response adapter's to read."""
    return obj, None


def stream_reader(model: str) -> None:
    """None: the chunks are chat chunks already, relayed as they came."""
    return None


def translated_error(status: int, raw: bytes) -> GatewayError:
    """A node's failure (a 5xx, its own 429), or its refusal of the call (a
    4xx: the client's error, with the node's message)."""
    if status >= 500 or status == 429:
        return upstream_status_error(status, raw)
    return upstream_client_error(status, raw)


def native_usage(obj: dict[str, Any]) -> TokenUsage | None:
    return from_openai(obj.get("usage")) if isinstance(obj, dict) else None


def _finished(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") is not None for c in choices
    )


def _has_content(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(
            delta.get(k) for k in ("content", "tool_calls", "reasoning_content", "reasoning")
        ):
            return True
    return False


def _stream_error(chunk: dict[str, Any]) -> GatewayError | None:
    """The error a stream chunk carries (OpenAI's ``{"error": {...}}``, vLLM's
    ``{"object": "error", ...}``) as a 502, or None."""
    if isinstance(chunk.get("error"), dict | str) or chunk.get("object") == "error":
        return _error_of_body(502, chunk, "The vendor's stream ended with an error.")
    return None


# A chunk whose usage or finish_reason is not null, or an error, or a
# Responses event's text delta (only those need parsing once the first token
# was seen).
_WORTH_PARSING = re.compile(rb'"(?:usage|finish_reason)"\s*:\s*[^n\s]|"error"|"delta"\s*:\s*"')


# Responses API events (a passed-through ``/v1/responses`` stream).
_RESPONSE_DELTAS = frozenset({
    "response.output_text.delta", "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta", "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta", "response.refusal.delta",
})  # fmt: skip
_RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete"})


class NativeStreamUsage:
    """Usage, first token and end of a native OpenAI stream (``data:`` payloads):
    chat and completion chunks, or the Responses API's typed events (usage in
    the final ``response``; ``final`` is that response object; ``streamed_text``
    what the deltas carried, for a stream cut before its end)."""

    def __init__(self) -> None:
        self.usage: TokenUsage | None = None
        self.content = False
        self.finished = False
        self.error: GatewayError | None = None
        self.final: dict[str, Any] | None = None
        self._streamed: list[str] = []

    @property
    def streamed_text(self) -> str:
        return "".join(self._streamed)

    def _response_event(self, kind: str, chunk: dict[str, Any]) -> None:
        if kind in _RESPONSE_DELTAS:
            self.content = True
            if isinstance(chunk.get("delta"), str):
                self._streamed.append(chunk["delta"])
        elif kind in _RESPONSE_ENDS and isinstance(chunk.get("response"), dict):
            self.final = chunk["response"]
            self.usage = from_openai(self.final.get("usage")) or self.usage
            self.finished = True
        elif kind in ("error", "response.failed"):
            # What the vendor sent: a ``response.failed`` event carries its error in
            # the ``response`` object, which a broken vendor may leave out.
            failed = chunk.get("response") if kind == "response.failed" else chunk
            error = (
                failed.get("error")
                if kind == "response.failed" and isinstance(failed, dict)
                else failed
            )
            message = error.get("message") if isinstance(error, dict) else None
            self.error = _error_of_body(
                502, {"error": {"message": message or "The vendor's response failed."}}
            )
            if isinstance(chunk.get("response"), dict):
                self.usage = from_openai(chunk["response"].get("usage")) or self.usage

    def feed(self, event: str | None, data: bytes) -> None:
        if data.strip() == b"[DONE]":
            self.finished = True
            return
        if self.content and not _WORTH_PARSING.search(data):
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        kind = chunk.get("type")
        if isinstance(kind, str) and (kind.startswith("response.") or kind == "error"):
            self._response_event(kind, chunk)
            return
        error = _stream_error(chunk)
        if error is not None:
            self.error = error
            return
        if chunk.get("usage") is not None:
            usage = from_openai(chunk["usage"])
            if usage is not None:
                self.usage = usage
        if not self.content and _has_content(chunk):
            self.content = True
        if _finished(chunk):
            self.finished = True


_KEYS = re.compile(r"\b(sk|rk|pk|key)-[A-Za-z0-9_*.\-]{4,}")


def _mask(message: str) -> str:
    """The vendor's message with any API key it echoes masked."""
    return _KEYS.sub(r"\1-***", message)


def _error_of_body(status: int, body: object, fallback: str = "") -> GatewayError:
    message, code = "", ""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = error.get("message") or ""
            code = error.get("code") or error.get("type") or ""
        elif isinstance(error, str):
            message = error
        elif isinstance(body.get("message"), str):  # vLLM's flat error
            message = body["message"]
            code = body.get("type") or ""
        elif isinstance(body.get("detail"), str):
            message = body["detail"]
    message = _mask(message) if isinstance(message, str) and message else fallback
    code = code if isinstance(code, str) else ""
    if status in (401, 403):
        detail = f": {message}" if message and message != fallback else "."
        message = f"The vendor refused the channel's credential (HTTP {status}){detail}"
        return status_error(status, message, AUTH_FAILED)
    return status_error(status, message, code if 400 <= status < 500 else "")


def error_of(status: int, raw: bytes) -> GatewayError:
    """The vendor's error answer as the gateway's (see the module docstring)."""
    if not raw or not raw.strip():
        return _error_of_body(status, None, f"The vendor answered HTTP {status} with no body.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    fallback = f"The vendor answered HTTP {status} with a body that is not JSON."
    if isinstance(body, dict):
        fallback = f"The vendor answered HTTP {status}."
    return _error_of_body(status, body, fallback)
