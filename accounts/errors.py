"""Errors a user can cause. Services raise them; views turn them into form
errors or messages, the API into ``{"error": {...}}`` bodies. Never a 500."""

from __future__ import annotations

from collections.abc import Mapping


class DomainError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str, *, code: str | None = None, fields: dict | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.fields: dict[str, list[str]] = fields or {}


class ValidationFailed(DomainError):
    code = "invalid"
    http_status = 400

    @classmethod
    def from_fields(cls, fields: Mapping[str, str | list[str]]) -> ValidationFailed:
        normalized = {k: v if isinstance(v, list) else [v] for k, v in fields.items()}
        first_field, first_msgs = next(iter(normalized.items()))
        message = first_msgs[0] if first_field == "__all__" else f"{first_field}: {first_msgs[0]}"
        return cls(message, fields=normalized)


class PermissionDenied(DomainError):
    code = "permission_denied"
    http_status = 403


class NotFound(DomainError):
    code = "not_found"
    http_status = 404


class Conflict(DomainError):
    code = "conflict"
    http_status = 409
