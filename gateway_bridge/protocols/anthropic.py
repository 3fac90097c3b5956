"""The Anthropic Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``,
``GET /v1/models``) on top of the nodes' OpenAI chat protocol.

Requests are validated the way Anthropic validates them (a Pydantic-style
``"<path>: <problem>"`` message with ``param`` set to the dotted path) and
translated to an OpenAI chat body; answers, plain or streamed, are rendered
back event by event. Pure: no I/O, no Django, no clock.

Decisions, where Anthropic's API and a text-only OpenAI node do not meet:

* ``thinking`` is validated and then ignored: the nodes expose no thinking
  blocks, and an answer without them is still a valid answer (clients that
  always send ``thinking`` keep working). Earlier ``thinking`` /
  ``redacted_thinking`` blocks in assistant turns are dropped, as Anthropic
  drops them from non-tool turns.
* ``image``, ``document`` and the server-tool blocks and tools
  (``web_search_…``, ``bash_…``, MCP, ...) are refused with a 400 that says
  they are not supported; the nodes take text only.
* Top-level fields are strict, like Anthropic (``"xyz: Extra inputs are not
  permitted"``). Inside content blocks unknown keys (``cache_control``,
  ``citations``) are accepted and ignored: the nodes cache prefixes on their own.
* ``temperature`` and ``top_p`` (still sent by older clients; the 2.x SDK no
  longer has them) are forwarded; ``top_k``, ``metadata``, ``service_tier`` and
  the newer ``cache_control``, ``diagnostics``, ``inference_geo``, ``speed``,
  ``user_profile_id``, ``workspace_id`` and ``output_config.effort`` are
  validated and not forwarded. ``output_config.format`` (a JSON schema) becomes
  OpenAI's ``response_format`` (vLLM's guided decoding). ``container``,
  ``mcp_servers`` and ``context_management`` are refused as not supported.
* A ``tool_result`` with ``is_error`` reaches the node as a tool message whose
  content starts with ``"Error: "`` (OpenAI has no error flag).
* A final assistant message (a prefill) is forwarded with vLLM's
  ``continue_final_message``; the answer continues it, as Anthropic's does.
* ``stop_reason`` is ``stop_sequence`` when the node names the matched stop
  string (vLLM's ``choices[].stop_reason``) and it is one of the request's
  ``stop_sequences``; otherwise a plain stop is ``end_turn``.
* Streams: ``message_start`` is sent with the first upstream chunk (it carries
  the message id, derived from the node's) and its ``input_tokens`` is the
  gateway's estimate; the final ``message_delta`` carries the real cumulative
  usage (input, cache read/creation, output), which the SDK's accumulated
  message takes over.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from console import tokens as tokenizer
from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    INTERNAL,
    INVALID_REQUEST,
    NOT_FOUND,
    OVERLOADED,
    PAYMENT_REQUIRED,
    PERMISSION,
    RATE_LIMIT,
    REQUEST_TOO_LARGE,
    TIMEOUT,
    UNSUPPORTED_MEDIA,
    UPSTREAM,
    CallRequest,
    GatewayError,
    ModelInfo,
    ResponseAdapter,
    dumps,
    invalid,
    sse,
)
from gateway_bridge.usage_mapping import TokenUsage, to_anthropic

UPSTREAM_PATH = "/v1/chat/completions"
#: How much of the rendered prompt ``CallRequest.prefix_text`` keeps (characters).
PREFIX_CHARS = 4096  # as the openai adapter: the same prompt routes alike in both
OVERLOADED_STATUS = 529  # Anthropic's status for overloaded_error

_FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "metadata",
    "thinking",
    "service_tier",
    # newer API fields (the SDK of 2.x sends them); validated lightly, not forwarded
    "cache_control",
    "diagnostics",
    "inference_geo",
    "speed",
    "user_profile_id",
    "workspace_id",
    "output_config",  # ``format`` is forwarded as response_format, ``effort`` ignored
}
# Real Anthropic features the gateway cannot offer: a clearer 400 than "extra input".
_UNSUPPORTED_FIELDS = {
    "container",
    "mcp_servers",
    "context_management",
}
_UNSUPPORTED_BLOCKS = {
    "image",
    "document",
    "search_result",
    "container_upload",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
}
_THINKING_BLOCKS = {"thinking", "redacted_thinking"}
_THINKING_TYPES = ("enabled", "disabled", "adaptive", "between_tools")
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")

_ERROR_TYPES = {
    INVALID_REQUEST: "invalid_request_error",
    UNSUPPORTED_MEDIA: "invalid_request_error",
    AUTHENTICATION: "authentication_error",
    PAYMENT_REQUIRED: "billing_error",
    PERMISSION: "permission_error",
    NOT_FOUND: "not_found_error",
    REQUEST_TOO_LARGE: "request_too_large",
    RATE_LIMIT: "rate_limit_error",
    INTERNAL: "api_error",
    UPSTREAM: "api_error",
    OVERLOADED: "overloaded_error",
    TIMEOUT: "timeout_error",
}


# --------------------------------------------------------------------------- validation


def _bad(path: str, problem: str, code: str = "invalid_request") -> GatewayError:
    return invalid(f"{path}: {problem}", param=path, code=code)


def _unsupported(path: str, what: str) -> GatewayError:
    return _bad(path, f"{what} not supported by this gateway", code="unsupported")


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _bad(path, "Input should be a valid string")
    return value


def _dict(value: object, path: str) -> dict:
    if not isinstance(value, dict):
        raise _bad(path, "Input should be a valid dictionary")
    return value


def _list(value: object, path: str) -> list:
    if not isinstance(value, list):
        raise _bad(path, "Input should be a valid list")
    return value


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(path, "Input should be a valid boolean")
    return value


def _number(body: dict, name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_number(value):
        raise _bad(name, "Input should be a valid number")
    if value < low:
        raise _bad(name, f"Input should be greater than or equal to {low}")
    if value > high:
        raise _bad(name, f"Input should be less than or equal to {high}")
    return value


def _text_block(block: dict, path: str) -> str:
    if "text" not in block:
        raise _bad(f"{path}.text", "Field required")
    text = _string(block["text"], f"{path}.text")
    if not text:
        raise _bad(f"{path}.text", "text content blocks must be non-empty")
    return text


def _block_type(block: object, path: str) -> tuple[dict, str]:
    block = _dict(block, path)
    kind = block.get("type")
    if kind is None:
        raise _bad(f"{path}.type", "Field required")
    kind = _string(kind, f"{path}.type")
    if kind in _UNSUPPORTED_BLOCKS:
        raise _unsupported(path, f"{kind} content blocks are")
    return block, kind


def _system(value: object) -> str:
    if isinstance(value, str):
        return value
    parts = []
    for i, block in enumerate(_list(value, "system")):
        block, kind = _block_type(block, f"system.{i}")
        if kind != "text":
            raise _bad(f"system.{i}.type", "Input should be 'text'")
        parts.append(_text_block(block, f"system.{i}"))
    return "\n".join(parts)


def _tool_result_text(block: dict, path: str) -> str:
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for i, part in enumerate(_list(content, f"{path}.content")):
            part, kind = _block_type(part, f"{path}.content.{i}")
            if kind != "text":
                raise _bad(f"{path}.content.{i}.type", "Input should be 'text'")
            texts.append(_text_block(part, f"{path}.content.{i}"))
        text = "\n".join(texts)
    if block.get("is_error") is not None and _bool(block["is_error"], f"{path}.is_error"):
        text = f"Error: {text}" if text else "Error"
    return text


def _text_content(texts: list[str]) -> str | list[dict]:
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def _user(index: int, content: object, expected_ids: list[str]) -> list[dict]:
    """One Anthropic user turn → tool messages (in order), then the user's text."""
    path = f"messages.{index}"
    if isinstance(content, str):
        if expected_ids:
            raise _missing_results(index - 1, expected_ids)
        return [{"role": "user", "content": content}] if content else []
    blocks = _list(content, f"{path}.content")
    tools: list[dict] = []
    texts: list[str] = []
    for i, block in enumerate(blocks):
        bpath = f"{path}.content.{i}"
        block, kind = _block_type(block, bpath)
        if kind == "text":
            texts.append(_text_block(block, bpath))
        elif kind == "tool_result":
            if "tool_use_id" not in block:
                raise _bad(f"{bpath}.tool_use_id", "Field required")
            call_id = _string(block["tool_use_id"], f"{bpath}.tool_use_id")
            if call_id not in expected_ids:
                raise _bad(
                    bpath,
                    f"unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. Each "
                    "`tool_result` block must have a corresponding `tool_use` block in the "
                    "previous message.",
                )
            text = _tool_result_text(block, bpath)
            tools.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "tool_use":
            raise _bad(f"{bpath}.type", "tool_use blocks are only allowed in assistant messages")
        elif kind in _THINKING_BLOCKS:
            raise _bad(f"{bpath}.type", f"{kind} blocks are only allowed in assistant messages")
        else:
            raise _unknown_block(bpath, kind)
    answered = {m["tool_call_id"] for m in tools}
    missing = [i for i in expected_ids if i not in answered]
    if missing:
        raise _missing_results(index - 1, missing)
    if texts:
        tools.append({"role": "user", "content": _text_content(texts)})
    return tools


