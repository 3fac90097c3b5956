"""The Gemini API (``/v1beta/models/{model}:generateContent``,
``:streamGenerateContent``, ``:countTokens``, ``:embedContent``,
``:batchEmbedContents`` and ``GET /v1beta/models``) on top of the nodes' OpenAI
protocol.

``request`` validates the client's body the way Google's API does (proto JSON),
``translate`` turns it into the node's OpenAI chat or embeddings body and the
``CallRequest``, ``answer`` renders the node's answers (plain and streamed)
back, ``errors`` Google's error body. Pure: no I/O, no Django, no clock.
"""

from gateway_bridge.protocols.gemini.answer import EmbedResponse, GenerateResponse, render_models
from gateway_bridge.protocols.gemini.errors import STATUS, error_body, error_object, error_response
from gateway_bridge.protocols.gemini.request import END_USER_FIELD, MAX_CANDIDATES, MAX_STOP
from gateway_bridge.protocols.gemini.translate import (
    CHAT_PATH,
    EMBED_PATH,
    count_body,
    count_model,
    count_tokens,
    parse_batch_embed,
    parse_call,
    parse_embed,
    parse_generate,
)

__all__ = [
    "CHAT_PATH",
    "EMBED_PATH",
    "END_USER_FIELD",
    "MAX_CANDIDATES",
    "MAX_STOP",
    "STATUS",
    "EmbedResponse",
    "GenerateResponse",
    "count_body",
    "count_model",
    "count_tokens",
    "error_body",
    "error_object",
    "error_response",
    "parse_batch_embed",
    "parse_call",
    "parse_embed",
    "parse_generate",
    "render_models",
]
