"""Validation of Anthropic Messages requests, the way Anthropic validates them:
a Pydantic-style ``"<path>: <problem>"`` message with ``param`` set to the
dotted path.

A top-level field this module does not know (the API grows; Anthropic
itself says ``"xyz: Extra inputs are not permitted"`` only for what it does not
know) reaches a channel that speaks Anthropic as sent and is left out of a
translation, named in ``CallRequest.dropped`` (the answer's
``x-gateway-dropped`` header); inside content blocks unknown keys
(``cache_control``, ``citations``) are accepted. ``image`` and ``document`` blocks are checked
here and translated (``protocols.anthropic.media``). What the OpenAI pivot
cannot carry — the server-tool and MCP blocks, ``search_result`` and
``container_upload`` blocks, and the ``container``, ``mcp_servers`` and
``context_management`` fields — is no longer refused: it is recorded in
``CallRequest.untranslatable`` (a channel that speaks Anthropic takes the call
as sent; any other refuses it). ``top_k``, ``metadata``, ``service_tier`` and
the newer account-side fields are validated here and not forwarded (so is a
``context_management`` that only clears earlier thinking: the pivot has none);
``thinking`` is validated here and becomes the pivot's ``reasoning_effort``
(``protocols.anthropic.translate`` builds the pivot).
"""

from __future__ import annotations

import re
from typing import Any

from gateway_bridge.protocols.base import GatewayError, invalid
from gateway_bridge.protocols.checks import is_int, is_number, json_object

# Cost attribution: the body field naming the call's end user (the path;
# empty: none). Messages names the end user in ``metadata.user_id``.
END_USER_FIELD: tuple[str, ...] = ("metadata", "user_id")

