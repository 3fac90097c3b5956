"""The Gemini (Generative Language API) dialect: ``x-goog-api-key`` auth,
``/v1beta/models/{model}:generateContent`` (``:streamGenerateContent?alt=sse``
when streamed, ``:batchEmbedContents`` for embeddings), the pivot written as a
GenerateContentRequest and Google's answers read back as OpenAI chat objects.

What a translated call loses (a Gemini client on a Gemini channel goes native
and loses none of it):

* **system messages** are gathered, in order, into the one
  ``systemInstruction``, wherever they stood in the conversation;
* **tool call ids** are not sent: a tool message's ``functionResponse`` is
  named after the call it answers, and its content becomes ``response`` (a
  JSON object as it is, anything else as ``{"result": <text>}``); a replayed
  call carries Google's ``skip_thought_signature_validator`` as its thought
  signature (Gemini 3 refuses unsigned calls; the real signature never
  reached the pivot) and earlier ``reasoning_content`` is dropped;
* **JSON schemas** (tool parameters, ``json_schema`` answers) are cut to
  Gemini's OpenAPI subset (``schema``): ``additionalProperties``, ``$schema``,
  ``strict``, non-string enums and the other keys Gemini refuses are dropped,
  local ``$ref``s inlined; a function without parameters is declared without
  ``parameters`` (Gemini refuses an empty object);
* **media**: ``image_url`` data URLs become ``inlineData``, http(s) URLs
  ``fileData`` with the MIME type guessed from the extension (none → 400);
  ``file`` parts (``file_data``) ``inlineData`` (bare base64 is taken as a PDF);
  ``input_audio`` ``inlineData`` audio/wav or audio/mp3; ``file_id`` → 400;
* **sampling**: ``max_completion_tokens``/``max_tokens`` → ``maxOutputTokens``,
  ``temperature``, ``top_p`` → ``topP``, ``stop`` → ``stopSequences``, ``seed``,
  ``n`` → ``candidateCount``, the penalties as they are, ``logprobs`` /
  ``top_logprobs`` → ``responseLogprobs`` / ``logprobs`` (the answer's
  ``logprobsResult`` comes back as ``logprobs.content``); ``logit_bias``,
  ``audio`` and non-text ``modalities`` → 400 ``unsupported``;
  ``parallel_tool_calls``, ``user``, ``metadata``, ``store`` and
  ``service_tier`` are dropped;
* **reasoning**: ``reasoning_effort`` → ``thinkingConfig.thinkingBudget`` by
  Google's table (``request.THINKING_BUDGET``: none 0 — thinking off —,
  minimal and low 1024, medium 8192, high and xhigh 24576) with
  ``includeThoughts``, so thoughts come back as ``reasoning_content``; a model
  that cannot think (or cannot stop thinking, like 2.5 Pro at 0) answers 400;
* **answers**: thought parts → ``reasoning_content``; function calls →
  ``tool_calls`` with ids ``call_<n>`` (Gemini's own ``id`` when it sends one);
  finish reasons STOP → ``stop`` (``tool_calls`` after a call), MAX_TOKENS →
  ``length``, SAFETY/RECITATION/BLOCKLIST/PROHIBITED_CONTENT/SPII →
  ``content_filter``, others → ``stop``; a blocked prompt
  (``promptFeedback.blockReason``) → empty content, ``content_filter``;
  grounding, citations, safety ratings and inline media in answers are
  dropped; ``created`` is 0 (dialects keep no clock);
* **embeddings**: token-id inputs → 400; ``dimensions`` →
  ``outputDimensionality``; the answer's floats are returned whatever
  ``encoding_format`` asked (the OpenAI SDKs read both); Gemini reports no
  embedding usage, so the gateway counts it.

Usage is read from Google's own fields (``usage_mapping.from_gemini``:
``promptTokenCount`` includes ``cachedContentTokenCount``, thoughts are output);
a stream's last ``usageMetadata`` wins. Errors: ``errors``.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode

from gateway_bridge.protocols.base import GatewayError, invalid
from gateway_bridge.vendors.gemini.answer import (
    NativeStreamUsage,
    StreamReader,
    native_usage,
    stream_reader,
    to_chat,
)
from gateway_bridge.vendors.gemini.errors import error_of, translated_error
from gateway_bridge.vendors.gemini.request import THINKING_BUDGET, from_chat, model_name

PROTOCOL = "gemini"
API = "/v1beta"
models_path = f"{API}/models"

_METHOD = re.compile(r"[A-Za-z]{1,64}")

__all__ = [
    "PROTOCOL",
    "THINKING_BUDGET",
    "NativeStreamUsage",
    "StreamReader",
    "auth_headers",
    "error_of",
    "from_chat",
    "models_path",
    "native_path",
    "native_usage",
    "path",
    "stream_reader",
    "to_chat",
    "translated_error",
]


def auth_headers(secret: str, client_headers: dict[str, str]) -> list[tuple[str, str]]:
    """The channel's key in ``x-goog-api-key`` (never in the URL)."""
    return [("x-goog-api-key", secret)] if secret else []


def _resource(upstream_model: str) -> str:
    return quote(model_name(upstream_model), safe="/-._~@")


def _unsupported_endpoint(endpoint: str) -> GatewayError:
    return invalid(
        f"The Gemini API channel has no {endpoint!r} endpoint.",
        param="model",
        code="unsupported",
    )


def path(endpoint: str, upstream_model: str, stream: bool) -> str:
    """The path of a translated call: chat → ``generateContent`` (streamed:
    ``streamGenerateContent?alt=sse``), embeddings → ``batchEmbedContents``."""
    resource = f"{API}/{_resource(upstream_model)}"
    if endpoint == "chat.completions":
        if stream:
            return f"{resource}:streamGenerateContent?alt=sse"
        return f"{resource}:generateContent"
    if endpoint == "embeddings":
        return f"{resource}:batchEmbedContents"
    raise _unsupported_endpoint(endpoint)


def native_path(endpoint: str, upstream_model: str, stream: bool, query: str) -> str:
    """The path of a native call: the client's method on the channel's model,
    with the client's query (any ``key`` in it left out: the key travels in
    a header)."""
    if not _METHOD.fullmatch(endpoint):
        raise _unsupported_endpoint(endpoint)
    out = f"{API}/{_resource(upstream_model)}:{endpoint}"
    if "key" in query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, v) for k, v in pairs if k != "key"])
    return f"{out}?{query}" if query else out