def _assistant(index: int, content: object) -> tuple[dict | None, list[str]]:
    """One Anthropic assistant turn → an assistant message (or None when
    empty) and the ids of its tool_use blocks."""
    path = f"messages.{index}"
    if isinstance(content, str):
        return ({"role": "assistant", "content": content} if content else None), []
    texts: list[str] = []
    calls: list[dict] = []
    for i, block in enumerate(_list(content, f"{path}.content")):
        bpath = f"{path}.content.{i}"
        block, kind = _block_type(block, bpath)
        if kind == "text":
            texts.append(_text_block(block, bpath))
        elif kind == "tool_use":
            for key in ("id", "name", "input"):
                if key not in block:
                    raise _bad(f"{bpath}.{key}", "Field required")
            call_id = _string(block["id"], f"{bpath}.id")
            if not call_id or _ID_CHARS.search(call_id):
                raise _bad(f"{bpath}.id", "String should match pattern '^[a-zA-Z0-9_-]+$'")
            name = _string(block["name"], f"{bpath}.name")
            arguments = dumps(_dict(block["input"], f"{bpath}.input")).decode()
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        elif kind in _THINKING_BLOCKS:
            continue
        elif kind == "tool_result":
            raise _bad(f"{bpath}.type", "tool_result blocks are only allowed in user messages")
        else:
            raise _unknown_block(bpath, kind)
    if not texts and not calls:
        return None, []
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message, [c["id"] for c in calls]


