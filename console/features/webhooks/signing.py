"""The signature on every ``kind=webhook`` delivery, and how a receiver checks it.

Each POST carries three headers::

    Webhook-Id: <the event's id>            (the same on every retry: dedupe on it)
    Webhook-Timestamp: <unix seconds>       (when this attempt was signed)
    Webhook-Signature: v1=<hex>             (HMAC-SHA256 of f"{timestamp}.{body}")

where ``body`` is the exact bytes of the request body (JSON: ``id``, ``type``,
``created``, ``organization``, ``data``) and the key is the destination's
signing secret (``whsec_…``, shown once when the destination is created or its
secret rotated). A receiver recomputes the HMAC over the raw body, compares in
constant time and refuses a timestamp older than its tolerance (replays).
This module imports nothing but the standard library: a receiver can copy it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

ID_HEADER = "Webhook-Id"
TIMESTAMP_HEADER = "Webhook-Timestamp"
SIGNATURE_HEADER = "Webhook-Signature"
SCHEME = "v1"


class SignatureError(ValueError):
    """The request is not a valid, fresh signed delivery."""


def _as_bytes(body: bytes | str) -> bytes:
    return body.encode() if isinstance(body, str) else body


def signature(secret: str, timestamp: int, body: bytes | str) -> str:
    message = str(int(timestamp)).encode() + b"." + _as_bytes(body)
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, event_id: str, body: bytes | str, timestamp: int | None = None) -> dict:
    """The three headers of a delivery of ``body``."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    return {
        ID_HEADER: event_id,
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: f"{SCHEME}={signature(secret, ts, body)}",
    }


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return ""


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    tolerance: int = 300,
    now: float | None = None,
) -> str:
    """The event id when ``headers`` carry a valid signature of ``body`` made
    within ``tolerance`` seconds of ``now``; ``SignatureError`` otherwise.
    ``Webhook-Signature`` may list several ``v1=`` values (space-separated):
    one match is enough."""
    raw_ts = _header(headers, TIMESTAMP_HEADER)
    try:
        ts = int(raw_ts)
    except ValueError:
        raise SignatureError("missing or malformed Webhook-Timestamp") from None
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance:
        raise SignatureError("timestamp outside the tolerance (a replay?)")
    expected = signature(secret, ts, body)
    for part in _header(headers, SIGNATURE_HEADER).replace(",", " ").split():
        scheme, _, value = part.partition("=")
        if scheme == SCHEME and hmac.compare_digest(value, expected):
            return _header(headers, ID_HEADER)
    raise SignatureError("no valid v1 signature")
