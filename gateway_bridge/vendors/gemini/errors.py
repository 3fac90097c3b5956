"""Google's error answers → the gateway's ``GatewayError``.

Google answers ``{"error": {"code", "message", "status", "details"}}`` — and,
from ``streamGenerateContent`` without ``alt=sse``, the same object inside a
JSON array. The mapping:

* an invalid key (reason ``API_KEY_INVALID``, which Google sends with HTTP 400
  ``INVALID_ARGUMENT``), ``UNAUTHENTICATED`` or HTTP 401 → 401
  ``upstream_auth_failed``;
* ``PERMISSION_DENIED`` or HTTP 403 → 403 ``upstream_auth_failed``;
* ``RESOURCE_EXHAUSTED`` or HTTP 429 → 429 ``upstream_rate_limited``, with a
  ``retry-after`` header from the ``RetryInfo`` detail when there is one;
* any other 4xx keeps its status (``upstream_client_error``); 5xx and unknown
  statuses become 502 ``upstream_error``;
* an HTML or empty body keeps the status rule with a message naming the status.

The channel's credential is the one refused, never the client's: the auth
messages say so.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from gateway_bridge.protocols.base import AUTHENTICATION, PERMISSION, GatewayError
from gateway_bridge.vendors.base import channel_failure, status_error

AUTH_FAILED = "upstream_auth_failed"
RATE_LIMITED = "upstream_rate_limited"
_DELAY = re.compile(r"(\d{1,9}(?:\.\d+)?)s")


def _error_object(raw: bytes) -> dict[str, Any] | None:
    """The ``error`` object of Google's body (or of the first array element holding one)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if isinstance(body, list):
        body = next((item for item in body if isinstance(item, dict) and "error" in item), None)
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else None


def _retry_after(details: list[Any]) -> str | None:
    for detail in details:
        if isinstance(detail, dict) and isinstance(detail.get("retryDelay"), str):
            found = _DELAY.fullmatch(detail["retryDelay"])
            if found:
                return str(max(1, math.ceil(float(found.group(1)))))
    return None


def error_from(error: dict[str, Any], status: int) -> GatewayError:
    """Google's ``error`` object → the gateway's error. ``status`` is the HTTP
    status (0 for an error streamed inside a 200 answer: then the object's
    own ``code`` counts)."""
    if not 400 <= status <= 599:
        code = error.get("code")
        status = code if type(code) is int and 400 <= code <= 599 else 502
    google, message, details = error.get("status"), error.get("message"), error.get("details")
    google = google if isinstance(google, str) else ""
    message = message if isinstance(message, str) else ""
    details = details if isinstance(details, list) else []
    reasons = {d.get("reason") for d in details if isinstance(d, dict)}
    if "API_KEY_INVALID" in reasons or google == "UNAUTHENTICATED" or status == 401:
        return GatewayError(
            AUTHENTICATION,
            AUTH_FAILED,
            f"The Gemini API refused the channel's credential: {message or 'unauthenticated'}",
            status=401,
        )
    if google == "PERMISSION_DENIED" or status == 403:
        return GatewayError(
            PERMISSION,
            AUTH_FAILED,
            f"The Gemini API denied the channel's credential: {message or 'permission denied'}",
            status=403,
        )
    if google == "RESOURCE_EXHAUSTED" or status == 429:
        err = status_error(429, message, RATE_LIMITED)
        delay = _retry_after(details)
        if delay:
            err.headers = [("retry-after", delay)]
        return err
    return status_error(status, message, "")


def error_of(status: int, raw: bytes) -> GatewayError:
    """A Gemini error answer (Google's JSON, a JSON array of it, HTML or nothing)."""
    error = _error_object(raw) if raw else None
    if error is None:
        return status_error(status, "", "")
    return error_from(error, status)


def translated_error(status: int, raw: bytes) -> GatewayError:
    """A translated call's failed answer (``base.channel_failure``)."""
    return channel_failure(error_of(status, raw), status, raw)
