"""Typed field checks in OpenAI's wording: ``Invalid type for 'x': expected an
integer, but got a string instead.``, ``Missing required parameter: 'x'.``,
``integer_below_min_value``, ... with OpenAI's ``param`` and ``code``. Each
getter reads ``body[name]``: None when absent, the value when it checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway_bridge.protocols.base import GatewayError, invalid
from gateway_bridge.protocols.checks import is_int, is_number

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "decimal": "a decimal",
    "boolean": "a boolean",
    "object": "an object",
    "array": "an array",
}


def _got(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def type_error(param: str, expected: str, value: object) -> GatewayError:
    return invalid(
        f"Invalid type for '{param}': expected {_TYPE_NAMES[expected]}, "
        f"but got {_got(value)} instead.",
        param=param,
        code="invalid_type",
    )


def missing(param: str) -> GatewayError:
    return invalid(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def bad_value(param: str, message: str) -> GatewayError:
    return invalid(message, param=param, code="invalid_value")


def int_field(
    body: dict[str, Any], name: str, low: int | None = None, high: int | None = None
) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not is_int(value):
        raise type_error(name, "integer", value)
    _bounds(name, "integer", value, low, high)
    return value


def number_field(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not is_number(value):
        raise type_error(name, "decimal", value)
    _bounds(name, "decimal", value, low, high)
    return value


def _bounds(name: str, kind: str, value: float, low: float | None, high: float | None) -> None:
    if low is not None and value < low:
        raise invalid(
            f"Invalid '{name}': {kind} below minimum value. Expected a value >= {low}, "
            f"but got {value} instead.",
            param=name,
            code=f"{kind}_below_min_value",
        )
    if high is not None and value > high:
        raise invalid(
            f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high}, "
            f"but got {value} instead.",
            param=name,
            code=f"{kind}_above_max_value",
        )


def bool_field(body: dict[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is not None and type(value) is not bool:
        raise type_error(name, "boolean", value)
    return value


def string_field(
    body: dict[str, Any], name: str, choices: tuple[str, ...] | None = None
) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise type_error(name, "string", value)
    if choices is not None and value not in choices:
        raise bad_value(
            name, f"Invalid value: '{value}'. Supported values are: {listing(choices)}."
        )
    return value


def object_field(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise type_error(name, "object", value)
    return value


def listing(choices: Iterable[str]) -> str:
    quoted = [f"'{c}'" for c in choices]
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}" if len(quoted) > 1 else quoted[0]
