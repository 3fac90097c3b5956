"""Which vendor protocol a request speaks, and errors in that vendor's own shape.

The node serves three front-ends on one port: OpenAI (``/v1/chat/completions``
and the rest), Anthropic (``/v1/messages``) and Gemini (``/v1beta/models/...``,
and the same under ``/v1/`` as google-genai may use it). Two paths are shared:
``GET /v1/models`` (and ``/v1/models/{id}``) answers in Anthropic's shape when
the request carries ``anthropic-version``, in Gemini's when it carries a Gemini
key (``x-goog-api-key`` or ``?key=``) or google's ``x-goog-api-client``, and in
OpenAI's otherwise; ``/v1/models/{model}:{method}`` is always Gemini.

Every handler raises ``protocol.ApiError`` (status, message, OpenAI type and
code); ``error_response`` renders it for the request's dialect, choosing the
vendor's error type from the status:

* OpenAI: ``{"error": {"message", "type", "param", "code"}}`` as raised.
* Anthropic: ``{"type": "error", "error": {"type", "message"}, "request_id"}``
  with a ``request-id`` header; 400 ``invalid_request_error``, 401
  ``authentication_error``, 403 ``permission_error``, 404 ``not_found_error``,
  413 ``request_too_large``, 429 ``rate_limit_error``, 500 ``api_error``, 503
  and 529 ``overloaded_error``.
* Gemini: ``{"error": {"code", "message", "status"}}`` (plus ``details`` when
  the error has them); 400 ``INVALID_ARGUMENT``, 401 ``UNAUTHENTICATED``, 403
  ``PERMISSION_DENIED``, 404 ``NOT_FOUND``, 429 ``RESOURCE_EXHAUSTED``, 500
  ``INTERNAL``, 503 ``UNAVAILABLE``, 504 ``DEADLINE_EXCEEDED``.
"""

from __future__ import annotations

import json
import uuid

from .http import Request, Response
from .protocol import ApiError

OPENAI = "openai"
ANTHROPIC = "anthropic"
GEMINI = "gemini"

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def is_gemini_model_path(path: str) -> bool:
    """``/v1beta/...`` or ``/v1/models/{model}:{method}``."""
    if path.startswith("/v1beta/"):
        return True
    return path.startswith("/v1/models/") and ":" in path[len("/v1/models/") :]


def dialect_of(request: Request, path: str) -> str | None:
    """The vendor protocol of a request to ``path`` (None: health, metrics, admin)."""
    if is_gemini_model_path(path):
        return GEMINI
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return ANTHROPIC
    if path == "/v1/models" or path.startswith("/v1/models/"):
        headers = request.headers
        if "anthropic-version" in headers:
            return ANTHROPIC
        if "x-goog-api-key" in headers or "x-goog-api-client" in headers:
            return GEMINI
        if any(p.startswith("key=") for p in request.query.split("&")):
            return GEMINI
        return OPENAI
    if path.startswith("/v1/"):
        return OPENAI
    return None


def request_id(prefix: str = "req_") -> str:
    return prefix + uuid.uuid4().hex[:24]


def anthropic_error_body(status: int, message: str, request: str) -> bytes:
    kind = _ANTHROPIC_TYPES.get(status) or (
        "api_error" if status >= 500 else "invalid_request_error"
    )
    error = {"type": "error", "error": {"type": kind, "message": message}, "request_id": request}
    return json.dumps(error).encode()


def gemini_error_body(status: int, message: str, details: list | None = None) -> bytes:
    name = _GEMINI_STATUS.get(status) or ("INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    error: dict = {"code": status, "message": message, "status": name}
    if details:
        error["details"] = details
    return json.dumps({"error": error}).encode()


def error_response(dialect: str | None, error: ApiError) -> Response:
    """``error`` rendered the way the request's vendor renders its errors."""
    if dialect == ANTHROPIC:
        rid = request_id()
        body = anthropic_error_body(error.status, error.message, rid)
        return Response(error.status, body, headers=(*error.headers, ("request-id", rid)))
    if dialect == GEMINI:
        body = gemini_error_body(error.status, error.message, error.details)
        return Response(error.status, body, headers=error.headers)
    return Response(error.status, error.body(), headers=error.headers)
