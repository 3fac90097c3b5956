"""Anthropic messages → the OpenAI messages of the pivot.

* A user turn becomes its tool messages (one per ``tool_result``, in order),
  then one user message with its text, images and documents in order
  (``protocols.anthropic.media``); text alone stays a string (one block) or a
  list of text parts, as before media were taken.
* A ``tool_result`` with ``is_error`` reaches the node as a tool message whose
  content starts with ``"Error: "`` (OpenAI has no error flag). An OpenAI tool
  message is text, so the images and documents inside a tool result (Claude
  Code's Read of a picture or a PDF) move to the user message after the tool
  messages, led by the text part ``"Attachments of the result of tool call
  <id>:"``, before the turn's own blocks; a ``search_result`` in it is
  untranslatable.
* ``thinking`` / ``redacted_thinking`` blocks of assistant turns are dropped
  from the pivot (their signatures mean nothing to another vendor; Anthropic
  itself drops them from non-tool turns); a native channel gets them as sent.
* Server-tool, MCP, ``search_result`` and ``container_upload`` blocks are left
  out of the pivot and recorded as untranslatable ("<path>: <kind> content
  blocks").
* A final assistant message is a prefill (``continue_final_message``).
* A ``system`` message (the API takes one anywhere in ``messages`` now; it
  applies from there on, and Claude Code 2.1 sends its environment that way)
  becomes a system message of the pivot at the same place; its content is a
  string or text blocks, as the top-level ``system`` is.
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.anthropic.media import document_parts, image_part
from gateway_bridge.protocols.anthropic.request import (
    MEDIA_BLOCKS,
    THINKING_BLOCKS,
    UNTRANSLATABLE_BLOCKS,
    array,
    bad,
    block_type,
    boolean,
    dictionary,
    is_empty,
    missing_results,
    string,
    system_text,
    text_block,
    unknown_block,
    untranslatable_block,
)
from gateway_bridge.protocols.base import dumps
from gateway_bridge.protocols.checks import ID_CHARS


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text alone is a string, as before media were taken."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _tool_result(
    block: dict[str, Any], path: str, attached: list[dict[str, Any]], skipped: list[str]
) -> str:
    """A ``tool_result``'s content as the tool message's text; its images and
    documents go to ``attached``, led by a text part naming the call."""
    content = block.get("content")
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    elif content is not None:
        for i, part in enumerate(array(content, f"{path}.content")):
            ppath = f"{path}.content.{i}"
            part, kind = block_type(part, ppath)
            if kind == "text":
                texts.append(text_block(part, ppath))
            elif kind == "image":
                image = image_part(part, ppath, skipped)
                if image is not None:
                    media.append(image)
            elif kind == "document":
                media.extend(document_parts(part, ppath, skipped))
            elif kind == "search_result":
                skipped.append(untranslatable_block(ppath, kind))
            else:
                raise bad(f"{ppath}.type", "Input should be 'text', 'image' or 'document'")
    if media:
        lead = f"Attachments of the result of tool call {block['tool_use_id']}:"
        attached.append({"type": "text", "text": lead})
        attached.extend(media)
    text = "\n".join(texts)
    if block.get("is_error") is not None and boolean(block["is_error"], f"{path}.is_error"):
        text = f"Error: {text}" if text else "Error"
    return text


def _user(
    index: int, content: object, expected_ids: list[str], skipped: list[str]
) -> list[dict[str, Any]]:
    """One Anthropic user turn → tool messages (in order), then the user's text
    and media; what the pivot cannot carry goes to ``skipped``."""
    path = f"messages.{index}"
    if isinstance(content, str):
        if expected_ids:
            raise missing_results(index - 1, expected_ids)
        return [{"role": "user", "content": content}] if content else []
    blocks = array(content, f"{path}.content")
    tools: list[dict[str, Any]] = []
    attached: list[dict[str, Any]] = []  # the media of the tool results
    parts: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        bpath = f"{path}.content.{i}"
        block, kind = block_type(block, bpath)
        if kind == "text":
            parts.append({"type": "text", "text": text_block(block, bpath)})
        elif kind == "image":
            part = image_part(block, bpath, skipped)
            if part is not None:
                parts.append(part)
        elif kind == "document":
            parts.extend(document_parts(block, bpath, skipped))
        elif kind in UNTRANSLATABLE_BLOCKS:
            skipped.append(untranslatable_block(bpath, kind))
        elif kind == "tool_result":
            if "tool_use_id" not in block:
                raise bad(f"{bpath}.tool_use_id", "Field required")
            call_id = string(block["tool_use_id"], f"{bpath}.tool_use_id")
            if call_id not in expected_ids:
                raise bad(
                    bpath,
                    f"unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. Each "
                    "`tool_result` block must have a corresponding `tool_use` block in the "
                    "previous message.",
                )
            text = _tool_result(block, bpath, attached, skipped)
            tools.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "tool_use":
            raise bad(f"{bpath}.type", "tool_use blocks are only allowed in assistant messages")
        elif kind in THINKING_BLOCKS:
            raise bad(f"{bpath}.type", f"{kind} blocks are only allowed in assistant messages")
        else:
            raise unknown_block(bpath, kind)
    answered = {m["tool_call_id"] for m in tools}
    missing = [i for i in expected_ids if i not in answered]
    if missing:
        raise missing_results(index - 1, missing)
    parts = attached + parts
    if parts:
        tools.append({"role": "user", "content": _user_content(parts)})
    return tools


def _assistant(
    index: int, content: object, skipped: list[str]
) -> tuple[dict[str, Any] | None, list[str]]:
    """One Anthropic assistant turn → an assistant message (or None when
    empty) and the ids of its tool_use blocks; what the pivot cannot carry
    goes to ``skipped``."""
    path = f"messages.{index}"
    if isinstance(content, str):
        return ({"role": "assistant", "content": content} if content else None), []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(array(content, f"{path}.content")):
        bpath = f"{path}.content.{i}"
        block, kind = block_type(block, bpath)
        if kind == "text":
            texts.append(text_block(block, bpath))
        elif kind == "tool_use":
            for key in ("id", "name", "input"):
                if key not in block:
                    raise bad(f"{bpath}.{key}", "Field required")
            call_id = string(block["id"], f"{bpath}.id")
            if not call_id or ID_CHARS.search(call_id):
                raise bad(f"{bpath}.id", "String should match pattern '^[a-zA-Z0-9_-]+$'")
            name = string(block["name"], f"{bpath}.name")
            arguments = dumps(dictionary(block["input"], f"{bpath}.input")).decode()
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        elif kind in THINKING_BLOCKS:
            continue
        elif kind in UNTRANSLATABLE_BLOCKS:
            skipped.append(untranslatable_block(bpath, kind))
        elif kind == "tool_result" or kind in MEDIA_BLOCKS:
            raise bad(f"{bpath}.type", f"{kind} blocks are only allowed in user messages")
        else:
            raise unknown_block(bpath, kind)
    if not texts and not calls:
        return None, []
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message, [c["id"] for c in calls]


def messages(value: object, skipped: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """Anthropic messages → OpenAI messages, and whether the last one is a
    prefill; what the pivot cannot carry goes to ``skipped``."""
    if value is None:
        raise bad("messages", "Field required")
    given = array(value, "messages")
    if not given:
        raise bad("messages", "at least one message is required")
    out: list[dict[str, Any]] = []
    expected: list[str] = []  # tool_use ids the next user turn must answer
    last = len(given) - 1
    prefill = False
    for index, message in enumerate(given):
        path = f"messages.{index}"
        message = dictionary(message, path)
        for key in message:
            if key not in ("role", "content"):
                raise bad(f"{path}.{key}", "Extra inputs are not permitted")
        for key in ("role", "content"):
            if key not in message:
                raise bad(f"{path}.{key}", "Field required")
        role, content = message["role"], message["content"]
        if role == "system":
            if expected:
                raise missing_results(index - 1, expected)
            text = system_text(content, f"{path}.content")
            if not text:
                raise bad(f"{path}.content", "system messages must have non-empty content")
            out.append({"role": "system", "content": text})
            continue
        if role not in ("user", "assistant"):
            raise bad(f"{path}.role", "Input should be 'user', 'assistant' or 'system'")
        if not isinstance(content, str | list):
            raise bad(f"{path}.content", "Input should be a valid list")
        if is_empty(content) and not (role == "assistant" and index == last):
            raise bad(
                path,
                "all messages must have non-empty content except for the optional final "
                "assistant message",
            )
        if role == "user":
            out.extend(_user(index, content, expected, skipped))
            expected = []
            continue
        if expected:
            raise missing_results(index - 1, expected)
        converted, expected = _assistant(index, content, skipped)
        if converted is None:
            continue
        if index == last and not expected:
            text = converted["content"] or ""
            if text != text.rstrip():
                raise bad(path, "final assistant content cannot end with trailing whitespace")
            prefill = True
        out.append(converted)
    if expected:
        raise missing_results(last, expected)
    return out, prefill
