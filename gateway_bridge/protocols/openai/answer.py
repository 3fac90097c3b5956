"""Answers in the OpenAI protocol: the node's own OpenAI bodies, with the public
model name and the usage written from the mapped ``TokenUsage`` (so
``prompt_tokens_details.cached_tokens`` is what was billed). In a stream the
usage-only chunk and the ``usage`` field of the other chunks reach the client
only when it asked with ``stream_options.include_usage``, as with OpenAI.
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.base import GatewayError, ModelInfo, ResponseAdapter, dumps, sse
from gateway_bridge.protocols.openai.errors import error_object
from gateway_bridge.usage_mapping import TokenUsage, from_openai, to_openai

DONE = b"data: [DONE]\n\n"


def render_models(models: list[ModelInfo], owned_by: str = "system") -> bytes:
    data = [
        {"id": m.name, "object": "model", "created": m.created, "owned_by": owned_by}
        for m in models
    ]
    return dumps({"object": "list", "data": data})


def usage_body(usage: TokenUsage, endpoint: str) -> dict[str, Any]:
    if endpoint == "embeddings":
        return {"prompt_tokens": usage.prompt_total, "total_tokens": usage.prompt_total}
    return to_openai(usage)


class OpenAIResponse(ResponseAdapter):
    """The node's OpenAI answer with the public model name and the billed usage."""

    def __init__(self, endpoint: str, wants_usage: bool):
        self.endpoint = endpoint
        self.wants_usage = wants_usage
        self._usage_sent = False
        # id/object/created of the stream, for a late usage chunk
        self._head: dict[str, Any] | None = None

    def render(self, upstream: dict[str, Any], usage: TokenUsage | None, model: str) -> bytes:
        body = {**upstream, "model": model}
        if usage is not None:
            body["usage"] = usage_body(usage, self.endpoint)
        else:
            body.pop("usage", None)
        return dumps(body)

    def stream_chunk(self, chunk: dict[str, Any], model: str) -> bytes:
        out = {**chunk, "model": model}
        if self._head is None:
            self._head = {k: chunk[k] for k in ("id", "object", "created") if k in chunk}
        if not chunk.get("choices"):  # the usage-only chunk
            if not self.wants_usage or self._usage_sent:
                return b""
            mapped = from_openai(chunk.get("usage"))
            if mapped is None:
                return b""
            out["usage"] = usage_body(mapped, self.endpoint)
            self._usage_sent = True
        elif not self.wants_usage:
            out.pop("usage", None)
        elif out.get("usage") is not None:  # OpenAI puts usage only on the last chunk
            out["usage"] = None
        return sse(out)

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        if self.wants_usage and not self._usage_sent and usage is not None:
            # The node sent no usage chunk (the gateway counted): the client still gets one.
            self._usage_sent = True
            head = self._head or {"object": "chat.completion.chunk"}
            chunk = {
                **head,
                "model": model,
                "choices": [],
                "usage": usage_body(usage, self.endpoint),
            }
            return sse(chunk) + DONE
        return DONE

    def stream_error(self, error: GatewayError) -> bytes:
        return sse({"error": error_object(error)}) + DONE
