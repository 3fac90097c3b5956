"""OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``.

A 404 is an ``invalid_request_error`` as OpenAI's own (``model_not_found``,
``unknown_url``): OpenAI has no ``not_found_error`` type."""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols import base
from gateway_bridge.protocols.base import GatewayError, dumps

ERROR_TYPES = {
    base.INVALID_REQUEST: "invalid_request_error",
    base.AUTHENTICATION: "authentication_error",
    base.PAYMENT_REQUIRED: "insufficient_quota",
    base.PERMISSION: "permission_error",
    base.NOT_FOUND: "invalid_request_error",
    base.REQUEST_TOO_LARGE: "invalid_request_error",
    base.UNSUPPORTED_MEDIA: "invalid_request_error",
    base.RATE_LIMIT: "rate_limit_error",
    base.INTERNAL: "server_error",
    base.UPSTREAM: "server_error",
    base.OVERLOADED: "server_error",
    base.TIMEOUT: "timeout_error",
}


def error_object(err: GatewayError) -> dict[str, Any]:
    return {
        "message": err.message,
        "type": ERROR_TYPES.get(err.kind, "server_error"),
        "param": err.param,
        "code": err.code,
    }


def error_body(err: GatewayError) -> bytes:
    return dumps({"error": error_object(err)})


def error_response(err: GatewayError) -> tuple[int, bytes]:
    return err.status, error_body(err)
