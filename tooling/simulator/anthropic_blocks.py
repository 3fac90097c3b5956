"""Anthropic Messages content: blocks and turns checked the way Anthropic checks
them (``"<path>: <problem>"``), rendered as the OpenAI messages the gateway
translates them to, and chained into the prefix positions of prompt caching.

Blocks accepted: ``text``, ``image`` (``base64``, ``url`` and ``file``
sources), ``document`` (base64 PDF, ``text``, ``content``, ``url``, ``file``),
``tool_use``, ``tool_result`` (text, images, documents inside), and
``thinking`` / ``redacted_thinking`` in assistant turns (dropped from the
prompt, as Anthropic drops them from earlier turns). Roles are ``user``,
``assistant`` or ``system`` (a system message anywhere in the conversation,
as the API now takes one: text, applying from there on); consecutive turns of
one role are accepted, as the API now merges them; every ``tool_use`` must
be answered by a ``tool_result`` in the next user turn.

Rendering (what the tokens are counted from): the system prompt first, tool
results as tool messages, assistant text joined with its ``tool_use`` blocks as
``tool_calls``, images as ``image_url`` parts and PDFs as ``file`` parts (both
cost ``console.kernel.tokens.media_tokens`` of their decoded size; by URL or file id,
the base cost), text documents as text.

Every block is a position of ``prompt_cache.Prefixes`` (tools, then system
blocks, then message blocks, each turn's role chained in); its
``cache_control`` makes it a breakpoint (``type: "ephemeral"``, ``ttl`` "5m"
or "1h", 1h ones first, at most four).
"""

from __future__ import annotations

import json
from typing import Any

from . import prompt_cache, protocol
from .protocol import ApiError

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
BLOCKS = "'text', 'image', 'document', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking'"
MAX_BREAKPOINTS = 4


def bad(path: str, problem: str) -> ApiError:
    return ApiError(400, f"{path}: {problem}" if path else problem, param=path or None)


def dictionary(value: object, path: str) -> dict:
    if not isinstance(value, dict):
        raise bad(path, "Input should be a valid dictionary")
    return value


def array(value: object, path: str) -> list:
    if not isinstance(value, list):
        raise bad(path, "Input should be a valid list")
    return value


def string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise bad(path, "Input should be a valid string")
    return value


