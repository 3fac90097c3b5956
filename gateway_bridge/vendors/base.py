"""What every dialect module (``openai``, ``anthropic``, ``gemini``) exposes.

This module documents the interface and holds what the dialects share; each
dialect module defines these names at module level:

``PROTOCOL: str``
    The client protocol whose calls this dialect takes natively.

``auth_headers(secret: str, client_headers: dict[str, str]) -> list[tuple[str, str]]``
    The headers that authenticate a call with one credential (and, for
    Anthropic, ``anthropic-version`` — the client's, else ``DEFAULT_VERSION`` —
    and the client's ``anthropic-beta`` passed on). ``client_headers`` has
    lower-case names. An empty secret sends no auth header.

``path(endpoint: str, upstream_model: str, stream: bool) -> str``
    The path (with query) of a translated call for a pivot endpoint
    (``chat.completions``, ``embeddings``, ``completions``); raises
    ``GatewayError`` (400, code ``unsupported``) for an endpoint the vendor
    lacks.

``native_path(endpoint: str, upstream_model: str, stream: bool, query: str) -> str``
    The path of a native call of the client's endpoint (Gemini names the model
    in the path; ``query`` is the client's query string less its ``key``).

``models_path: str``
    Where the vendor lists models (the health probe reads it).

``from_chat(body: dict, upstream_model: str, stream: bool) -> dict``
    The OpenAI chat pivot body → this vendor's request body, a new dict (the
    pivot is the call's, unchanged from one try to the next). What the vendor
    cannot take raises ``GatewayError`` 400 (code ``unsupported``) naming it.
    The OpenAI dialect's is the identity with the channel's model id (and, on
    a stream, the usage chunk asked for).

``to_chat(obj: dict, model: str) -> tuple[dict, TokenUsage | None]``
    A vendor's plain answer → an OpenAI ``chat.completion`` dict (``model`` is
    put in it) and its usage read from the vendor's own fields
    (``gateway_bridge.usage_mapping``). Raises ``GatewayError`` (502,
    ``upstream_invalid_response``) for an answer of the wrong shape. The
    OpenAI dialect's is the identity: the answer as it came and no usage (the
    client's response adapter reads a chat object's own).

``stream_reader(model: str) -> ChatStreamReader | None``
    What turns the channel's stream into OpenAI chunks:
    ``.feed(event: str | None, data: dict) -> list[dict]``: one vendor stream
    event (its SSE ``event:`` name and parsed ``data``) → the OpenAI
    ``chat.completion.chunk`` dicts it amounts to (possibly none);
    ``.usage -> TokenUsage | None`` (the vendor's own counts so far);
    ``.finished -> bool`` (the vendor's terminal event came). An ``error``
    event raises ``GatewayError`` with the vendor's message. The OpenAI
    dialect's is None, the identity: its chunks are relayed as they came.

``translated_error(status: int, raw: bytes) -> GatewayError``
    The failed answer of a translated call in the gateway's terms: a 4xx the
    client's error, a 5xx (or a node's 429) the channel's failure, retried
    elsewhere.

``native_usage(obj: dict) -> TokenUsage | None``
    The usage of a native plain answer.

``NativeStreamUsage()``
    ``.feed(event: str | None, data: bytes) -> None`` for each event of a
    native stream (parse only what usage needs); ``.usage``; ``.content``
    (True once an event carried generated content: the call's first token);
    ``.finished``; ``.error`` (a ``GatewayError`` when the vendor streamed an
    error event, else None).

``error_of(status: int, raw: bytes) -> GatewayError``
    A vendor's error answer (its own error body, HTML, or nothing) → the
    gateway's error: 4xx keep their status and the vendor's message; 5xx and
    unknown statuses become 502 ``upstream_error``.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway_bridge.answers import upstream_status_error
from gateway_bridge.protocols.base import KIND_STATUS, UPSTREAM, GatewayError
from gateway_bridge.usage_mapping import TokenUsage


class ChatStreamReader(Protocol):
    """A translated stream's reader (a dialect's ``StreamReader(model)``)."""

    @property
    def usage(self) -> TokenUsage | None: ...

    @property
    def finished(self) -> bool: ...

    def feed(self, event: str | None, data: dict[str, Any]) -> list[dict[str, Any]]: ...


class NativeStreamReader(Protocol):
    """A native stream's usage reader (a dialect's ``NativeStreamUsage()``)."""

    @property
    def usage(self) -> TokenUsage | None: ...

    @property
    def content(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    @property
    def error(self) -> GatewayError | None: ...

    def feed(self, event: str | None, data: bytes) -> None: ...


class Dialect(Protocol):
    """The names every dialect module defines (documented above); a dialect
    module is assigned to a variable of this type in ``gateway_bridge.vendors``,
    so the type checker refuses one that lacks a name or gets a signature wrong."""

    # Read-only members (properties): the modules define them as plain names.
    @property
    def PROTOCOL(self) -> str: ...

    @property
    def models_path(self) -> str: ...

    def auth_headers(
        self, secret: str, client_headers: dict[str, str]
    ) -> list[tuple[str, str]]: ...

    def path(self, endpoint: str, upstream_model: str, stream: bool) -> str: ...

    def native_path(self, endpoint: str, upstream_model: str, stream: bool, query: str) -> str: ...

    def from_chat(
        self, body: dict[str, Any], upstream_model: str, stream: bool
    ) -> dict[str, Any]: ...

    def to_chat(
        self, obj: dict[str, Any], model: str
    ) -> tuple[dict[str, Any], TokenUsage | None]: ...

    def stream_reader(self, model: str) -> ChatStreamReader | None: ...

    def native_usage(self, obj: dict[str, Any]) -> TokenUsage | None: ...

    def NativeStreamUsage(self) -> NativeStreamReader: ...

    def error_of(self, status: int, raw: bytes) -> GatewayError: ...

    def translated_error(self, status: int, raw: bytes) -> GatewayError: ...


_KIND_OF_STATUS = {status: kind for kind, status in KIND_STATUS.items()}


def status_error(status: int, message: str, code: str) -> GatewayError:
    """A vendor's error as the gateway's: a 4xx keeps its status (the
    client's fault or a limit), anything else is the upstream's failure (502)."""
    message = (message or f"The vendor answered HTTP {status}.")[:2000]
    if 400 <= status < 500:
        kind = _KIND_OF_STATUS.get(status, "invalid_request")
        return GatewayError(kind, code or "upstream_client_error", message, status=status)
    return GatewayError(UPSTREAM, code or "upstream_error", message)


def channel_failure(error: GatewayError, status: int, raw: bytes) -> GatewayError:
    """A vendor's ``error`` for its HTTP ``status``, as a translated call's
    error: a 5xx the vendor's body calls a client error is the channel's
    failure still (retried elsewhere, never blamed on the client)."""
    if status >= 500 and error.status < 500:
        return upstream_status_error(status, raw)
    return error
