"""Anthropic's error body and status: ``{"type": "error", "error": {"type", "message"}}``,
and 529 for ``overloaded_error``."""

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

OVERLOADED_STATUS = 529  # Anthropic's status for overloaded_error

ERROR_TYPES = {
    INVALID_REQUEST: "invalid_request_error",
    UNSUPPORTED_MEDIA: "invalid_request_error",
    AUTHENTICATION: "authentication_error",
    PAYMENT_REQUIRED: "billing_error",
    PERMISSION: "permission_error",
    NOT_FOUND: "not_found_error",
    REQUEST_TOO_LARGE: "request_too_large",
    RATE_LIMIT: "rate_limit_error",
    INTERNAL: "api_error",
    UPSTREAM: "api_error",
    OVERLOADED: "overloaded_error",
    TIMEOUT: "timeout_error",
}


def error_object(err: GatewayError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(err.kind, "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def error_body(err: GatewayError) -> bytes:
    """Anthropic's error JSON: ``{"type": "error", "error": {"type", "message"}}``."""
    return dumps(error_object(err))


def error_response(err: GatewayError) -> tuple[int, bytes]:
    """The HTTP status and body of an error: the error's status, except that
    ``overloaded_error`` is Anthropic's 529."""
    status = OVERLOADED_STATUS if err.kind == OVERLOADED else err.status
    return status, error_body(err)
