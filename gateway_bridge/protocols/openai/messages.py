"""Validation of a chat completion's ``messages`` and ``tools`` (with
``tool_choice`` and ``parallel_tool_calls``), the way OpenAI validates them:
its error messages, ``param`` and ``code`` (``request`` checks the rest of
the body)."""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.base import GatewayError, invalid
from gateway_bridge.protocols.openai.fields import (
    bad_value,
    bool_field,
    listing,
    missing,
    string_field,
    type_error,
)

ROLES = ("system", "assistant", "user", "function", "tool", "developer")
# Media parts of a user message, and the field each must carry: they pass to the
# channel (OpenAI's own shape; translated for an Anthropic or Gemini channel); a
# text-only model refuses them at admission (catalogue modality).
MEDIA_PARTS = {"image_url": "url", "input_audio": "data", "file": None}


def _content_text(
    param: str, content: object, *, parts: tuple[str, ...], media: bool = False
) -> str:
    """The text of a message's content (a string or a list of parts of the given types)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise type_error(param, "string", content)
    texts = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        if not isinstance(part, dict):
            raise type_error(where, "object", part)
        kind = part.get("type")
        if media and kind in MEDIA_PARTS:
            _media_part(where, kind, part)
            continue
        if kind not in parts:
            raise bad_value(
                f"{where}.type",
                f"Invalid value: '{kind}'. Supported values are: {listing(parts)}.",
            )
        key = "refusal" if kind == "refusal" else "text"
        text = part.get(key)
        if not isinstance(text, str):
            raise type_error(f"{where}.{key}", "string", text)
        if kind == "text":
            texts.append(text)
    return "\n".join(texts)


def _media_part(where: str, kind: str, part: dict[str, Any]) -> None:
    """An ``image_url``, ``input_audio`` or ``file`` part, checked as OpenAI does."""
    inner = part.get(kind)
    if not isinstance(inner, dict):
        raise type_error(f"{where}.{kind}", "object", inner)
    field = MEDIA_PARTS[kind]
    if field is not None:
        value = inner.get(field)
        if not isinstance(value, str) or not value:
            raise invalid(
                f"Missing required parameter: '{where}.{kind}.{field}'.",
                param=f"{where}.{kind}.{field}",
                code="missing_required_parameter",
            )
    elif not isinstance(inner.get("file_data"), str) and not isinstance(inner.get("file_id"), str):
        raise invalid(
            f"Missing required parameter: '{where}.file.file_data' or '{where}.file.file_id'.",
            param=f"{where}.file",
            code="missing_required_parameter",
        )


def _tool_calls(param: str, calls: object) -> list[str]:
    """Checks an assistant message's ``tool_calls``; returns their ids."""
    if not isinstance(calls, list):
        raise type_error(param, "array", calls)
    ids = []
    for i, call in enumerate(calls):
        where = f"{param}[{i}]"
        if not isinstance(call, dict):
            raise type_error(where, "object", call)
        for key in ("id", "type"):
            if key not in call:
                raise missing(f"{where}.{key}")
            if not isinstance(call[key], str):
                raise type_error(f"{where}.{key}", "string", call[key])
        if call["type"] != "function":
            raise bad_value(
                f"{where}.type",
                f"Invalid value: '{call['type']}'. Supported values are: 'function'.",
            )
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise missing(f"{where}.function")
        for key in ("name", "arguments"):
            if not isinstance(fn.get(key), str):
                raise missing(f"{where}.function.{key}")
        ids.append(call["id"])
    return ids


def _empty_array(name: str) -> GatewayError:
    return invalid(
        f"Invalid '{name}': empty array. Expected an array with minimum length 1, "
        "but got an empty array instead.",
        param=name,
        code="empty_array",
    )


class _ToolTurns:
    """The conversation's tool calls so far, as the messages are checked in
    order: the ids of the last assistant message's calls (None after any
    other message than a tool's), and those no tool message answered yet."""

    def __init__(self) -> None:
        self.open_calls: list[str] | None = None
        self.pending: set[str] = set()

    def assistant(self, param: str, calls: object) -> None:
        self.open_calls = None if calls is None else _tool_calls(f"{param}.tool_calls", calls)
        self.pending = set(self.open_calls or ())

    def tool_reply(self, param: str, message: dict[str, Any]) -> None:
        """A tool message: it answers one of the last assistant message's calls."""
        call_id = message.get("tool_call_id")
        if call_id is None:
            raise missing(f"{param}.tool_call_id")
        if not isinstance(call_id, str):
            raise type_error(f"{param}.tool_call_id", "string", call_id)
        if self.open_calls is None:
            raise bad_value(
                f"{param}.role",
                "Invalid parameter: messages with role 'tool' must be a response to a "
                "preceding message with 'tool_calls'.",
            )
        if call_id not in self.open_calls:
            raise bad_value(
                f"{param}.tool_call_id",
                f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                "'tool_calls' of previous message.",
            )
        self.pending.discard(call_id)

    def check_answered(self) -> None:
        """Before a message other than a tool's: every call was answered."""
        if self.pending:
            raise bad_value(
                "messages",
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(self.pending))}",
            )