def _unknown_block(path: str, kind: str) -> GatewayError:
    return _bad(
        f"{path}.type",
        f"Input tag '{kind}' found using 'type' does not match any of the expected tags: "
        "'text', 'tool_use', 'tool_result'",
    )


def _missing_results(index: int, ids: list[str]) -> GatewayError:
    return _bad(
        f"messages.{index}",
        f"`tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message.",
    )


def _empty(content: object) -> bool:
    return content == "" or content == []


def _messages(value: object) -> tuple[list[dict], bool]:
    """Anthropic messages → OpenAI messages, and whether the last one is a prefill."""
    if value is None:
        raise _bad("messages", "Field required")
    messages = _list(value, "messages")
    if not messages:
        raise _bad("messages", "at least one message is required")
    out: list[dict] = []
    expected: list[str] = []  # tool_use ids the next user turn must answer
    last = len(messages) - 1
    prefill = False
    for index, message in enumerate(messages):
        path = f"messages.{index}"
        message = _dict(message, path)
        for key in message:
            if key not in ("role", "content"):
                raise _bad(f"{path}.{key}", "Extra inputs are not permitted")
        for key in ("role", "content"):
            if key not in message:
                raise _bad(f"{path}.{key}", "Field required")
        role, content = message["role"], message["content"]
        if role == "system":
            raise _bad(
                f"{path}.role",
                'Unexpected role "system". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.',
            )
        if role not in ("user", "assistant"):
            raise _bad(f"{path}.role", "Input should be 'user' or 'assistant'")
        if not isinstance(content, str | list):
            raise _bad(f"{path}.content", "Input should be a valid list")
        if _empty(content) and not (role == "assistant" and index == last):
            raise _bad(
                path,
                "all messages must have non-empty content except for the optional final "
                "assistant message",
            )
        if role == "user":
            out.extend(_user(index, content, expected))
            expected = []
            continue
        if expected:
            raise _missing_results(index - 1, expected)
        converted, expected = _assistant(index, content)
        if converted is None:
            continue
        if index == last and not expected:
            text = converted["content"] or ""
            if text != text.rstrip():
                raise _bad(path, "final assistant content cannot end with trailing whitespace")
            prefill = True
        out.append(converted)
    if expected:
        raise _missing_results(last, expected)
    return out, prefill


