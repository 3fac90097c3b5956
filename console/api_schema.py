"""OpenAPI post-processing: the error answers every operation can give.

Every error of the REST API has one shape (``console.api_errors``:
``{"error": {"code", "message", "fields"?}}``). drf-spectacular documents
only the success answers the views declare, so this hook adds the errors
the API really gives, operation by operation, all as the ``Error`` schema:

* 401 and 403 everywhere (no or a bad token; a role that may not);
* 400 where the operation reads a body or query parameters;
* 404 where the path names an object, or a cursor can be stale;
* 409 on writes (a state that forbids the change: a duplicate name, the last
  owner, an invoice already finalized).

Listed in ``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]`` after the enum
hook.

Query filters are marked ``allowEmptyValue``: ``?period=`` means no period,
as in the console's filter forms."""

from __future__ import annotations

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "fields": {
                    "type": "object",
                    "additionalProperties": True,
                    "description": "Messages per input field that was refused",
                },
            },
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}

DESCRIPTIONS = {
    "400": "Invalid input (the fields named in error.fields)",
    "401": "No valid credentials",
    "403": "The caller's role may not do this",
    "404": "No such object in the caller's organization (or a stale page cursor)",
    "409": "The object's state forbids the change",
}
CURSORS = {"cursor", "before", "after"}
WRITES = {"post", "put", "patch", "delete"}


def add_error_responses(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if method not in WRITES | {"get"}:
                continue
            params = operation.get("parameters", [])
            codes = ["401", "403"]
            if params or "requestBody" in operation:
                codes.append("400")
            if "{" in path or any(p.get("name") in CURSORS for p in params):
                codes.append("404")
            if method in WRITES:
                codes.append("409")
            for param in params:
                # Filters read an empty value as "not given" (as the console's
                # forms do); a page cursor must be one the API gave.
                if param.get("in") == "query" and param.get("name") not in CURSORS:
                    param.setdefault("allowEmptyValue", True)
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(code, {"content": ref, "description": DESCRIPTIONS[code]})
    return result