class Reader:
    """One pass over the request: checks, the OpenAI rendering, the prefix positions."""

    def __init__(self) -> None:
        self.prefixes = prompt_cache.Prefixes()
        self.ttls: list[str] = []

    def mark(self, block: dict, path: str) -> None:
        """Chain a block into the prefix; note its breakpoint, if it has one."""
        control = block.get("cache_control")
        stripped = {k: v for k, v in block.items() if k != "cache_control"}
        position = self.prefixes.add(json.dumps(stripped, sort_keys=True), _where(path))
        if control is not None:
            self.breakpoint(position, control, f"{path}.cache_control")

    def breakpoint(self, position: int, control: object, path: str) -> None:
        control = dictionary(control, path)
        if control.get("type") != "ephemeral":
            raise bad(f"{path}.type", "Input should be 'ephemeral'")
        ttl = control.get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            raise bad(f"{path}.ttl", "Input should be '5m' or '1h'")
        if ttl == "1h" and "5m" in self.ttls:
            raise bad(
                path,
                "a cache_control block with ttl='1h' must not come after one with ttl='5m'",
            )
        self.ttls.append(ttl)
        self.prefixes.breakpoints.append((position, ttl))
        if len(self.prefixes.breakpoints) > MAX_BREAKPOINTS:
            raise bad(
                "",
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(self.prefixes.breakpoints)}.",
            )

    # -- blocks ---------------------------------------------------------------------------

    def text(self, block: dict, path: str) -> str:
        text = string(block.get("text"), f"{path}.text")
        if not text:
            raise bad(f"{path}.text", "text content blocks must be non-empty")
        return text

    def media(self, block: dict, kind: str, path: str) -> dict:
        """An image or document block → the OpenAI part that counts it (a text part
        for text documents)."""
        source = dictionary(block.get("source"), f"{path}.source")
        spath = f"{path}.source"
        stype = source.get("type")
        if stype == "base64":
            media_type = string(source.get("media_type"), f"{spath}.media_type")
            allowed = IMAGE_TYPES if kind == "image" else ("application/pdf",)
            if media_type not in allowed:
                names = " or ".join(f"'{t}'" for t in allowed)
                raise bad(f"{spath}.media_type", f"Input should be {names}")
            data = string(source.get("data"), f"{spath}.data")
            url = f"data:{media_type};base64,{data}"
        elif stype == "url":
            url = string(source.get("url"), f"{spath}.url")
        elif stype == "file":
            string(source.get("file_id"), f"{spath}.file_id")
            url = ""
        elif kind == "document" and stype == "text":
            return {"type": "text", "text": string(source.get("data"), f"{spath}.data")}
        elif kind == "document" and stype == "content":
            inner = source.get("content")
            if isinstance(inner, str):
                return {"type": "text", "text": inner}
            texts = [
                self.text(dictionary(b, f"{spath}.content.{i}"), f"{spath}.content.{i}")
                for i, b in enumerate(array(inner, f"{spath}.content"))
                if isinstance(b, dict) and b.get("type") == "text"
            ]
            return {"type": "text", "text": "\n".join(texts)}
        else:
            kinds = "'base64', 'url', 'file'" + (
                ", 'text', 'content'" if kind == "document" else ""
            )
            raise bad(f"{spath}.type", f"Input tag {stype!r} does not match any of {kinds}")
        if kind == "image":
            return {"type": "image_url", "image_url": {"url": url}}
        return {"type": "file", "file": {"file_data": url}}

    def block(self, block: object, path: str) -> tuple[dict, str]:
        block = dictionary(block, path)
        kind = block.get("type")
        if kind is None:
            raise bad(f"{path}.type", "Field required")
        if not isinstance(kind, str) or kind not in BLOCKS.replace("'", "").split(", "):
            raise bad(
                f"{path}.type",
                f"Input tag {kind!r} found using 'type' does not match any of the expected "
                f"tags: {BLOCKS}",
            )
        self.mark(block, path)
        return block, kind

    def tool_result(self, block: dict, path: str) -> tuple[str, list[dict]]:
        """(text, media parts) of a tool_result's content."""
        content = block.get("content")
        texts: list[str] = []
        media: list[dict] = []
        if isinstance(content, str):
            texts.append(content)
        elif content is not None:
            for i, inner in enumerate(array(content, f"{path}.content")):
                ipath = f"{path}.content.{i}"
                inner = dictionary(inner, ipath)
                kind = inner.get("type")
                if kind == "text":
                    texts.append(self.text(inner, ipath))
                elif kind in ("image", "document"):
                    part = self.media(inner, kind, ipath)
                    (texts.append(part["text"]) if part["type"] == "text" else media.append(part))
                else:
                    raise bad(f"{ipath}.type", "Input should be 'text', 'image' or 'document'")
        text = "\n".join(texts)
        if block.get("is_error") is True:
            text = f"Error: {text}" if text else "Error"
        return text, media

    # -- turns ----------------------------------------------------------------------------

    def user(self, index: int, content: object, expected: list[str], strict: bool) -> list[dict]:
        path = f"messages.{index}"
        if isinstance(content, str):
            self.mark({"type": "text", "text": content}, f"{path}.content")
            if expected and strict:
                raise _missing_results(index - 1, expected)
            return [{"role": "user", "content": content}] if content else []
        out: list[dict] = []
        parts: list[dict] = []
        for i, raw in enumerate(array(content, f"{path}.content")):
            bpath = f"{path}.content.{i}"
            block, kind = self.block(raw, bpath)
            if kind == "text":
                parts.append({"type": "text", "text": self.text(block, bpath)})
            elif kind in ("image", "document"):
                parts.append(self.media(block, kind, bpath))
            elif kind == "tool_result":
                call_id = string(block.get("tool_use_id"), f"{bpath}.tool_use_id")
                if strict and call_id not in expected:
                    raise bad(
                        bpath,
                        f"unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. "
                        "Each `tool_result` block must have a corresponding `tool_use` block "
                        "in the previous message.",
                    )
                text, media = self.tool_result(block, bpath)
                result = [{"type": "text", "text": text}, *media] if media else text
                out.append({"role": "tool", "tool_call_id": call_id, "content": result})
            else:
                raise bad(f"{bpath}.type", f"{kind} blocks are only allowed in assistant messages")
        answered = {m["tool_call_id"] for m in out}
        missing = [i for i in expected if i not in answered]
        if missing and strict:
            raise _missing_results(index - 1, missing)
        if parts:
            only_text = all(p["type"] == "text" for p in parts)
            if only_text and len(parts) == 1:
                out.append({"role": "user", "content": parts[0]["text"]})
            else:
                out.append({"role": "user", "content": parts})
        return out

    def assistant(self, index: int, content: object) -> tuple[dict | None, list[str]]:
        path = f"messages.{index}"
        if isinstance(content, str):
            self.mark({"type": "text", "text": content}, f"{path}.content")
            return ({"role": "assistant", "content": content} if content else None), []
        texts: list[str] = []
        calls: list[dict] = []
        for i, raw in enumerate(array(content, f"{path}.content")):
            bpath = f"{path}.content.{i}"
            block, kind = self.block(raw, bpath)
            if kind == "text":
                texts.append(self.text(block, bpath))
            elif kind == "tool_use":
                call_id = string(block.get("id"), f"{bpath}.id")
                name = string(block.get("name"), f"{bpath}.name")
                arguments = json.dumps(dictionary(block.get("input"), f"{bpath}.input"))
                function = {"name": name, "arguments": arguments}
                calls.append({"id": call_id, "type": "function", "function": function})
            elif kind == "thinking":
                string(block.get("thinking"), f"{bpath}.thinking")
                string(block.get("signature"), f"{bpath}.signature")
            elif kind == "redacted_thinking":
                string(block.get("data"), f"{bpath}.data")
            else:
                raise bad(f"{bpath}.type", f"{kind} blocks are only allowed in user messages")
        if not texts and not calls:
            return None, []
        message: dict = {"role": "assistant", "content": "".join(texts) if texts else None}
        if calls:
            message["tool_calls"] = calls
        return message, [c["id"] for c in calls]

    def messages(self, value: object, strict: bool) -> list[dict]:
        messages = array(value, "messages")
        if not messages and strict:
            raise bad("messages", "at least one message is required")
        out: list[dict] = []
        expected: list[str] = []
        last = len(messages) - 1
        for index, message in enumerate(messages):
            path = f"messages.{index}"
            message = dictionary(message, path)
            for key in ("role", "content"):
                if key not in message:
                    raise bad(f"{path}.{key}", "Field required")
            role, content = message["role"], message["content"]
            if role == "system":
                if expected and strict:
                    raise _missing_results(index - 1, expected)
                self.prefixes.mix("<system>")
                out.append({"role": "system", "content": self.system(content, f"{path}.content")})
                continue
            if role not in ("user", "assistant"):
                raise bad(f"{path}.role", "Input should be 'user', 'assistant' or 'system'")
            if not isinstance(content, str | list):
                raise bad(f"{path}.content", "Input should be a valid list")
            if content in ("", []) and strict and not (role == "assistant" and index == last):
                raise bad(
                    path,
                    "all messages must have non-empty content except for the optional final "
                    "assistant message",
                )
            self.prefixes.mix(f"<{role}>")
            if role == "user":
                out.extend(self.user(index, content, expected, strict))
                expected = []
                continue
            if expected and strict:
                raise _missing_results(index - 1, expected)
            converted, expected = self.assistant(index, content)
            if converted is not None:
                out.append(converted)
        if expected and strict:
            raise _missing_results(last, expected)
        return out

    def system(self, value: object, path: str = "system") -> str:
        if isinstance(value, str):
            if value:
                self.mark({"type": "text", "text": value}, path)
            return value
        texts = []
        for i, raw in enumerate(array(value, path)):
            block, kind = self.block(raw, f"{path}.{i}")
            if kind != "text":
                raise bad(f"{path}.{i}.type", "Input should be 'text'")
            texts.append(self.text(block, f"{path}.{i}"))
        return "\n".join(texts)

    def tools(self, value: object) -> list[dict]:
        tools = []
        for i, tool in enumerate(array(value, "tools")):
            path = f"tools.{i}"
            tool = dictionary(tool, path)
            self.mark(tool, path)
            if tool.get("type") not in (None, "custom"):
                continue  # a server tool: accepted, never called by the simulator
            name = string(tool.get("name"), f"{path}.name")
            if not protocol._FUNCTION_NAME.fullmatch(name):
                raise bad(f"{path}.name", "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'")
            schema = dictionary(tool.get("input_schema"), f"{path}.input_schema")
            # in the gateway's key order: the same template text
            function: dict[str, Any] = {"name": name}
            if isinstance(tool.get("description"), str):
                function["description"] = tool["description"]
            function["parameters"] = schema
            tools.append({"type": "function", "function": function})
        return tools


def _where(path: str) -> tuple[str, int, int]:
    """A block's path (``tools.3``, ``system.1``, ``messages.4.content.2``) as
    (segment, index, block index)."""
    parts = path.split(".")
    index = int(parts[1]) if len(parts) > 1 else 0
    block = int(parts[3]) if len(parts) > 3 else 0
    return parts[0], index, block


def _missing_results(index: int, ids: list[str]) -> ApiError:
    return bad(
        f"messages.{index}",
        f"`tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message.",
    )


def convert(body: dict, strict: bool) -> tuple[list[dict], list[dict], Reader]:
    """(OpenAI messages, OpenAI tools, the reader with the prefix positions)."""
    reader = Reader()
    tools = reader.tools(body["tools"]) if body.get("tools") is not None else []
    reader.prefixes.mix("<system>")
    system = reader.system(body["system"]) if body.get("system") is not None else ""
    messages = reader.messages(body.get("messages", []), strict)
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return messages, tools, reader
