"""Anthropic Messages requests: the top-level checks, thinking, tool choice, the
prompt's tokens and the cache breakpoints' prefix lengths.

Validation follows Anthropic's (``"<path>: <problem>"`` messages, 400
``invalid_request_error``): ``model``, ``max_tokens`` (not for
``count_tokens``) and ``messages`` are required, unknown top-level fields are
refused; the content itself is checked by ``anthropic_blocks``.

Tokens: the request is rendered as the OpenAI messages the gateway translates
it to and counted with ``console.kernel.tokens``' chat template and media rule, so a
native call costs what the gateway estimates for the same conversation. A
breakpoint's prefix length is the same count of the request cut after its
block (less the generation prompt). The top-level ``cache_control``
(automatic caching) marks the last block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from console.kernel import tokens as tokenizer
from console.kernel.tokens import template_messages

from . import prompt_cache, protocol
from .anthropic_blocks import array, bad, convert, dictionary, string
from .tool_plan import ToolPlan

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
    "cache_control",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
    "diagnostics",
    "inference_geo",
    "speed",
    "user_profile_id",
    "workspace_id",
}
GENERATION_PROMPT = 3  # <|start|> assistant <|sep|>


def _int(body: dict, name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, "Input should be a valid integer")
    if value < low:
        raise bad(name, f"Input should be greater than or equal to {low}")
    return value


@dataclass
class MessagesRequest:
    model: str
    max_tokens: int | None
    stream: bool
    stop: tuple[str, ...]
    thinking_budget: int  # 0: no thinking
    thinking_shown: bool  # False: ``display: "omitted"`` (signature only)
    messages: list[dict]  # the OpenAI messages the prompt is rendered from
    tools: list[dict]  # OpenAI tools
    plan: ToolPlan
    prompt_ids: list[int]
    cache: prompt_cache.Prefixes = field(default_factory=prompt_cache.Prefixes)
    json_schema: dict | None = None  # ``output_config.format``: the text is JSON of it


def _render(messages: list[dict], tools: list[dict]) -> list[int]:
    return tokenizer.chat_prompt_tokens(template_messages(messages, tools or None))


def _truncated(body: dict, where: tuple) -> dict:
    """The request's prefix that ends with the block at ``where``."""
    segment, i, j = where
    if segment == "tools":
        return {"tools": body["tools"][: i + 1]}
    out = {k: body[k] for k in ("tools",) if body.get(k) is not None}
    if segment == "system":
        system = body["system"]
        out["system"] = system if isinstance(system, str) else system[: i + 1]
        return out
    if body.get("system") is not None:
        out["system"] = body["system"]
    messages = list(body["messages"][:i])
    last = body["messages"][i]
    content = last["content"]
    messages.append({**last, "content": content if isinstance(content, str) else content[: j + 1]})
    out["messages"] = messages
    return out


