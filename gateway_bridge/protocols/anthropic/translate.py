"""Anthropic Messages requests → the OpenAI chat pivot (``CallRequest.body``).

Decisions, where Anthropic's API and the pivot do not meet (the messages
themselves: ``protocols.anthropic.content``; images and documents:
``protocols.anthropic.media``):

* ``thinking`` becomes the pivot's ``reasoning_effort`` by the budget table of
  ``protocols.anthropic.thinking`` (enabled: by ``budget_tokens``; adaptive:
  ``output_config.effort`` when given; disabled: none). Earlier ``thinking`` /
  ``redacted_thinking`` blocks in assistant turns are dropped from the pivot.
* ``temperature`` and ``top_p`` (still sent by older clients; the 2.x SDK no
  longer has them) are forwarded; ``top_k``, ``metadata``, ``service_tier`` and
  the newer ``cache_control``, ``diagnostics``, ``inference_geo``, ``speed``,
  ``user_profile_id``, ``workspace_id`` and ``output_config.effort`` (other than
  with adaptive thinking) are validated (``request``) and not in the pivot; a
  native channel gets them, and block-level ``cache_control``, as sent.
  ``output_config.format`` (a JSON schema) becomes OpenAI's
  ``response_format`` (vLLM's guided decoding).
* What the pivot cannot carry — ``container``, ``mcp_servers``,
  ``context_management``, server tools (``web_search_...``, ``bash_...``, ...),
  server-tool / MCP / ``search_result`` / ``container_upload`` blocks,
  Files API sources, citations — is recorded in ``CallRequest.untranslatable``
  ("<path>: <what>") and the call parses: a channel that speaks Anthropic takes
  it as sent, any other refuses it (400 naming the first entry).
* A final assistant message (a prefill) is forwarded with vLLM's
  ``continue_final_message``; the answer continues it, as Anthropic's does.
* The prompt estimate (also the ``count_tokens`` answer) and the affinity
  prefix come from the pivot (``protocols.estimate``, images and documents by
  ``console.kernel.tokens``' media rule), as for every protocol; untranslatable
  blocks are not counted.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway_bridge.protocols.anthropic.answer import MessagesResponse
from gateway_bridge.protocols.anthropic.content import messages as translate_messages
from gateway_bridge.protocols.anthropic.request import (
    TOOL_NAME,
    array,
    bad,
    boolean,
    check_account_fields,
    check_head,
    check_top_k,
    dictionary,
    number,
    string,
    system_text,
)
from gateway_bridge.protocols.anthropic.thinking import effort_of_thinking
from gateway_bridge.protocols.base import CallRequest, dumps
from gateway_bridge.protocols.estimate import chat_prompt

UPSTREAM_PATH = "/v1/chat/completions"
_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def _tools(value: object, skipped: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(pivot tools, every tool name); Anthropic's server and built-in tools
    (``web_search_...``, ``bash_...``) are untranslatable."""
    tools, names = [], []
    for i, tool in enumerate(array(value, "tools")):
        path = f"tools.{i}"
        tool = dictionary(tool, path)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            skipped.append(f"{path}: the server tool {kind!r}")
            if isinstance(tool.get("name"), str):
                names.append(tool["name"])
            continue
        for key in ("name", "input_schema"):
            if key not in tool:
                raise bad(f"{path}.{key}", "Field required")
        name = string(tool["name"], f"{path}.name")
        if not TOOL_NAME.match(name):
            raise bad(f"{path}.name", "String should match pattern '^[a-zA-Z0-9_-]{1,128}$'")
        if name in names:
            raise bad("tools", "Tool names must be unique.")
        schema = dictionary(tool["input_schema"], f"{path}.input_schema")
        if schema.get("type") != "object":
            raise bad(f"{path}.input_schema.type", "Input should be 'object'")
        function: dict[str, Any] = {"name": name}
        if tool.get("description") is not None:
            function["description"] = string(tool["description"], f"{path}.description")
        function["parameters"] = schema
        if tool.get("strict") is not None:
            function["strict"] = boolean(tool["strict"], f"{path}.strict")
        tools.append({"type": "function", "function": function})
        names.append(name)
    return tools, names