FIELDS = {
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
# Real Anthropic fields and blocks the OpenAI pivot cannot carry: recorded as
# untranslatable (a native channel takes them as sent).
UNTRANSLATABLE_FIELDS = {
    "container",
    "mcp_servers",
    "context_management",
}
UNTRANSLATABLE_BLOCKS = {
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
MEDIA_BLOCKS = {"image", "document"}
THINKING_BLOCKS = {"thinking", "redacted_thinking"}
_THINKING_TYPES = ("enabled", "disabled", "adaptive", "between_tools")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def bad(path: str, problem: str, code: str = "invalid_request") -> GatewayError:
    return invalid(f"{path}: {problem}", param=path, code=code)


def string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise bad(path, "Input should be a valid string")
    return value


def dictionary(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(path, "Input should be a valid dictionary")
    return value


def array(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad(path, "Input should be a valid list")
    return value


def boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise bad(path, "Input should be a valid boolean")
    return value


def number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not is_number(value):
        raise bad(name, "Input should be a valid number")
    if value < low:
        raise bad(name, f"Input should be greater than or equal to {low}")
    if value > high:
        raise bad(name, f"Input should be less than or equal to {high}")
    return value


def text_block(block: dict[str, Any], path: str) -> str:
    if "text" not in block:
        raise bad(f"{path}.text", "Field required")
    text = string(block["text"], f"{path}.text")
    if not text:
        raise bad(f"{path}.text", "text content blocks must be non-empty")
    return text


def block_type(block: object, path: str) -> tuple[dict[str, Any], str]:
    block = dictionary(block, path)
    kind = block.get("type")
    if kind is None:
        raise bad(f"{path}.type", "Field required")
    return block, string(kind, f"{path}.type")


def untranslatable_block(path: str, kind: str) -> str:
    """The ``CallRequest.untranslatable`` entry of a block the pivot cannot carry."""
    return f"{path}: {kind} content blocks"


def system_text(value: object, path: str = "system") -> str:
    """The text of a system prompt: the top-level ``system`` or the content of
    a ``system`` message (``path`` names it in errors)."""
    if isinstance(value, str):
        return value
    parts = []
    for i, block in enumerate(array(value, path)):
        block, kind = block_type(block, f"{path}.{i}")
        if kind != "text":
            raise bad(f"{path}.{i}.type", "Input should be 'text'")
        parts.append(text_block(block, f"{path}.{i}"))
    return "\n".join(parts)


def unknown_block(path: str, kind: str) -> GatewayError:
    return bad(
        f"{path}.type",
        f"Input tag '{kind}' found using 'type' does not match any of the expected tags: "
        "'text', 'tool_use', 'tool_result'",
    )


def missing_results(index: int, ids: list[str]) -> GatewayError:
    return bad(
        f"messages.{index}",
        f"`tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message.",
    )


def is_empty(content: object) -> bool:
    return content == "" or content == []


def check_thinking(value: object, max_tokens: int | None) -> None:
    thinking = dictionary(value, "thinking")
    kind = thinking.get("type")
    if kind not in _THINKING_TYPES:
        raise bad(
            "thinking.type", "Input should be 'enabled', 'disabled', 'adaptive' or 'between_tools'"
        )
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if budget is None:
            raise bad("thinking.budget_tokens", "Field required")
        if not is_int(budget):
            raise bad("thinking.budget_tokens", "Input should be a valid integer")
        if budget < 1024:
            raise bad("thinking.budget_tokens", "Input should be greater than or equal to 1024")
        if max_tokens is not None and budget >= max_tokens:
            raise bad("max_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`")


def check_ignored_fields(body: dict[str, Any]) -> None:
    """Fields Anthropic accepts that do not change what a node generates."""
    if body.get("cache_control") is not None:
        cache = dictionary(body["cache_control"], "cache_control")
        if cache.get("type") != "ephemeral":
            raise bad("cache_control.type", "Input should be 'ephemeral'")
    if body.get("diagnostics") is not None:
        dictionary(body["diagnostics"], "diagnostics")
    for name in ("inference_geo", "user_profile_id", "workspace_id"):
        if body.get(name) is not None:
            string(body[name], name)
    if body.get("speed") not in (None, "standard", "fast"):
        raise bad("speed", "Input should be 'standard' or 'fast'")


def clears_thinking_only(value: object) -> bool:
    """A ``context_management`` whose edits only clear earlier thinking (Claude
    Code sends ``clear_thinking_20251015`` with thinking on): the pivot drops
    earlier thinking blocks anyway, so it needs no translation. Other edits
    (clearing tool results, compaction) change the prompt: untranslatable."""
    if value is None:
        return True
    edits = dictionary(value, "context_management").get("edits")
    if edits is None:
        return True
    for i, edit in enumerate(array(edits, "context_management.edits")):
        kind = dictionary(edit, f"context_management.edits.{i}").get("type")
        if not isinstance(kind, str) or not kind.startswith("clear_thinking_"):
            return False
    return True


def check_head(
    body: object, *, require_max_tokens: bool, untranslatable: list[str], dropped: list[str]
) -> tuple[dict[str, Any], str, int | None]:
    """The body's top-level fields, its model and ``max_tokens``: (body, model,
    max_tokens); the fields the pivot cannot carry go to ``untranslatable``,
    those this module does not know to ``dropped``."""
    body = json_object(body)
    for key in body:
        if key == "context_management" and clears_thinking_only(body[key]):
            continue
        if key in UNTRANSLATABLE_FIELDS:
            untranslatable.append(f"{key}: the {key} field")
        elif key not in FIELDS:
            dropped.append(f"{key}: a field the translation does not carry")
    if "model" not in body:
        raise bad("model", "Field required")
    model = string(body["model"], "model")
    if not model:
        raise bad("model", "String should have at least 1 character")

    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        if require_max_tokens:
            raise bad("max_tokens", "Field required")
    elif not is_int(max_tokens):
        raise bad("max_tokens", "Input should be a valid integer")
    elif max_tokens < 1:
        raise bad("max_tokens", "Input should be greater than or equal to 1")
    return body, model, max_tokens


def check_top_k(body: dict[str, Any]) -> None:
    """``top_k``: validated, not forwarded (OpenAI's protocol has no such field)."""
    top_k = body.get("top_k")
    if top_k is not None:
        if not is_int(top_k):
            raise bad("top_k", "Input should be a valid integer")
        if top_k < 0:
            raise bad("top_k", "Input should be greater than or equal to 0")


def check_account_fields(body: dict[str, Any], max_tokens: int | None) -> None:
    """``metadata``, ``service_tier``, ``thinking`` and the newer account-side fields:
    validated (``thinking`` is translated to ``reasoning_effort`` afterwards)."""
    metadata = body.get("metadata")
    if metadata is not None:
        metadata = dictionary(metadata, "metadata")
        user_id = metadata.get("user_id")
        if user_id is not None:
            string(user_id, "metadata.user_id")
    tier = body.get("service_tier")
    if tier is not None and tier not in ("auto", "standard_only"):
        raise bad("service_tier", "Input should be 'auto' or 'standard_only'")
    if body.get("thinking") is not None:
        check_thinking(body["thinking"], max_tokens)
    check_ignored_fields(body)
