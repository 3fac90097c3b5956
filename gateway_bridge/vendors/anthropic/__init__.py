"""The Anthropic dialect: channels of kind ``anthropic`` (the Messages API).

Lossy points of the translation (OpenAI chat pivot ⇄ Anthropic Messages),
each taken on purpose; anything else Anthropic cannot do is a 400 (code
``unsupported``) naming the field, never a silent drop:

* **Refused** (400 ``unsupported``): ``n`` > 1, ``logprobs`` /
  ``top_logprobs``, non-zero ``presence_penalty`` / ``frequency_penalty``, a
  ``logit_bias``, ``response_format: json_object`` (JSON without a schema:
  Anthropic has no such mode), ``audio`` and non-text ``modalities``, ``temperature`` above 1
  (Anthropic's range is 0..1: clamping would change the answer's character),
  audio input, file ids, images other than JPEG/PNG/GIF/WebP, files other
  than PDF, plain text and those images, non-function tools, a
  ``reasoning_effort`` whose thinking budget cannot fit under ``max_tokens``,
  and any pivot field this module does not know.
* **Moved**: every ``system`` / ``developer`` message becomes a block of the
  top-level ``system``, wherever it stood in the conversation; consecutive
  turns of one role are merged (tool results join the user turn after them);
  ``user`` (or ``safety_identifier``) becomes ``metadata.user_id``;
  ``parallel_tool_calls: false`` becomes ``disable_parallel_tool_use``;
  ``response_format: json_schema`` becomes ``output_config.format``
  (Anthropic's structured outputs; a schema Anthropic cannot take is its own
  400, relayed).
* **Dropped**: ``seed`` (a best-effort hint Anthropic lacks), ``stream_options``
  (Anthropic streams always carry usage), ``store``, ``metadata``,
  ``service_tier``, ``prompt_cache_key``, vLLM's ``continue_final_message`` /
  ``add_generation_prompt`` (a final assistant message is a prefill for
  Anthropic anyway: the answer continues it), message ``name``\\ s, an image's
  ``detail``, a tool's ``strict`` (Anthropic's schema adherence is not
  guaranteed), empty text parts (Anthropic refuses them), and the
  ``reasoning_content`` of earlier assistant turns (a thinking block needs
  Anthropic's signature). Tool call ids are rewritten to Anthropic's
  ``^[a-zA-Z0-9_-]+$`` (other characters become ``_``), calls and results alike.
* **reasoning_effort → thinking**: the budget table of
  ``protocols.anthropic.thinking`` (minimal 1024, low 2048, medium 8192, high
  24576, xhigh 32768 tokens, at most ``max_tokens - 1``; ``none``: no thinking).
* **Answers**: text blocks are joined into ``content``; ``thinking`` blocks
  become ``reasoning_content`` (their signatures and ``redacted_thinking``
  blocks are dropped); ``tool_use`` → ``tool_calls``; ``stop_reason``
  end_turn / stop_sequence / pause_turn → ``stop``, max_tokens /
  model_context_window_exceeded → ``length``, tool_use → ``tool_calls``,
  refusal → ``content_filter``; citations are dropped; ``created`` is 0 (the
  dialect has no clock). Usage: ``usage_mapping.from_anthropic`` (cache writes
  of both lifetimes are one class).

``from_chat`` lives in ``request``, the answers in ``answer``, errors (their
statuses and codes) in ``errors``.
"""

from __future__ import annotations

from gateway_bridge.protocols.base import INVALID_REQUEST, GatewayError
from gateway_bridge.vendors.anthropic.answer import (
    NativeStreamUsage,
    StreamReader,
    native_usage,
    stream_reader,
    to_chat,
)
from gateway_bridge.vendors.anthropic.errors import error_of, stream_error, translated_error
from gateway_bridge.vendors.anthropic.request import from_chat

PROTOCOL = "anthropic"
DEFAULT_VERSION = "2023-06-01"
models_path = "/v1/models"
_NATIVE_PATHS = {"messages": "/v1/messages", "count_tokens": "/v1/messages/count_tokens"}

__all__ = [
    "DEFAULT_VERSION",
    "PROTOCOL",
    "NativeStreamUsage",
    "StreamReader",
    "auth_headers",
    "error_of",
    "from_chat",
    "models_path",
    "native_path",
    "native_usage",
    "path",
    "stream_error",
    "stream_reader",
    "to_chat",
    "translated_error",
]


def auth_headers(secret: str, client_headers: dict[str, str]) -> list[tuple[str, str]]:
    """``x-api-key`` (none for an empty secret), ``anthropic-version`` (the
    client's, else ``DEFAULT_VERSION``) and the client's ``anthropic-beta``."""
    headers = [("x-api-key", secret)] if secret else []
    headers.append(
        ("anthropic-version", client_headers.get("anthropic-version") or DEFAULT_VERSION)
    )
    if client_headers.get("anthropic-beta"):
        headers.append(("anthropic-beta", client_headers["anthropic-beta"]))
    return headers


def _unsupported(endpoint: str) -> GatewayError:
    return GatewayError(
        INVALID_REQUEST,
        "unsupported",
        f"The '{endpoint}' endpoint is not supported by Anthropic channels.",
    )


def path(endpoint: str, upstream_model: str, stream: bool) -> str:
    """``/v1/messages`` for chat completions; Anthropic has no other pivot endpoint."""
    if endpoint != "chat.completions":
        raise _unsupported(endpoint)
    return "/v1/messages"


def native_path(endpoint: str, upstream_model: str, stream: bool, query: str) -> str:
    try:
        base = _NATIVE_PATHS[endpoint]
    except KeyError:
        raise _unsupported(endpoint) from None
    return f"{base}?{query}" if query else base
