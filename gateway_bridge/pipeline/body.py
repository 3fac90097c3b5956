"""Stage 3, read the body: size limit, content type, JSON, then the protocol
adapter's ``parse_call`` (validation and the node's request body); the
call's cost attribution follows (``attribution``).

The size limit is checked against ``Content-Length`` before reading and
against the bytes as they arrive; a client that leaves while sending raises
``Disconnected``. Errors are protocol-neutral ``GatewayError``s, rendered in
the client's protocol by the relay.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from gateway_bridge.pipeline.adapters import parser
from gateway_bridge.pipeline.call import Call, Disconnected
from gateway_bridge.protocols.base import (
    INVALID_REQUEST,
    REQUEST_TOO_LARGE,
    UNSUPPORTED_MEDIA,
    CallRequest,
    GatewayError,
)

if TYPE_CHECKING:
    from gateway_bridge.asgi import Receive, Scope


class _Threshold(Protocol):
    @property
    def threshold(self) -> int: ...


class LargeBodyClaim(Protocol):
    """What reading a body needs of a large-body ticket (``fair.Ticket``, which
    imports this module): the size that makes a body large, and the claim."""

    @property
    def gate(self) -> _Threshold: ...

    def claim(self) -> None: ...


def too_large(max_body: int) -> GatewayError:
    return GatewayError(
        REQUEST_TOO_LARGE,
        "request_too_large",
        f"The request body is larger than the limit of {max_body} bytes.",
    )


async def read_json(receive: Receive, headers: dict[str, str], max_body: int) -> Any:
    """The request body, parsed as JSON."""
    return loads(await read_raw(receive, headers, max_body))


async def read_raw(
    receive: Receive, headers: dict[str, str], max_body: int, large: LargeBodyClaim | None = None
) -> bytes:
    """The request body's bytes (size limit and content type checked).
    ``large`` (a ``fair.Ticket``) is claimed before the body is read when
    ``Content-Length`` says it is large, or as soon as the bytes counted
    reach ``large.gate.threshold``."""
    length = headers.get("content-length")
    large_at = large.gate.threshold if large is not None else max_body + 1
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise GatewayError(
                INVALID_REQUEST, "invalid_content_length", "Content-Length is not a number."
            ) from None
        if declared > max_body:
            raise too_large(max_body)
        if declared >= large_at and large is not None:
            large.claim()
    ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype and ctype != "application/json" and not ctype.endswith("+json"):
        raise GatewayError(
            UNSUPPORTED_MEDIA,
            "unsupported_content_type",
            f"Content-Type must be application/json, not {ctype}.",
        )
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > max_body:
                raise too_large(max_body)
            if size >= large_at and large is not None:
                large.claim()
            chunks.append(chunk)
        if not message.get("more_body"):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def loads(raw: bytes) -> Any:
    """The body parsed as JSON (a clear 400 when it is not)."""
    if not raw.strip():
        raise GatewayError(INVALID_REQUEST, "invalid_json", "The request body is empty.")
    try:
        return orjson.loads(raw)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "invalid JSON"
        raise GatewayError(
            INVALID_REQUEST,
            "invalid_json",
            f"The request body is not valid JSON: {detail}.",
        ) from None


def parse(
    call: Call,
    data: Any,
    scope: Scope,
    headers: dict[str, str],
    path_model: str | None,
    raw: bytes = b"",
) -> CallRequest:
    """The call, validated and normalized by its protocol's adapter, with what
    a native channel needs: the body as sent, and the query less any ``key``."""
    query = scope.get("query_string") or b""
    req: CallRequest = parser(call.protocol, call.endpoint).parse_call(
        call.endpoint, data, path_model=path_model, query=query, headers=headers
    )
    req.raw = raw
    if type(data) is dict:
        req.client_body = data
    if query:
        req.query = "&".join(
            part
            for part in query.decode("latin-1").split("&")
            if part and not part.startswith("key=")
        )
    return req