def _tool_choice(body: dict, tools: list[dict]) -> dict:
    """Anthropic's ``tool_choice`` as the OpenAI fields ``protocol.tool_plan`` reads."""
    out: dict = {"tools": tools}
    choice = body.get("tool_choice")
    if choice is None:
        return out
    choice = dictionary(choice, "tool_choice")
    kind = choice.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        raise bad("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
    if not tools:
        if kind in ("any", "tool"):
            raise bad("tool_choice", "tool_choice may only be specified while providing tools")
        return out
    if kind == "tool":
        name = string(choice.get("name"), "tool_choice.name")
        if name not in [t["function"]["name"] for t in tools]:
            raise bad("tool_choice.name", f"Tool '{name}' not found in tools")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
    return out


def _thinking(body: dict, max_tokens: int | None) -> tuple[int, bool]:
    """(thinking budget, whether its text is shown); (0, True) when off."""
    value = body.get("thinking")
    if value is None:
        return 0, True
    thinking = dictionary(value, "thinking")
    kind = thinking.get("type")
    if kind not in ("enabled", "disabled", "adaptive", "between_tools"):
        raise bad(
            "thinking.type",
            "Input should be 'enabled', 'disabled', 'adaptive' or 'between_tools'",
        )
    if kind == "disabled":
        return 0, True
    display = thinking.get("display") or "summarized"
    if display not in ("summarized", "omitted"):
        raise bad("thinking.display", "Input should be 'summarized' or 'omitted'")
    if body.get("temperature") not in (None, 1, 1.0):
        raise bad("", "`temperature` may only be set to 1 when thinking is enabled.")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise bad("", "Thinking may not be enabled when tool_choice forces tool use.")
    limit = max_tokens or 1 << 20
    if kind in ("adaptive", "between_tools"):
        return max(1, limit // 2), display == "summarized"
    budget = _int(thinking, "budget_tokens", 1024)
    if budget is None:
        raise bad("thinking.budget_tokens", "Field required")
    if max_tokens is not None and budget >= max_tokens:
        raise bad("max_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`.")
    return budget, display == "summarized"


def _output_schema(body: dict) -> dict | None:
    """``output_config.format``'s schema (structured outputs), or None."""
    config = body.get("output_config")
    if config is None:
        return None
    fmt = dictionary(config, "output_config").get("format")
    if fmt is None:
        return None
    fmt = dictionary(fmt, "output_config.format")
    if fmt.get("type") != "json_schema":
        raise bad("output_config.format.type", "Input should be 'json_schema'")
    if "schema" not in fmt:
        raise bad("output_config.format.schema", "Field required")
    return dictionary(fmt["schema"], "output_config.format.schema")


def parse_messages(body: dict, *, count_only: bool = False) -> MessagesRequest:
    """A checked ``/v1/messages`` (or ``count_tokens``) body."""
    for key in body:
        if key not in FIELDS:
            raise bad(key, "Extra inputs are not permitted")
    if "model" not in body:
        raise bad("model", "Field required")
    model = string(body["model"], "model")
    if "messages" not in body:
        raise bad("messages", "Field required")
    max_tokens = _int(body, "max_tokens", 1)
    if max_tokens is None and not count_only:
        raise bad("max_tokens", "Field required")
    stream = body.get("stream") is True
    if body.get("stream") not in (None, True, False):
        raise bad("stream", "Input should be a valid boolean")
    stops = tuple(
        string(s, f"stop_sequences.{i}")
        for i, s in enumerate(array(body.get("stop_sequences") or [], "stop_sequences"))
    )
    for name, high in (("temperature", 1), ("top_p", 1)):
        value = body.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high
        ):
            raise bad(name, f"Input should be a number between 0 and {high}")
    _int(body, "top_k", 0)
    budget, shown = _thinking(body, max_tokens)
    messages, tools, reader = convert(body, strict=True)
    if body.get("cache_control") is not None and reader.prefixes.keys:
        last = len(reader.prefixes.keys) - 1  # automatic caching: the last block
        if all(position != last for position, _ in reader.prefixes.breakpoints):
            reader.breakpoint(last, body["cache_control"], "cache_control")
    plan = protocol.tool_plan(_tool_choice(body, tools), messages) if messages else ToolPlan()
    prefixes = reader.prefixes

    def tokens_at(position: int) -> int:
        part, part_tools, _ = convert(_truncated(body, prefixes.where[position]), strict=False)
        return len(_render(part, part_tools)) - GENERATION_PROMPT

    prefixes.tokens_at = tokens_at
    return MessagesRequest(
        model=model,
        max_tokens=max_tokens,
        stream=stream,
        stop=tuple(s for s in stops if s),
        thinking_budget=budget,
        thinking_shown=shown,
        messages=messages,
        tools=tools,
        plan=plan,
        prompt_ids=_render(messages, tools),
        cache=prefixes,
        json_schema=_output_schema(body),
    )
