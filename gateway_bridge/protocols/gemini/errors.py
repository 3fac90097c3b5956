"""Google's error body: ``{"error": {"code", "message", "status", "details"}}``."""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    INTERNAL,
    INVALID_REQUEST,
    NOT_FOUND,
    OVERLOADED,
    PAYMENT_REQUIRED,
    PERMISSION,
    RATE_LIMIT,
    REQUEST_TOO_LARGE,
    TIMEOUT,
    UNSUPPORTED_MEDIA,
    UPSTREAM,
    GatewayError,
    dumps,
)

STATUS = {
    INVALID_REQUEST: "INVALID_ARGUMENT",
    UNSUPPORTED_MEDIA: "INVALID_ARGUMENT",
    REQUEST_TOO_LARGE: "INVALID_ARGUMENT",
    AUTHENTICATION: "UNAUTHENTICATED",
    PAYMENT_REQUIRED: "RESOURCE_EXHAUSTED",
    PERMISSION: "PERMISSION_DENIED",
    NOT_FOUND: "NOT_FOUND",
    RATE_LIMIT: "RESOURCE_EXHAUSTED",
    INTERNAL: "INTERNAL",
    UPSTREAM: "INTERNAL",
    OVERLOADED: "UNAVAILABLE",
    TIMEOUT: "DEADLINE_EXCEEDED",
}

# Known fields, by message, in their camelCase spelling (snake_case is accepted too).


def error_object(err: GatewayError) -> dict[str, Any]:
    status = err.status
    return {
        "error": {
            "code": status,
            "message": err.message,
            "status": STATUS.get(err.kind, "INTERNAL"),
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": err.code,
                    "domain": "gateway",
                    **({"metadata": {"field": err.param}} if err.param else {}),
                }
            ],
        }
    }


def error_body(err: GatewayError) -> bytes:
    """Google's error JSON: ``{"error": {"code", "message", "status", "details"}}``."""
    return dumps(error_object(err))


def error_response(err: GatewayError) -> tuple[int, bytes]:
    return err.status, error_body(err)
