"""``POST /v1/responses`` → the chat pivot (``CallRequest.body``).

* ``instructions`` → a first ``system`` message (with the ``system`` and
  ``developer`` messages ``input`` starts with, if any); ``input`` (text or
  items, ``protocols.responses.items``) → the messages after it.
* Flat function tools ``{"type": "function", "name", "parameters", ...}`` →
  chat's ``{"type": "function", "function": {...}}``; ``tool_choice`` and
  ``parallel_tool_calls`` as chat's.
* ``max_output_tokens`` → ``max_tokens``; ``reasoning.effort`` →
  ``reasoning_effort``; ``text.format`` → ``response_format``;
  ``temperature`` and ``top_p`` as they are.
* ``previous_response_id``: the pipeline (``pipeline.stored``) loads the
  stored conversation of the caller's organization and ``continue_from``
  puts its items before this call's input (the earlier ``instructions`` are
  not carried over, as with OpenAI).

The call is recorded as the OpenAI protocol's ``responses`` endpoint; it is
never answered from the response cache (``deterministic`` is False: a stored
response gets a fresh id every time).
"""

from __future__ import annotations

from typing import Any, cast

from gateway_bridge.protocols.base import CallRequest, invalid
from gateway_bridge.protocols.estimate import chat_prompt
from gateway_bridge.protocols.openai.fields import (
    bool_field,
    int_field,
    missing,
    number_field,
    string_field,
    type_error,
)
from gateway_bridge.protocols.responses import request
from gateway_bridge.protocols.responses.answer import ResponsesResponse
from gateway_bridge.protocols.responses.items import input_items, to_messages

UPSTREAM_PATH = "/v1/chat/completions"
ENDPOINT = "responses"


def _messages(
    instructions: str | None, items: list[Any], skipped: list[Any] | None = None
) -> list[dict[str, Any]]:
    """The pivot's messages: the instructions and the leading system and
    developer messages joined into one first system message (Codex sends
    several; many open models' chat templates take one, first), then the rest."""
    messages = to_messages(items, skipped=skipped)
    head = [instructions] if instructions else []
    while messages and messages[0]["role"] == "system" and isinstance(messages[0]["content"], str):
        head.append(messages.pop(0)["content"])
    if head:
        messages.insert(0, {"role": "system", "content": "\n\n".join(head)})
    return messages


def _echo(body: dict[str, Any], effort: str | None, instructions: str | None) -> dict[str, Any]:
    """The request's fields the response object repeats."""
    reasoning = body.get("reasoning") or {}
    text = body.get("text") or {}
    return {
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": effort, "summary": reasoning.get("summary")},
        "store": body.get("store", True) is not False,
        "temperature": body.get("temperature", 1.0),
        "text": {"format": text.get("format") or {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation") or "disabled",
        "user": body.get("user"),
    }


def _input(body: dict[str, Any]) -> list[Any]:
    """The ``input`` items (none needed when continuing a stored response)."""
    if "input" not in body and not body.get("previous_response_id"):
        raise missing("input")
    items = input_items(body.get("input", []))
    if not items and not body.get("previous_response_id"):
        raise invalid(
            "Invalid 'input': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="input",
            code="empty_array",
        )
    return items


def _previous_response_id(body: dict[str, Any]) -> str | None:
    previous = string_field(body, "previous_response_id")
    if previous is not None and not previous:
        raise type_error("previous_response_id", "string", previous)
    return previous


def _tool_fields(tools: list[Any], choice: object, parallel: bool | None) -> dict[str, Any]:
    """The pivot's ``tools`` with their ``tool_choice`` and ``parallel_tool_calls``
    (none of them without tools)."""
    if not tools:
        return {}
    out: dict[str, Any] = {"tools": tools}
    if choice is not None:
        out["tool_choice"] = choice
    if parallel is not None:
        out["parallel_tool_calls"] = parallel
    return out


def parse_responses(body: object) -> CallRequest:
    dropped: list[str] = []
    body = request.check_fields(body, dropped)
    model = request.model_of(body)
    items = _input(body)
    instructions = string_field(body, "instructions")
    skipped: list[str] = []
    tools, names = request.tools(body, skipped, dropped)
    choice = request.tool_choice(body, names, skipped)
    parallel = bool_field(body, "parallel_tool_calls")
    max_output = int_field(body, "max_output_tokens", 1)
    temperature = number_field(body, "temperature", 0, 2)
    top_p = number_field(body, "top_p", 0, 1)
    effort = request.reasoning_effort(body)
    fmt = request.response_format(body)
    stream = bool(bool_field(body, "stream"))
    store = bool_field(body, "store") is not False
    previous = _previous_response_id(body)

    messages = _messages(instructions, items, skipped)
    out = {"model": model, "messages": messages, **_tool_fields(tools, choice, parallel)}
    given = {
        "max_tokens": max_output,
        "temperature": temperature,
        "top_p": top_p,
        "reasoning_effort": effort,
        "response_format": fmt,
    }
    out.update((key, value) for key, value in given.items() if value is not None)
    if stream:
        out["stream"] = True
    estimate, prefix = chat_prompt(messages, tools)
    # What pipeline.stored needs (store it? continue which?) and continue_from.
    facts: dict[str, Any] = {
        "store": store,
        "previous_response_id": previous,
        "instructions": instructions,
        "input": items,
    }
    adapter = ResponsesResponse(echo=_echo(body, effort, instructions), input_estimate=estimate)
    return CallRequest(
        protocol="openai",
        endpoint=ENDPOINT,
        model=model,
        upstream_path=UPSTREAM_PATH,
        body=out,
        stream=stream,
        client_wants_usage=True,
        max_output_tokens=max_output,
        prompt_tokens_estimate=estimate,
        prefix_text=prefix,
        deterministic=False,
        response=adapter,
        extra={"tool_names": names, "responses": facts},
        untranslatable=tuple(skipped),
        dropped=tuple(dropped),
    )


def adapter_of(req: CallRequest) -> ResponsesResponse:
    """The response adapter of a call this package parsed (``parse_responses``
    gives it a ``ResponsesResponse``), typed as such: ``CallRequest.response``
    is any ``ResponseAdapter``."""
    return cast(ResponsesResponse, req.response)


def continue_from(req: CallRequest, history: list[dict[str, Any]]) -> None:
    """Put a stored conversation's items (input and output of the earlier
    responses) before this call's input, and count them in the estimate."""
    facts = req.extra["responses"]
    skipped: list[str] = []
    messages = _messages(facts["instructions"], [*history, *facts["input"]], skipped)
    req.body["messages"] = messages
    req.untranslatable = tuple(dict.fromkeys((*req.untranslatable, *skipped)))
    estimate, prefix = chat_prompt(messages, req.body.get("tools"))
    req.prompt_tokens_estimate = estimate
    req.prefix_text = prefix
    adapter_of(req).input_estimate = estimate
    facts["history"] = history


def conversation(req: CallRequest) -> list[dict[str, Any]]:
    """Every item of the answered call's conversation: the earlier items, this
    call's input, its output (what a later ``previous_response_id`` continues)."""
    facts = req.extra["responses"]
    return [*facts.get("history", ()), *facts["input"], *adapter_of(req).output]


def parse_call(
    endpoint: str,
    data: Any,
    *,
    path_model: str | None,
    query: bytes,
    headers: dict[str, str],
) -> CallRequest:
    """The pipeline's one entry: ``POST /v1/responses``."""
    return parse_responses(data)