def _tools(value: object) -> tuple[list[dict], list[str]]:
    tools, names = [], []
    for i, tool in enumerate(_list(value, "tools")):
        path = f"tools.{i}"
        tool = _dict(tool, path)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _unsupported(path, f"server tool {kind!r} is")
        for key in ("name", "input_schema"):
            if key not in tool:
                raise _bad(f"{path}.{key}", "Field required")
        name = _string(tool["name"], f"{path}.name")
        if not _TOOL_NAME.match(name):
            raise _bad(f"{path}.name", "String should match pattern '^[a-zA-Z0-9_-]{1,128}$'")
        if name in names:
            raise _bad("tools", "Tool names must be unique.")
        schema = _dict(tool["input_schema"], f"{path}.input_schema")
        if schema.get("type") != "object":
            raise _bad(f"{path}.input_schema.type", "Input should be 'object'")
        function: dict[str, Any] = {"name": name}
        if tool.get("description") is not None:
            function["description"] = _string(tool["description"], f"{path}.description")
        function["parameters"] = schema
        if tool.get("strict") is not None:
            function["strict"] = _bool(tool["strict"], f"{path}.strict")
        tools.append({"type": "function", "function": function})
        names.append(name)
    return tools, names


def _tool_choice(value: object, names: list[str], body: dict) -> None:
    choice = _dict(value, "tool_choice")
    kind = choice.get("type")
    if kind is None:
        raise _bad("tool_choice.type", "Field required")
    if kind not in ("auto", "any", "tool", "none"):
        raise _bad("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
    if not names:
        if kind in ("any", "tool"):
            raise _bad("tool_choice", "tool_choice may only be specified while providing tools")
        return
    if kind == "tool":
        if "name" not in choice:
            raise _bad("tool_choice.name", "Field required")
        name = _string(choice["name"], "tool_choice.name")
        if name not in names:
            raise _bad("tool_choice.name", f"Tool '{name}' not found in tools")
        body["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and _bool(disable, "tool_choice.disable_parallel_tool_use"):
        body["parallel_tool_calls"] = False


def _thinking(value: object, max_tokens: int | None) -> None:
    thinking = _dict(value, "thinking")
    kind = thinking.get("type")
    if kind not in _THINKING_TYPES:
        raise _bad(
            "thinking.type", "Input should be 'enabled', 'disabled', 'adaptive' or 'between_tools'"
        )
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if budget is None:
            raise _bad("thinking.budget_tokens", "Field required")
        if not _is_int(budget):
            raise _bad("thinking.budget_tokens", "Input should be a valid integer")
        if budget < 1024:
            raise _bad("thinking.budget_tokens", "Input should be greater than or equal to 1024")
        if max_tokens is not None and budget >= max_tokens:
            raise _bad("max_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`")


def _ignored_fields(body: dict) -> None:
    """Fields Anthropic accepts that do not change what a node generates."""
    if body.get("cache_control") is not None:
        cache = _dict(body["cache_control"], "cache_control")
        if cache.get("type") != "ephemeral":
            raise _bad("cache_control.type", "Input should be 'ephemeral'")
    if body.get("diagnostics") is not None:
        _dict(body["diagnostics"], "diagnostics")
    for name in ("inference_geo", "user_profile_id", "workspace_id"):
        if body.get(name) is not None:
            _string(body[name], name)
    if body.get("speed") not in (None, "standard", "fast"):
        raise _bad("speed", "Input should be 'standard' or 'fast'")


def _output_config(value: object, out: dict) -> None:
    config = _dict(value, "output_config")
    if config.get("effort") not in (None, *_EFFORTS):
        raise _bad(
            "output_config.effort", "Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
        )
    fmt = config.get("format")
    if fmt is None:
        return
    fmt = _dict(fmt, "output_config.format")
    if fmt.get("type") != "json_schema":
        raise _bad("output_config.format.type", "Input should be 'json_schema'")
    if "schema" not in fmt:
        raise _bad("output_config.format.schema", "Field required")
    schema = _dict(fmt["schema"], "output_config.format.schema")
    out["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


# Counting costs ~70 ns a token; system prompts and tool definitions repeat
# from call to call, so long texts are remembered (bounded: 256 texts of at
# most 64 KiB).
_CACHED_MIN, _CACHED_MAX = 256, 65536


@lru_cache(maxsize=256)
def _count_cached(text: str) -> int:
    return tokenizer.count_tokens(text)


def _count(text: str) -> int:
    if _CACHED_MIN <= len(text) <= _CACHED_MAX:
        return _count_cached(text)
    return tokenizer.count_tokens(text)


_ROLE_TOKENS = {r: tokenizer.count_tokens(r) for r in ("system", "user", "assistant", "tool")}


def _estimate(messages: list[dict], tools: list[dict]) -> int:
    """``len(tokenizer.chat_prompt_tokens(messages))`` counted without hashing
    every piece, plus the tool calls (names and argument JSON) and the tool
    definitions (their JSON), which the chat template text leaves out."""
    total = 2 + _ROLE_TOKENS["assistant"]  # the generation prompt: <|start|>assistant<|sep|>
    for m in messages:
        total += 3 + _ROLE_TOKENS[m["role"]]
        content = m.get("content")
        if isinstance(content, str):
            total += _count(content)
        elif isinstance(content, list):
            total += _count("\n".join(part["text"] for part in content))
        for call in m.get("tool_calls", ()):
            total += _count(call["function"]["name"]) + _count(call["function"]["arguments"])
    if tools:
        total += _count(dumps(tools).decode())
    return total


def _content_text(content: object) -> str:
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content)
    return content or ""


def _prefix(messages: list[dict]) -> str:
    """The prompt's start in the chat template's shape, up to PREFIX_CHARS."""
    parts, size = [], 0
    for m in messages:
        piece = f"<|start|>{m['role']}<|sep|>{_content_text(m.get('content'))}<|end|>"
        parts.append(piece)
        size += len(piece)
        if size >= PREFIX_CHARS:
            break
    return "".join(parts)[:PREFIX_CHARS]


def _parse(body: object, *, require_max_tokens: bool) -> tuple[dict, dict]:
    """Validate and translate; returns (OpenAI body, facts for the CallRequest)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    for key in body:
        if key in _UNSUPPORTED_FIELDS:
            raise _unsupported(key, "this field is")
        if key not in _FIELDS:
            raise _bad(key, "Extra inputs are not permitted")
    if "model" not in body:
        raise _bad("model", "Field required")
    model = _string(body["model"], "model")
    if not model:
        raise _bad("model", "String should have at least 1 character")

    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        if require_max_tokens:
            raise _bad("max_tokens", "Field required")
    elif not _is_int(max_tokens):
        raise _bad("max_tokens", "Input should be a valid integer")
    elif max_tokens < 1:
        raise _bad("max_tokens", "Input should be greater than or equal to 1")

    messages, prefill = _messages(body.get("messages"))
    system = body.get("system")
    if system is not None:
        system = _system(system)
        if system:
            messages.insert(0, {"role": "system", "content": system})

    out: dict[str, Any] = {"model": model, "messages": messages}
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    stream = body.get("stream")
    stream = False if stream is None else _bool(stream, "stream")
    if stream:
        out["stream"] = True
    stops: list[str] = []
    if body.get("stop_sequences") is not None:
        for i, stop in enumerate(_list(body["stop_sequences"], "stop_sequences")):
            stops.append(_string(stop, f"stop_sequences.{i}"))
        if stops:
            out["stop"] = stops
    temperature = _number(body, "temperature", 0, 1)
    if temperature is not None:
        out["temperature"] = temperature
    top_p = _number(body, "top_p", 0, 1)
    if top_p is not None:
        out["top_p"] = top_p
    top_k = body.get("top_k")
    if top_k is not None:
        if not _is_int(top_k):
            raise _bad("top_k", "Input should be a valid integer")
        if top_k < 0:
            raise _bad("top_k", "Input should be greater than or equal to 0")
    tools: list[dict] = []
    names: list[str] = []
    if body.get("tools") is not None:
        tools, names = _tools(body["tools"])
        if tools:
            out["tools"] = tools
    if body.get("tool_choice") is not None:
        _tool_choice(body["tool_choice"], names, out)
    metadata = body.get("metadata")
    if metadata is not None:
        metadata = _dict(metadata, "metadata")
        user_id = metadata.get("user_id")
        if user_id is not None:
            _string(user_id, "metadata.user_id")
    tier = body.get("service_tier")
    if tier is not None and tier not in ("auto", "standard_only"):
        raise _bad("service_tier", "Input should be 'auto' or 'standard_only'")
    if body.get("thinking") is not None:
        _thinking(body["thinking"], max_tokens)
    _ignored_fields(body)
    if body.get("output_config") is not None:
        _output_config(body["output_config"], out)
    if prefill:
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False

    facts = {
        "model": model,
        "stream": stream,
        "max_tokens": max_tokens,
        "estimate": _estimate(messages, tools),
        "stops": stops,
        "names": names,
        "temperature": temperature,
    }
    return out, facts


def parse_messages(body: object, headers: dict[str, str]) -> CallRequest:
    """``POST /v1/messages`` → a chat completion call for the node. ``headers``
    has lower-case names; ``anthropic-version`` / ``anthropic-beta`` are kept in
    ``extra`` (not required: clients other than the SDK often omit them)."""
    out, facts = _parse(body, require_max_tokens=True)
    adapter = MessagesResponse(input_estimate=facts["estimate"], stop_sequences=facts["stops"])
    extra: dict[str, Any] = {"tool_names": facts["names"]}
    for header in ("anthropic-version", "anthropic-beta"):
        if headers.get(header):
            extra[header.replace("-", "_")] = headers[header]
    return CallRequest(
        protocol="anthropic",
        endpoint="messages",
        model=facts["model"],
        upstream_path=UPSTREAM_PATH,
        body=out,
        stream=facts["stream"],
        client_wants_usage=True,
        max_output_tokens=facts["max_tokens"],
        prompt_tokens_estimate=facts["estimate"],
        prefix_text=_prefix(out["messages"]),
        deterministic=facts["temperature"] == 0,
        response=adapter,
        extra=extra,
    )


def count_tokens_request(body: object) -> tuple[str, int]:
    """``/v1/messages/count_tokens``: the public model and the prompt's tokens
    (validation as for a message, ``max_tokens`` optional)."""
    _, facts = _parse(body, require_max_tokens=False)
    return facts["model"], facts["estimate"]


def count_tokens(body: object) -> bytes:
    """The ``/v1/messages/count_tokens`` answer: ``{"input_tokens": n}``."""
    return dumps({"input_tokens": count_tokens_request(body)[1]})


def parse_call(endpoint: str, data: object, *, path_model, query, headers) -> CallRequest:
    """The pipeline's one entry: ``POST /v1/messages``."""
    return parse_messages(data, headers)


def count_model(data: object, path_model) -> object:
    """The model a ``count_tokens`` request names (checked against the key first)."""
    return data.get("model") if isinstance(data, dict) else None


def count_body(data: object, path_model) -> bytes:
    return count_tokens(data)


# --------------------------------------------------------------------------- answers


def _message_id(upstream_id: object) -> str:
    raw = upstream_id if isinstance(upstream_id, str) else ""
    for prefix in ("chatcmpl-", "chatcmpl_", "cmpl-"):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    raw = _ID_CHARS.sub("", raw)
    return f"msg_{raw or 'gateway'}"


def _tool_id(call_id: object, message_id: str, index: int) -> str:
    raw = _ID_CHARS.sub("", call_id) if isinstance(call_id, str) else ""
    if raw.startswith("toolu_"):
        return raw
    for prefix in ("call_", "chatcmpl-tool-", "chatcmpl-tool"):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    return f"toolu_{raw}" if raw else f"toolu_{message_id[4:]}_{index}"


def _tool_input(arguments: object) -> dict:
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesResponse(ResponseAdapter):
    """Renders the node's chat completion as an Anthropic message. One
    instance per call: a stream keeps its state (open block, indexes) here."""

    def __init__(self, *, input_estimate: int, stop_sequences: list[str] | tuple[str, ...] = ()):
        self.input_estimate = input_estimate
        self.stop_sequences = tuple(stop_sequences)
        self._started = False
        self._message_id = "msg_gateway"
        self._index = -1  # index of the last opened content block
        self._open: tuple | None = None  # ("text",) or ("tool", upstream index, upstream id)
        self._finish: str | None = None
        self._matched: object = None
        self._saw_tool = False
        self._output_text: list[str] = []  # for an output count when the node sends no usage

    # ---- shared

    def _stop(self, finish: object, matched: object, saw_tool: bool) -> tuple[str, str | None]:
        if finish in ("tool_calls", "function_call") or (saw_tool and finish in ("stop", None)):
            return "tool_use", None
        if finish == "length":
            return "max_tokens", None
        if finish == "content_filter":
            return "refusal", None
        if isinstance(matched, str) and matched in self.stop_sequences:
            return "stop_sequence", matched
        return "end_turn", None

    def _usage(self, usage: TokenUsage | None, output_text: str) -> dict:
        if usage is None:
            usage = TokenUsage(input=self.input_estimate, output=_count(output_text))
        return to_anthropic(usage)

    # ---- plain

    def render(self, upstream: dict, usage: TokenUsage | None, model: str) -> bytes:
        """The Anthropic message; a GatewayError (UPSTREAM) when the node's
        answer is not a chat completion."""
        choices = upstream.get("choices") if isinstance(upstream, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise GatewayError(
                UPSTREAM, "upstream_invalid_response", "The model node sent an invalid answer."
            )
        message_id = _message_id(upstream.get("id"))
        content: list[dict] = []
        text = message.get("content")
        if isinstance(text, str) and text:
            content.append({"type": "text", "text": text})
        produced = [text if isinstance(text, str) else ""]
        calls = message.get("tool_calls")
        for i, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments = function.get("arguments")
            produced.append(arguments if isinstance(arguments, str) else "")
            content.append(
                {
                    "type": "tool_use",
                    "id": _tool_id(call.get("id"), message_id, i),
                    "name": function.get("name") or "",
                    "input": _tool_input(arguments),
                }
            )
        saw_tool = any(block["type"] == "tool_use" for block in content)
        stop_reason, stop_sequence = self._stop(
            choice.get("finish_reason"), choice.get("stop_reason"), saw_tool
        )
        return dumps(
            {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": stop_sequence,
                "usage": self._usage(usage, "".join(produced)),
            }
        )

    # ---- streams

    def stream_start(self, model: str) -> bytes:
        # message_start waits for the first chunk: it carries the node's id.
        return b""

    def _message_start(self, upstream_id: object, model: str) -> bytes:
        self._started = True
        self._message_id = _message_id(upstream_id)
        message = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_estimate,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 0,
            },
        }
        return sse({"type": "message_start", "message": message}, "message_start") + sse(
            {"type": "ping"}, "ping"
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse({"type": "content_block_stop", "index": self._index}, "content_block_stop")

    def _begin(self, key: tuple, block: dict) -> bytes:
        head = self._close()
        self._index += 1
        self._open = key
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return head + sse(start, "content_block_start")

    def _delta(self, delta: dict) -> bytes:
        return sse(
            {"type": "content_block_delta", "index": self._index, "delta": delta},
            "content_block_delta",
        )

    def stream_chunk(self, chunk: dict, model: str) -> bytes:
        out = []
        if not self._started:
            out.append(self._message_start(chunk.get("id"), model))
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._open != ("text",):
                    out.append(self._begin(("text",), {"type": "text", "text": ""}))
                out.append(self._delta({"type": "text_delta", "text": text}))
                self._output_text.append(text)
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if not isinstance(call, dict):
                    continue
                index, call_id = call.get("index", 0), call.get("id")
                function = call.get("function")
                function = function if isinstance(function, dict) else {}
                open_ = self._open
                # A new call: another index, or (servers that number every call 0) another id.
                if (
                    open_ is None
                    or open_[0] != "tool"
                    or open_[1] != index
                    or (call_id and open_[2] and call_id != open_[2])
                ):
                    self._saw_tool = True
                    key = ("tool", index, call_id)
                    block = {
                        "type": "tool_use",
                        "id": _tool_id(call.get("id"), self._message_id, self._index + 1),
                        "name": function.get("name") or "",
                        "input": {},
                    }
                    out.append(self._begin(key, block))
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
                    self._output_text.append(arguments)
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
                self._matched = choice.get("stop_reason")
        return b"".join(out)

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        out = [] if self._started else [self._message_start(None, model)]
        out.append(self._close())
        stop_reason, stop_sequence = self._stop(self._finish, self._matched, self._saw_tool)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": self._usage(usage, "".join(self._output_text)),
        }
        out.append(sse(delta, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return b"".join(out)

    def stream_error(self, error: GatewayError) -> bytes:
        return sse(error_body(error), "error")


# --------------------------------------------------------------------------- errors, models


def _error(err: GatewayError) -> dict:
    kind = _ERROR_TYPES.get(err.kind, "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def error_body(err: GatewayError) -> bytes:
    """Anthropic's error JSON: ``{"type": "error", "error": {"type", "message"}}``."""
    return dumps(_error(err))


def error_response(err: GatewayError) -> tuple[int, bytes]:
    """The HTTP status and body of an error: the error's status, except that
    ``overloaded_error`` is Anthropic's 529."""
    status = OVERLOADED_STATUS if err.kind == OVERLOADED else err.status
    return status, error_body(err)


def _created_at(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_models(models: list[ModelInfo]) -> bytes:
    """Anthropic's ``/v1/models`` page (one page with everything). Only chat
    models: the Messages API cannot use embedding or completion-only ones."""
    data = [
        {
            "type": "model",
            "id": m.name,
            "display_name": m.display_name,
            "created_at": _created_at(m.created),
        }
        for m in models
        if m.kind == "chat"
    ]
    return dumps(
        {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )
