"""Responses ``input`` items → the chat pivot's ``messages``.

The items a client sends (and the gateway stores for ``previous_response_id``):

* ``message`` (the ``type`` may be left out): ``user``, ``system``,
  ``developer`` or ``assistant``, its ``content`` a string or parts —
  ``input_text``, ``input_image`` (a URL or data URL; a ``file_id`` needs
  OpenAI's Files API and is refused), ``output_text`` and ``refusal`` in
  assistant turns. ``developer`` becomes the pivot's ``system`` (the role
  open models' chat templates know).
* ``function_call`` (``call_id``, ``name``, ``arguments``): a tool call of the
  assistant turn before it (consecutive calls are one turn, as in chat).
* ``function_call_output`` (``call_id``, ``output``: text or ``input_text``
  parts): a ``tool`` message.
* ``reasoning``: an earlier answer's reasoning (Codex sends them back, with
  ``encrypted_content``); dropped from the pivot, as the Anthropic adapter
  drops earlier thinking blocks.

Items of tools the client runs (``custom_tool_call``, ``local_shell_call``,
... and their outputs), of hosted tools (``web_search_call``) and any type
this module does not know (the API grows) are not the pivot's: they are
recorded as untranslatable, and only a channel of the OpenAI API takes the
call (as sent). ``item_reference`` is a 400 naming the item: it names an item
stored at the vendor, under the channel's account, not the caller's. Pure:
no I/O.
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.base import invalid
from gateway_bridge.protocols.openai.fields import bad_value, listing, missing, type_error

# Items stored at the vendor under the channel's account: refused whatever the channel.
VENDOR_STORED_ITEMS = frozenset({"item_reference"})
ROLES = ("user", "assistant", "system", "developer")
_PIVOT_ROLES = {"developer": "system"}
_ASSISTANT_PARTS = ("output_text", "refusal")
_USER_PARTS = ("input_text", "input_image")
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


def _string(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if value is None:
        raise missing(f"{param}.{key}")
    if not isinstance(value, str):
        raise type_error(f"{param}.{key}", "string", value)
    return value


def _image(part: dict[str, Any], param: str) -> dict[str, Any]:
    url = part.get("image_url")
    if url is None:
        if part.get("file_id") is not None:
            raise invalid(
                f"'{param}.file_id': files are not supported by this gateway; send the image "
                "as 'image_url' (a URL or a data URL).",
                param=f"{param}.file_id",
                code="unsupported_parameter",
            )
        raise missing(f"{param}.image_url")
    if not isinstance(url, str):
        raise type_error(f"{param}.image_url", "string", url)
    image: dict[str, Any] = {"url": url}
    detail = part.get("detail")
    if detail is not None:
        if detail not in ("low", "high", "auto"):
            raise bad_value(
                f"{param}.detail",
                f"Invalid value: '{detail}'. Supported values are: 'low', 'high', and 'auto'.",
            )
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def _content(content: object, param: str, role: str) -> str | list[dict[str, Any]]:
    """A message's content in the pivot's shape: text, or parts with images."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise type_error(param, "array", content)
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        if not isinstance(part, dict):
            raise type_error(where, "object", part)
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": _string(part, _TEXT_PARTS[kind], where)})
        elif kind == "input_image" and role != "assistant":
            parts.append(_image(part, where))
        elif kind is None:
            raise missing(f"{where}.type")
        else:
            allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
            raise bad_value(
                f"{where}.type",
                f"Invalid value: '{kind}'. Supported values are: {listing(allowed)}.",
            )
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _output_text(output: object, param: str) -> str:
    if isinstance(output, str):
        return output
    content = _content(output, param, "user")
    if not isinstance(content, str):
        raise bad_value(param, f"Invalid '{param}': a function call's output must be text.")
    return content


def to_messages(
    items: list[Any], param: str = "input", skipped: list[Any] | None = None
) -> list[dict[str, Any]]:
    """The pivot messages of checked-or-not ``items`` (400 on a bad one); the
    items the pivot cannot carry are named in ``skipped``."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise type_error(where, "object", item)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                if role is None:
                    raise missing(f"{where}.role")
                raise bad_value(
                    f"{where}.role",
                    f"Invalid value: '{role}'. Supported values are: {listing(ROLES)}.",
                )
            if "content" not in item:
                raise missing(f"{where}.content")
            content = _content(item["content"], f"{where}.content", role)
            messages.append({"role": _PIVOT_ROLES.get(role, role), "content": content})
        elif kind == "function_call":
            call = {
                "id": _string(item, "call_id", where),
                "type": "function",
                "function": {
                    "name": _string(item, "name", where),
                    "arguments": _string(item, "arguments", where),
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            if "output" not in item:
                raise missing(f"{where}.output")
            output = _output_text(item["output"], f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind == "reasoning":
            continue
        elif kind is None:
            raise missing(f"{where}.type")
        elif not isinstance(kind, str):
            raise type_error(f"{where}.type", "string", kind)
        elif kind in VENDOR_STORED_ITEMS:
            raise bad_value(
                f"{where}.type",
                f"Invalid value: '{kind}'. Items stored at the vendor cannot be referenced "
                "through this gateway; send the item itself or use previous_response_id.",
            )
        elif skipped is not None:
            skipped.append(f"{where}: the '{kind}' item")
    return messages


def input_items(value: object) -> list[dict[str, Any]]:
    """The request's ``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise type_error("input", "array", value)
    return value
