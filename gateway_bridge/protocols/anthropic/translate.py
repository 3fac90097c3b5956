"""Anthropic Messages requests → the node's OpenAI chat body.

Decisions, where Anthropic's API and a text-only OpenAI node do not meet:

* ``thinking`` is validated and then ignored: the nodes expose no thinking
  blocks, and an answer without them is still a valid answer (clients that
  always send ``thinking`` keep working). Earlier ``thinking`` /
  ``redacted_thinking`` blocks in assistant turns are dropped, as Anthropic
  drops them from non-tool turns.
* ``temperature`` and ``top_p`` (still sent by older clients; the 2.x SDK no
  longer has them) are forwarded; ``top_k``, ``metadata``, ``service_tier`` and
  the newer ``cache_control``, ``diagnostics``, ``inference_geo``, ``speed``,
  ``user_profile_id``, ``workspace_id`` and ``output_config.effort`` are
  validated (``request``) and not forwarded. ``output_config.format`` (a JSON
  schema) becomes OpenAI's ``response_format`` (vLLM's guided decoding).
* A ``tool_result`` with ``is_error`` reaches the node as a tool message whose
  content starts with ``"Error: "`` (OpenAI has no error flag).
* A final assistant message (a prefill) is forwarded with vLLM's
  ``continue_final_message``; the answer continues it, as Anthropic's does.
* The prompt estimate (also the ``count_tokens`` answer) and the affinity
  prefix come from the translated body (``protocols.estimate``), as for every
  protocol.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway_bridge.protocols.anthropic.answer import MessagesResponse
from gateway_bridge.protocols.anthropic.request import (
    THINKING_BLOCKS,
    TOOL_NAME,
    array,
    bad,
    block_type,
    boolean,
    check_account_fields,
    check_head,
    check_top_k,
    dictionary,
    is_empty,
    missing_results,
    number,
    string,
    system_text,
    text_block,
    tool_result_text,
    unknown_block,
    unsupported,
)
from gateway_bridge.protocols.base import CallRequest, dumps
from gateway_bridge.protocols.checks import ID_CHARS
from gateway_bridge.protocols.estimate import chat_prompt

UPSTREAM_PATH = "/v1/chat/completions"
_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def _text_content(texts: list[str]) -> str | list[dict]:
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def _user(index: int, content: object, expected_ids: list[str]) -> list[dict]:
    """One Anthropic user turn → tool messages (in order), then the user's text."""
    path = f"messages.{index}"
    if isinstance(content, str):
        if expected_ids:
            raise missing_results(index - 1, expected_ids)
        return [{"role": "user", "content": content}] if content else []
    blocks = array(content, f"{path}.content")
    tools: list[dict] = []
    texts: list[str] = []
    for i, block in enumerate(blocks):
        bpath = f"{path}.content.{i}"
        block, kind = block_type(block, bpath)
        if kind == "text":
            texts.append(text_block(block, bpath))
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
            text = tool_result_text(block, bpath)
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
        elif kind == "tool_result":
            raise bad(f"{bpath}.type", "tool_result blocks are only allowed in user messages")
        else:
            raise unknown_block(bpath, kind)
    if not texts and not calls:
        return None, []
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message, [c["id"] for c in calls]


def _messages(value: object) -> tuple[list[dict], bool]:
    """Anthropic messages → OpenAI messages, and whether the last one is a prefill."""
    if value is None:
        raise bad("messages", "Field required")
    messages = array(value, "messages")
    if not messages:
        raise bad("messages", "at least one message is required")
    out: list[dict] = []
    expected: list[str] = []  # tool_use ids the next user turn must answer
    last = len(messages) - 1
    prefill = False
    for index, message in enumerate(messages):
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
            raise bad(
                f"{path}.role",
                'Unexpected role "system". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.',
            )
        if role not in ("user", "assistant"):
            raise bad(f"{path}.role", "Input should be 'user' or 'assistant'")
        if not isinstance(content, str | list):
            raise bad(f"{path}.content", "Input should be a valid list")
        if is_empty(content) and not (role == "assistant" and index == last):
            raise bad(
                path,
                "all messages must have non-empty content except for the optional final "
                "assistant message",
            )
        if role == "user":
            out.extend(_user(index, content, expected))
            expected = []
            continue
        if expected:
            raise missing_results(index - 1, expected)
        converted, expected = _assistant(index, content)
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


def _tools(value: object) -> tuple[list[dict], list[str]]:
    tools, names = [], []
    for i, tool in enumerate(array(value, "tools")):
        path = f"tools.{i}"
        tool = dictionary(tool, path)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise unsupported(path, f"server tool {kind!r} is")
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


def _tool_choice(value: object, names: list[str], body: dict) -> None:
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


def _output_config(value: object, out: dict) -> None:
    config = dictionary(value, "output_config")
    if config.get("effort") not in (None, *_EFFORTS):
        raise bad(
            "output_config.effort", "Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
        )
    fmt = config.get("format")
    if fmt is None:
        return
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


def _parse(body: object, *, require_max_tokens: bool) -> tuple[dict, Facts]:
    """Validate and translate; returns (OpenAI body, facts for the CallRequest)."""
    body, model, max_tokens = check_head(body, require_max_tokens=require_max_tokens)
    messages, prefill = _messages(body.get("messages"))
    system = body.get("system")
    if system is not None:
        system = system_text(system)
        if system:
            messages.insert(0, {"role": "system", "content": system})

    out: dict[str, Any] = {"model": model, "messages": messages}
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
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
    tools: list[dict] = []
    names: list[str] = []
    if body.get("tools") is not None:
        tools, names = _tools(body["tools"])
        if tools:
            out["tools"] = tools
    if body.get("tool_choice") is not None:
        _tool_choice(body["tool_choice"], names, out)
    check_account_fields(body, max_tokens)
    if body.get("output_config") is not None:
        _output_config(body["output_config"], out)
    if prefill:
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False
    estimate, prefix = chat_prompt(messages, tools)
    return out, Facts(model, stream, max_tokens, estimate, prefix, stops, names, temperature)


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


def parse_call(endpoint: str, data: object, *, path_model, query, headers) -> CallRequest:
    """The pipeline's one entry: ``POST /v1/messages``."""
    return parse_messages(data, headers)


def count_model(data: object, path_model) -> object:
    """The model a ``count_tokens`` request names (checked against the key first)."""
    return data.get("model") if isinstance(data, dict) else None


def count_body(data: object, path_model) -> bytes:
    return count_tokens(data)
