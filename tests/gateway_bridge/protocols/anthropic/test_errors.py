"""Anthropic's error bodies and statuses, and the model list."""

from __future__ import annotations

import json

import pytest

from gateway_bridge.protocols import anthropic as ap
from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    NOT_FOUND,
    OVERLOADED,
    PAYMENT_REQUIRED,
    RATE_LIMIT,
    REQUEST_TOO_LARGE,
    TIMEOUT,
    UPSTREAM,
    GatewayError,
    ModelInfo,
)

# --------------------------------------------------------------------------- errors, models


@pytest.mark.parametrize(
    ("kind", "status", "type_"),
    [
        (AUTHENTICATION, 401, "authentication_error"),
        (PAYMENT_REQUIRED, 402, "billing_error"),
        (NOT_FOUND, 404, "not_found_error"),
        (REQUEST_TOO_LARGE, 413, "request_too_large"),
        (RATE_LIMIT, 429, "rate_limit_error"),
        (UPSTREAM, 502, "api_error"),
        (OVERLOADED, 529, "overloaded_error"),
        (TIMEOUT, 504, "timeout_error"),
    ],
)
def test_error_types_and_statuses(kind, status, type_):
    status_got, raw = ap.error_response(GatewayError(kind, "code", "Something."))
    assert status_got == status
    assert json.loads(raw) == {"type": "error", "error": {"type": type_, "message": "Something."}}


def test_models_list_has_anthropics_shape_and_only_chat_models():
    models = [
        ModelInfo("claude-local", "Claude Local", 200_000, "chat", 1_700_000_000),
        ModelInfo("embed-1", "Embed", 8192, "embedding", 1_700_000_000),
        ModelInfo("small", "Small", 32_000, "chat", 0),
    ]
    assert json.loads(ap.render_models(models)) == {
        "data": [
            {
                "type": "model",
                "id": "claude-local",
                "display_name": "Claude Local",
                "created_at": "2023-11-14T22:13:20Z",
            },
            {
                "type": "model",
                "id": "small",
                "display_name": "Small",
                "created_at": "1970-01-01T00:00:00Z",
            },
        ],
        "has_more": False,
        "first_id": "claude-local",
        "last_id": "small",
    }
    assert json.loads(ap.render_models([]))["first_id"] is None
