"""Anthropic's errors as the gateway's: the error answer of a call
(``error_of``) and the ``error`` event of a stream (``stream_error``).

    vendor answer                                  gateway error (status, kind, code)
    401, 403                                       same status, authentication /
                                                   permission, upstream_auth_failed
    529, or any overloaded_error                   503, overloaded, upstream_overloaded
    other 4xx (429 rate_limit_error, 400, 404,     same status, its kind, the vendor's
    413, ...)                                      error type (invalid_request_error, ...)
    5xx (500 api_error, ...), unknown statuses     502, upstream, upstream_error
    stream ``error`` event: overloaded_error       503, overloaded, upstream_overloaded
    stream ``error`` event: anything else          502, upstream, the vendor's error type

The vendor's message is kept (cut at 2,000 characters); an HTML or empty body
gives a message naming the status.
"""

from __future__ import annotations

import contextlib

import orjson

from gateway_bridge.protocols.base import OVERLOADED, UPSTREAM, GatewayError
from gateway_bridge.vendors.base import channel_failure, status_error

AUTH_FAILED = "upstream_auth_failed"
OVERLOADED_CODE = "upstream_overloaded"
OVERLOADED_STATUS = 529


def _fields(body: object) -> tuple[str, str]:
    """(error type, message) of Anthropic's ``{"type": "error", "error": {...}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "", ""
    kind, message = error.get("type"), error.get("message")
    return (kind if isinstance(kind, str) else ""), (message if isinstance(message, str) else "")


def _overloaded(message: str) -> GatewayError:
    return GatewayError(
        OVERLOADED, OVERLOADED_CODE, (message or "The vendor is overloaded.")[:2000]
    )


def error_of(status: int, raw: bytes) -> GatewayError:
    """An Anthropic error answer (status and body) as the gateway's error."""
    body = None
    if raw and raw.strip():
        with contextlib.suppress(orjson.JSONDecodeError):
            body = orjson.loads(raw)
    kind, message = _fields(body)
    if status in (401, 403):
        detail = f": {message}" if message else "."
        message = f"The vendor refused the channel's credential (HTTP {status}){detail}"
        return status_error(status, message, AUTH_FAILED)
    if not message:
        if not raw or not raw.strip():
            message = f"The vendor answered HTTP {status} with no body."
        elif isinstance(body, dict):
            message = f"The vendor answered HTTP {status}."
        else:
            message = f"The vendor answered HTTP {status} with a body that is not JSON."
    if status == OVERLOADED_STATUS or kind == "overloaded_error":
        return _overloaded(message)
    return status_error(status, message, kind if 400 <= status < 500 else "")


def stream_error(data: object) -> GatewayError:
    """A stream's ``error`` event (its parsed data) as the gateway's error."""
    kind, message = _fields(data)
    if kind == "overloaded_error":
        return _overloaded(message)
    message = (message or "The vendor's stream ended with an error.")[:2000]
    return GatewayError(UPSTREAM, kind or "upstream_error", message)


def translated_error(status: int, raw: bytes) -> GatewayError:
    """A translated call's failed answer (``base.channel_failure``)."""
    return channel_failure(error_of(status, raw), status, raw)
