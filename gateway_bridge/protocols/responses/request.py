"""Checks of a ``POST /v1/responses`` body in OpenAI's wording (``param`` and
``code`` as OpenAI's), and the pivot's ``tools``, ``tool_choice``,
``reasoning_effort`` and ``response_format`` built from them.

The gateway is a tolerant reader: what the published API accepts is never
refused for being unknown here. It reads what it needs and sorts the rest:

* Fields the gateway has no use for (``include``, ``prompt_cache_key``,
  ``prompt_cache_retention``, ``metadata``, ``client_metadata``, ``user``,
  ``safety_identifier``, ``service_tier``, ``truncation``, ``max_tool_calls``,
  ``top_logprobs``, ``stream_options``) are checked for type and not
  forwarded to a translated channel — Codex sends ``include`` and
  ``prompt_cache_key`` with every turn. A field this module does not know
  (the API grows) goes to a channel of the OpenAI API as sent and is left out
  of a translation, named in ``CallRequest.dropped`` (the answer's
  ``x-gateway-dropped`` header).
* What stores state at the vendor under the channel's account, not the
  caller's (``background``, ``conversation``, ``prompt`` templates), is a
  400 naming it, whichever the channel.
* Tools: functions are the pivot's. The tools a coding agent adds by default
  that a translation can leave out without changing what is asked
  (``AGENT_DEFAULT_TOOLS``: Codex's ``web_search`` and its ``namespace`` of
  sub-agent functions) go to an OpenAI API channel as sent and are dropped,
  with the header, elsewhere. Every other tool type — tools the client runs
  itself (``custom``, ``local_shell``, ...), hosted tools (``file_search``,
  ``mcp``, ``computer_use_preview``, ...), a type this module does not know —
  is untranslatable: an OpenAI API channel takes it as sent, any other
  answers 400 naming it (the tool was asked for on purpose).
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.base import invalid
from gateway_bridge.protocols.checks import json_object
from gateway_bridge.protocols.openai.fields import (
    bad_value,
    bool_field,
    listing,
    missing,
    object_field,
    string_field,
    type_error,
)

# Cost attribution: the body field naming the call's end user (the path;
# empty: none). The Responses API names the end user in ``user``.
END_USER_FIELD: tuple[str, ...] = ("user",)

USED = {
    "model", "input", "instructions", "stream", "tools", "tool_choice", "parallel_tool_calls",
    "max_output_tokens", "temperature", "top_p", "reasoning", "text", "store",
    "previous_response_id",
}  # fmt: skip
IGNORED = {
    "include", "prompt_cache_key", "prompt_cache_retention", "metadata", "user",
    "safety_identifier", "service_tier", "truncation", "max_tool_calls", "top_logprobs",
    "stream_options", "client_metadata",
}  # fmt: skip
UNSUPPORTED = {
    "background": "background responses",
    "conversation": "conversations",
    "prompt": "prompt templates",
}
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = ("auto", "concise", "detailed")
# Tools a coding agent sends by default that a translation drops (with the
# ``x-gateway-dropped`` header): Codex's hosted web search and its namespace
# of multi-agent functions. Every other non-function tool is untranslatable.
AGENT_DEFAULT_TOOLS = frozenset({"web_search", "web_search_preview", "namespace"})


def _unsupported(param: str, what: str) -> Exception:
    return invalid(
        f"'{param}': {what} are not supported by this gateway.",
        param=param,
        code="unsupported_parameter",
    )


def check_fields(body: object, dropped: list[str]) -> dict[str, Any]:
    """The body, its known fields checked; the unknown ones named in ``dropped``."""
    body = json_object(body)
    for name, value in body.items():
        if name in USED or name in IGNORED:
            continue
        if name in UNSUPPORTED:
            if value in (None, False):
                continue
            raise _unsupported(name, UNSUPPORTED[name])
        dropped.append(f"{name}: a field the translation does not carry")
    for name in ("include",):
        value = body.get(name)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise type_error(name, "array", value)
    for name in ("prompt_cache_key", "user", "safety_identifier", "service_tier", "truncation"):
        string_field(body, name)
    object_field(body, "metadata")
    object_field(body, "client_metadata")
    return body


def model_of(body: dict[str, Any]) -> str:
    value = body.get("model")
    if value is None:
        raise missing("model")
    if not isinstance(value, str) or not value:
        raise type_error("model", "string", value)
    return value


def _schema(schema: object, param: str, name: str) -> dict[str, Any]:
    """A function's ``parameters``: a JSON schema of an object."""
    if not isinstance(schema, dict):
        raise type_error(param, "object", schema)

    def bad(why: str) -> Exception:
        return invalid(
            f"Invalid schema for function '{name}': {why}",
            param=param,
            code="invalid_function_parameters",
        )

    kind = schema.get("type", "object")
    if kind != "object":
        raise bad(f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{kind}\"'.")
    properties = schema.get("properties")
    if properties is not None and not isinstance(properties, dict):
        raise bad("'properties' must be an object.")
    for prop, sub in (properties or {}).items():
        if not isinstance(sub, dict):
            raise bad(f"the property '{prop}' must be a schema object.")
    required = schema.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        raise bad("'required' must be an array of strings.")
    return schema


