"""OpenAI requests → the node's body: OpenAI's own, less what the node does not take.

Only known fields reach the node (``metadata``, ``store``, ``service_tier`` and
the other account-side fields are dropped); ``max_completion_tokens`` is
forwarded as ``max_tokens``. The prompt estimate and affinity prefix come from
the forwarded body (``protocols.estimate``), as for every protocol.
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.base import CallRequest
from gateway_bridge.protocols.estimate import chat_prompt, texts_prompt
from gateway_bridge.protocols.openai.answer import OpenAIResponse
from gateway_bridge.protocols.openai.request import (
    CHAT_FIELDS,
    COMPLETION_FIELDS,
    EMBEDDING_FIELDS,
    check_chat,
    check_completion,
    check_embeddings,
)

PROTOCOL = "openai"


def _forward(body: dict[str, Any], known: set[str]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None and k in known}


def _deterministic(body: dict[str, Any], n: int | None) -> bool:
    return (body.get("temperature") == 0 or body.get("seed") is not None) and n in (None, 1)


def _input_prompt(value: Any, shape: str) -> tuple[int, str]:
    """(tokens, affinity prefix) of a checked prompt / input of the given shape."""
    if shape == "text":
        return texts_prompt([value])
    if shape == "texts":
        return texts_prompt(value)
    if shape == "tokens":
        return len(value), " ".join(map(str, value[:1024]))
    return sum(len(item) for item in value), " ".join(map(str, value[0][:1024]))


def parse_chat(body: Any) -> CallRequest:
    """``POST /v1/chat/completions``."""
    checked = check_chat(body)
    forward = _forward(body, CHAT_FIELDS)
    forward.pop("max_completion_tokens", None)
    if checked.max_output is not None:
        forward["max_tokens"] = checked.max_output
    estimate, prefix = chat_prompt(forward["messages"], forward.get("tools"))
    wants = checked.include_usage if checked.stream else True
    return CallRequest(
        protocol=PROTOCOL,
        endpoint="chat.completions",
        model=checked.model,
        upstream_path="/v1/chat/completions",
        body=forward,
        stream=checked.stream,
        client_wants_usage=wants,
        max_output_tokens=checked.max_output,
        prompt_tokens_estimate=estimate,
        prefix_text=prefix,
        deterministic=_deterministic(body, checked.n),
        response=OpenAIResponse("chat.completions", wants),
        extra={"tool_names": checked.tool_names} if checked.tool_names else {},
    )


def parse_completion(body: Any) -> CallRequest:
    """``POST /v1/completions``."""
    checked = check_completion(body)
    tokens, prefix = _input_prompt(body["prompt"], checked.input_shape)
    wants = checked.include_usage if checked.stream else True
    return CallRequest(
        protocol=PROTOCOL,
        endpoint="completions",
        model=checked.model,
        upstream_path="/v1/completions",
        body=_forward(body, COMPLETION_FIELDS),
        stream=checked.stream,
        client_wants_usage=wants,
        max_output_tokens=checked.max_output,
        prompt_tokens_estimate=tokens,
        prefix_text=prefix,
        deterministic=_deterministic(body, checked.n) and checked.best_of in (None, 1),
        response=OpenAIResponse("completions", wants),
    )


def parse_embeddings(body: Any) -> CallRequest:
    """``POST /v1/embeddings``."""
    checked = check_embeddings(body)
    tokens, prefix = _input_prompt(body["input"], checked.input_shape)
    return CallRequest(
        protocol=PROTOCOL,
        endpoint="embeddings",
        model=checked.model,
        upstream_path="/v1/embeddings",
        body=_forward(body, EMBEDDING_FIELDS),
        stream=False,
        client_wants_usage=True,
        max_output_tokens=0,  # embeddings generate nothing: no output budget to reserve
        prompt_tokens_estimate=tokens,
        prefix_text=prefix,
        deterministic=True,  # no sampling: the vector is a function of the input
        response=OpenAIResponse("embeddings", True),
    )


_PARSERS = {
    "chat.completions": parse_chat,
    "completions": parse_completion,
    "embeddings": parse_embeddings,
}


def parse_call(
    endpoint: str,
    data: Any,
    *,
    path_model: str | None,
    query: bytes,
    headers: dict[str, str],
) -> CallRequest:
    """The pipeline's one entry: the client's parsed JSON for ``endpoint``."""
    return _PARSERS[endpoint](data)
