"""The simulator's error: an ``ApiError`` is rendered as OpenAI's
``{"error": {"message", "type", "param", "code"}}`` (the Anthropic and Gemini
front-ends render it in their own shapes)."""

from __future__ import annotations

import json


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # OpenAI's field name
        param: str | None = None,
        code: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
        details: list | None = None,  # Gemini's ``error.details``
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers
        self.details = details

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}).encode()


def invalid(param: str, message: str, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)
