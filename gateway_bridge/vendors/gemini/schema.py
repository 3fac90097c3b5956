"""JSON schema → the Gemini API's ``Schema`` (an OpenAPI 3.0 subset).

Used for ``functionDeclarations[].parameters`` and ``responseSchema``. Gemini
refuses what its subset lacks, so the conversion keeps only what it takes:

* ``type`` in upper case; ``["string", "null"]`` becomes ``STRING`` with
  ``nullable``; a ``null`` branch of ``anyOf``/``oneOf`` becomes ``nullable``;
  ``oneOf`` is read as ``anyOf``; an ``allOf`` is merged into one schema;
* local ``$ref``s (``#/$defs/…``, ``#/definitions/…``) are inlined, a
  recursive one as ``{}`` (any value), as Google's own SDK does;
* ``const`` becomes a one-value ``enum``; an ``enum`` of non-strings is dropped
  (Gemini's enums are strings); ``format`` is kept only where Gemini takes it
  (``date-time``/``enum`` on strings, ``int32``/``int64``, ``float``/``double``);
* an object's empty ``properties`` are dropped (Gemini refuses them), and
  ``required`` names only properties that exist;
* everything else is **dropped**: ``additionalProperties``, ``$schema``,
  ``$id``, ``strict``, ``examples``, ``patternProperties``, ``not``,
  ``if``/``then``/``else``, ``uniqueItems``, ``multipleOf``, the exclusive
  bounds, ... — the model no longer sees those constraints.

``ordered`` adds ``propertyOrdering`` (the properties in their JSON order) to
objects, so a JSON answer keeps the order the client's schema gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway_bridge.protocols.base import invalid

_TYPES = {"string", "number", "integer", "boolean", "array", "object"}
_KEEP = {
    "title",
    "description",
    "nullable",
    "default",
    "example",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "pattern",
    "propertyOrdering",
}
_FORMATS = {
    "STRING": {"date-time", "enum"},
    "INTEGER": {"int32", "int64"},
    "NUMBER": {"float", "double"},
}
_MAX_DEPTH = 64


def _deref(
    schema: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...], param: str
) -> tuple[dict[str, Any], tuple[Any, ...]]:
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema, seen
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix) and ref[len(prefix) :] in defs:
            name = ref[len(prefix) :]
            if name in seen:  # a recursive schema: any value from here
                return {}, seen
            target = defs[name]
            if not isinstance(target, dict):
                return {}, seen
            merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            return _deref(merged, defs, (*seen, name), param)
    raise invalid(
        f"{param}: the schema reference {ref[:100]!r} is not a local $defs reference; "
        "the Gemini API takes none.",
        param=param,
        code="unsupported",
    )


def _merge_all_of(schema: dict[str, Any]) -> dict[str, Any]:
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return schema
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in parts:
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _type_of(schema: dict[str, Any], out: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        named = [k for k in kind if isinstance(k, str) and k != "null"]
        if len(named) < len(kind):
            out["nullable"] = True
        if len(named) > 1:
            out["anyOf"] = [{"type": k.upper()} for k in named if k in _TYPES]
            return None
        kind = named[0] if named else None
    if isinstance(kind, str) and kind.lower() in _TYPES:
        return kind.upper()
    if "properties" in schema:
        return "OBJECT"
    if "items" in schema:
        return "ARRAY"
    if isinstance(schema.get("enum"), list) or isinstance(schema.get("const"), str):
        return "STRING"
    return None


def _branches(
    branches: object, out: dict[str, Any], sub: Callable[[object], dict[str, Any]]
) -> None:
    """``anyOf`` / ``oneOf``: a ``null`` branch makes ``out`` nullable; one other
    branch is merged into it, several become its ``anyOf``."""
    if isinstance(branches, list):
        kept = []
        for branch in branches:
            if isinstance(branch, dict) and branch.get("type") == "null":
                out["nullable"] = True
            else:
                kept.append(sub(branch))
        if len(kept) == 1:
            out.update(kept[0])
        elif kept:
            out["anyOf"] = kept


def convert(
    schema: object,
    param: str,
    *,
    ordered: bool = False,
    defs: dict[str, Any] | None = None,
    seen: tuple[str, ...] = (),
    depth: int = 0,
) -> dict[str, Any]:
    """One JSON schema (``param`` names it in errors) → Gemini's Schema."""
    if not isinstance(schema, dict):
        return {}  # ``true`` / ``{}``: any value
    if depth > _MAX_DEPTH:
        raise invalid(f"{param}: the schema nests too deep.", param=param, code="unsupported")
    if defs is None:
        defs = {}
        for key in ("definitions", "$defs"):
            if isinstance(schema.get(key), dict):
                defs.update(schema[key])
    schema, seen = _deref(schema, defs, seen, param)
    schema = _merge_all_of(schema)

    def sub(value: object) -> dict[str, Any]:
        return convert(value, param, ordered=ordered, defs=defs, seen=seen, depth=depth + 1)

    out: dict[str, Any] = {}
    _branches(schema.get("anyOf", schema.get("oneOf")), out, sub)
    kind = _type_of(schema, out)
    if kind:
        out["type"] = kind
    for key in _KEEP:
        if key in schema and schema[key] is not None:
            out[key] = schema[key]
    enum = schema.get("enum")
    if isinstance(schema.get("const"), str):
        enum = [schema["const"]]
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        out["enum"] = enum
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS.get(kind or "", ()):
        out["format"] = fmt
    properties = schema.get("properties")
    if isinstance(properties, dict) and properties:
        out["properties"] = {str(name): sub(value) for name, value in properties.items()}
        if ordered and len(properties) > 1 and "propertyOrdering" not in out:
            out["propertyOrdering"] = list(out["properties"])
        required = schema.get("required")
        if isinstance(required, list):
            names = [n for n in required if isinstance(n, str) and n in out["properties"]]
            if names:
                out["required"] = list(dict.fromkeys(names))
    if "items" in schema and isinstance(schema["items"], dict):
        out["items"] = sub(schema["items"])
    return out