def _role(param: str, message: object) -> str:
    if not isinstance(message, dict):
        raise type_error(param, "object", message)
    role = message.get("role")
    if role is None:
        raise missing(f"{param}.role")
    if role not in ROLES:
        raise bad_value(
            f"{param}.role",
            f"Invalid value: '{role}'. Supported values are: {listing(ROLES)}.",
        )
    return str(role)


def _message(param: str, message: dict[str, Any], role: str, turns: _ToolTurns) -> None:
    """One message (its role checked), in the conversation's order."""
    if role != "tool":
        turns.check_answered()
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise type_error(f"{param}.name", "string", name)
    content = message.get("content")
    where = f"{param}.content"
    if role == "assistant":
        calls = message.get("tool_calls")
        turns.assistant(param, calls)
        if content is None:
            if not calls and message.get("function_call") is None:
                raise missing(where)
        else:
            _content_text(where, content, parts=("text", "refusal"))
        return
    if role == "tool":
        turns.tool_reply(param, message)
    else:
        turns.open_calls = None
    if role == "function":
        if not isinstance(name, str):
            raise missing(f"{param}.name")
        if content is not None and not isinstance(content, str):
            raise type_error(where, "string", content)
        return
    if content is None:
        raise missing(where)
    _content_text(where, content, parts=("text",), media=role == "user")


def check_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``messages``: each message by its role, and every tool call answered."""
    messages = body.get("messages")
    if messages is None:
        raise missing("messages")
    if not isinstance(messages, list):
        raise type_error("messages", "array", messages)
    if not messages:
        raise _empty_array("messages")
    turns = _ToolTurns()
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        role = _role(param, message)
        _message(param, message, role, turns)
    return messages


def _valid_name(name: str) -> bool:
    return 0 < len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def _function_tool(param: str, tool: object) -> str:
    """One of ``tools`` (a function); returns its name."""
    if not isinstance(tool, dict):
        raise type_error(param, "object", tool)
    if tool.get("type") != "function":
        if "type" not in tool:
            raise missing(f"{param}.type")
        raise bad_value(
            f"{param}.type",
            f"Invalid value: '{tool.get('type')}'. Supported values are: 'function'.",
        )
    fn = tool.get("function")
    if fn is None:
        raise missing(f"{param}.function")
    if not isinstance(fn, dict):
        raise type_error(f"{param}.function", "object", fn)
    name = fn.get("name")
    if name is None:
        raise missing(f"{param}.function.name")
    if not isinstance(name, str) or not _valid_name(name):
        raise bad_value(
            f"{param}.function.name",
            f"Invalid '{param}.function.name': string does not match pattern. Expected "
            "a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
        )
    string_field(fn, "description")
    if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
        raise type_error(f"{param}.function.parameters", "object", fn["parameters"])
    return name


def _tool_choice(choice: object, names: list[str]) -> None:
    """A ``tool_choice`` (``tools`` given): a mode, or one of the tools by name."""
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise bad_value(
                "tool_choice",
                f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.",
            )
    elif isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict):
            raise bad_value(
                "tool_choice",
                "Invalid 'tool_choice': expected {'type': 'function', 'function': {'name': ...}}.",
            )
        if fn.get("name") not in names:
            raise bad_value(
                "tool_choice",
                f"Invalid 'tool_choice': function '{fn.get('name')}' not found in 'tools'.",
            )
    else:
        raise type_error("tool_choice", "string", choice)


def check_tools(body: dict[str, Any]) -> list[str]:
    """Checks ``tools``, ``tool_choice`` and ``parallel_tool_calls``; returns the tool names."""
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise type_error("tools", "array", tools)
        if not tools:
            raise _empty_array("tools")
        names = [_function_tool(f"tools[{i}]", tool) for i, tool in enumerate(tools)]
    choice = body.get("tool_choice")
    if choice is not None:
        if tools is None:
            raise bad_value(
                "tool_choice",
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
            )
        _tool_choice(choice, names)
    if body.get("parallel_tool_calls") is not None:
        if tools is None:
            raise bad_value(
                "parallel_tool_calls",
                "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed "
                "when 'tools' are specified.",
            )
        bool_field(body, "parallel_tool_calls")
    return names