def _tool_choice(value: object, names: list[str], body: dict[str, Any]) -> None:
    choice = dictionary(value, "tool_choice")
    kind = choice.get("type")
    if kind is None:
        raise bad("tool_choice.type", "Field required")
    if kind not in ("auto", "any", "tool", "none"):
        raise bad("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
    if not names:
        if kind in ("any", "tool"):
            raise bad("tool_choice", "tool_choice may only be specified while providing tools")
        return
    if kind == "tool":
        if "name" not in choice:
            raise bad("tool_choice.name", "Field required")
        name = string(choice["name"], "tool_choice.name")
        if name not in names:
            raise bad("tool_choice.name", f"Tool '{name}' not found in tools")
        body["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and boolean(disable, "tool_choice.disable_parallel_tool_use"):
        body["parallel_tool_calls"] = False


def _output_config(value: object, out: dict[str, Any]) -> str | None:
    """Validate ``output_config``, put its ``format`` in the pivot; returns its ``effort``."""
    config = dictionary(value, "output_config")
    effort = config.get("effort")
    if effort not in (None, *_EFFORTS):
        raise bad(
            "output_config.effort", "Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
        )
    fmt = config.get("format")
    if fmt is None:
        return effort
    fmt = dictionary(fmt, "output_config.format")
    if fmt.get("type") != "json_schema":
        raise bad("output_config.format.type", "Input should be 'json_schema'")
    if "schema" not in fmt:
        raise bad("output_config.format.schema", "Field required")
    schema = dictionary(fmt["schema"], "output_config.format.schema")
    out["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    return effort


class Facts(NamedTuple):
    """What the ``CallRequest`` needs besides the node's body."""

    model: str
    stream: bool
    max_tokens: int | None
    estimate: int  # prompt tokens (protocols.estimate)
    prefix: str  # the affinity prefix (protocols.estimate)
    stops: list[str]
    names: list[str]  # tool names
    temperature: float | None
    untranslatable: tuple[str, ...]  # what the pivot cannot carry, "<path>: <what>"
    dropped: tuple[str, ...]  # what a translation leaves out, "<path>: <what>"


def _server_tools_only_choice(out: dict[str, Any], tools: list[dict[str, Any]]) -> None:
    """A tool choice that names a server tool, or with no pivot tool left, is
    not the pivot's (the call is untranslatable anyway)."""
    choice = out.get("tool_choice")
    names = {t["function"]["name"] for t in tools}
    if not names or (isinstance(choice, dict) and choice["function"]["name"] not in names):
        out.pop("tool_choice", None)
        out.pop("parallel_tool_calls", None)


def _sampling(body: dict[str, Any], out: dict[str, Any]) -> tuple[bool, list[str], float | None]:
    """``stream``, ``stop_sequences``, ``temperature``, ``top_p`` (and ``top_k``,
    checked) into ``out``; returns the stream flag, the stops and the temperature."""
    stream = body.get("stream")
    stream = False if stream is None else boolean(stream, "stream")
    if stream:
        out["stream"] = True
    stops: list[str] = []
    if body.get("stop_sequences") is not None:
        for i, stop in enumerate(array(body["stop_sequences"], "stop_sequences")):
            stops.append(string(stop, f"stop_sequences.{i}"))
        if stops:
            out["stop"] = stops
    temperature = number(body, "temperature", 0, 1)
    if temperature is not None:
        out["temperature"] = temperature
    top_p = number(body, "top_p", 0, 1)
    if top_p is not None:
        out["top_p"] = top_p
    check_top_k(body)
    return stream, stops, temperature


def _parse(body: object, *, require_max_tokens: bool) -> tuple[dict[str, Any], Facts]:
    """Validate and translate; returns (OpenAI body, facts for the CallRequest)."""
    skipped: list[str] = []
    dropped: list[str] = []
    body, model, max_tokens = check_head(
        body, require_max_tokens=require_max_tokens, untranslatable=skipped, dropped=dropped
    )
    messages, prefill = translate_messages(body.get("messages"), skipped)
    system = body.get("system")
    if system is not None:
        system = system_text(system)
        if system:
            messages.insert(0, {"role": "system", "content": system})

    out: dict[str, Any] = {"model": model, "messages": messages}
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    stream, stops, temperature = _sampling(body, out)
    tools: list[dict[str, Any]] = []
    names: list[str] = []
    if body.get("tools") is not None:
        tools, names = _tools(body["tools"], skipped)
        if tools:
            out["tools"] = tools
    if body.get("tool_choice") is not None:
        _tool_choice(body["tool_choice"], names, out)
        _server_tools_only_choice(out, tools)
    check_account_fields(body, max_tokens)
    output_effort = None
    if body.get("output_config") is not None:
        output_effort = _output_config(body["output_config"], out)
    effort = effort_of_thinking(body.get("thinking"), output_effort)
    if effort is not None:
        out["reasoning_effort"] = effort
    if prefill:
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False
    estimate, prefix = chat_prompt(messages, tools)
    facts = Facts(
        model,
        stream,
        max_tokens,
        estimate,
        prefix,
        stops,
        names,
        temperature,
        tuple(skipped),
        tuple(dropped),
    )
    return out, facts


def parse_messages(body: object, headers: dict[str, str]) -> CallRequest:
    """``POST /v1/messages`` → a chat completion call for the node. ``headers``
    has lower-case names; ``anthropic-version`` / ``anthropic-beta`` are kept in
    ``extra`` (not required: clients other than the SDK often omit them)."""
    out, facts = _parse(body, require_max_tokens=True)
    adapter = MessagesResponse(input_estimate=facts.estimate, stop_sequences=facts.stops)
    extra: dict[str, Any] = {"tool_names": facts.names}
    for header in ("anthropic-version", "anthropic-beta"):
        if headers.get(header):
            extra[header.replace("-", "_")] = headers[header]
    return CallRequest(
        protocol="anthropic",
        endpoint="messages",
        model=facts.model,
        upstream_path=UPSTREAM_PATH,
        body=out,
        stream=facts.stream,
        client_wants_usage=True,
        max_output_tokens=facts.max_tokens,
        prompt_tokens_estimate=facts.estimate,
        prefix_text=facts.prefix,
        deterministic=facts.temperature == 0,
        response=adapter,
        extra=extra,
        client_body=body if isinstance(body, dict) else None,  # a dict: _parse checked it
        untranslatable=facts.untranslatable,
        dropped=facts.dropped,
    )


def count_tokens_request(body: object) -> tuple[str, int]:
    """``/v1/messages/count_tokens``: the public model and the prompt's tokens
    (validation as for a message, ``max_tokens`` optional): the same estimate as
    the call's."""
    _, facts = _parse(body, require_max_tokens=False)
    return facts.model, facts.estimate


def count_tokens(body: object) -> bytes:
    """The ``/v1/messages/count_tokens`` answer: ``{"input_tokens": n}``."""
    return dumps({"input_tokens": count_tokens_request(body)[1]})


def parse_call(
    endpoint: str,
    data: object,
    *,
    path_model: str | None,
    query: bytes,
    headers: dict[str, str],
) -> CallRequest:
    """The pipeline's one entry: ``POST /v1/messages``."""
    return parse_messages(data, headers)


def count_model(data: object, path_model: str | None) -> object:
    """The model a ``count_tokens`` request names (checked against the key first)."""
    return data.get("model") if isinstance(data, dict) else None


def count_body(data: object, path_model: str | None) -> bytes:
    return count_tokens(data)