def _valid_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= 64
        and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)
    )


def tools(
    body: dict[str, Any], skipped: list[str], dropped: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """(pivot tools, their names) of Responses' flat function tools; the
    tools a translation drops are named in ``dropped``, those it cannot carry
    in ``skipped`` (module docstring)."""
    value = body.get("tools")
    if value is None:
        return [], []
    if not isinstance(value, list):
        raise type_error("tools", "array", value)
    out: list[dict[str, Any]] = []
    names: list[str] = []
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise type_error(param, "object", tool)
        kind = tool.get("type")
        if kind is None:
            raise missing(f"{param}.type")
        if not isinstance(kind, str):
            raise type_error(f"{param}.type", "string", kind)
        if kind != "function":
            (dropped if kind in AGENT_DEFAULT_TOOLS else skipped).append(
                f"{param}: the '{kind}' tool"
            )
            if kind != "namespace" and isinstance(tool.get("name"), str):
                names.append(tool["name"])  # a custom tool tool_choice may name
            continue
        name = tool.get("name")
        if name is None:
            raise missing(f"{param}.name")
        if not _valid_name(name):
            raise bad_value(
                f"{param}.name",
                f"Invalid '{param}.name': string does not match pattern. Expected a string "
                "that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
            )
        if name in names:
            raise bad_value("tools", f"Duplicate function name '{name}' in 'tools'.")
        function: dict[str, Any] = {"name": name}
        description = string_field(tool, "description")
        if description is not None:
            function["description"] = description
        if tool.get("parameters") is not None:
            function["parameters"] = _schema(tool["parameters"], f"{param}.parameters", name)
        strict = bool_field(tool, "strict")
        if strict is not None:
            function["strict"] = strict
        out.append({"type": "function", "function": function})
        names.append(name)
    return out, names


def tool_choice(body: dict[str, Any], names: list[str], skipped: list[str]) -> object:
    """The pivot's ``tool_choice`` (None: not given, or not the pivot's)."""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise bad_value(
                "tool_choice",
                f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.",
            )
        return choice
    if not isinstance(choice, dict):
        raise type_error("tool_choice", "string", choice)
    kind = choice.get("type")
    if kind is None:
        raise missing("tool_choice.type")
    if kind != "function":
        # a hosted or client-run tool, or allowed_tools: forcing it is the point
        skipped.append(f"tool_choice: the '{kind}' tool choice")
        return None
    name = choice.get("name")
    if name not in names:
        raise bad_value(
            "tool_choice", f"Invalid 'tool_choice': function '{name}' not found in 'tools'."
        )
    return {"type": "function", "function": {"name": name}}


def reasoning_effort(body: dict[str, Any]) -> str | None:
    reasoning = object_field(body, "reasoning")
    if reasoning is None:
        return None
    for key in reasoning:
        if key not in ("effort", "summary", "generate_summary"):
            raise invalid(
                f"Unknown parameter: 'reasoning.{key}'.",
                param=f"reasoning.{key}",
                code="unknown_parameter",
            )
    for key in ("summary", "generate_summary"):
        value = reasoning.get(key)
        if value is not None and value not in SUMMARIES:
            raise bad_value(
                f"reasoning.{key}",
                f"Invalid value: '{value}'. Supported values are: {listing(SUMMARIES)}.",
            )
    effort = reasoning.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise bad_value(
            "reasoning.effort",
            f"Invalid value: '{effort}'. Supported values are: {listing(EFFORTS)}.",
        )
    return effort


def response_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """The pivot's ``response_format`` of ``text.format`` (None: plain text)."""
    text = object_field(body, "text")
    if text is None:
        return None
    string_field(text, "verbosity")
    fmt = object_field(text, "format")
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise bad_value(
            "text.format.type",
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and "
            "'json_schema'.",
        )
    name = fmt.get("name")
    if not isinstance(name, str):
        raise missing("text.format.name")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise missing("text.format.schema")
    out: dict[str, Any] = {"name": name, "schema": schema}
    strict = bool_field(fmt, "strict")
    if strict is not None:
        out["strict"] = strict
    return {"type": "json_schema", "json_schema": out}
