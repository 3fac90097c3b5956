"""Request checks that are the same in every protocol.

Each protocol words its type errors the way its vendor does (OpenAI's
``Invalid type for 'x'``, Anthropic's ``x: Input should be a valid string``,
Google's ``Invalid value at 'x' (TYPE_STRING)``), so those checks live in the
protocol's ``request`` module; what does not depend on the wording is here.
"""

from __future__ import annotations

import re
from typing import Any, TypeGuard

from gateway_bridge.protocols.base import invalid

#: Characters not allowed in the ids the gateway derives (message, tool-call, response ids).
ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def is_int(value: object) -> TypeGuard[int]:
    """A JSON integer (not a boolean, not a float with an integral value)."""
    return type(value) is int


def is_number(value: object) -> TypeGuard[float]:
    """A JSON number (not a boolean)."""
    return type(value) in (int, float)


def json_object(body: object) -> dict[str, Any]:
    """The request body, which must be a JSON object."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    return body
