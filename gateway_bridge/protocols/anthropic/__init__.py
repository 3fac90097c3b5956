"""The Anthropic Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``,
``GET /v1/models``) on top of the OpenAI chat pivot.

``request`` validates the client's body the way Anthropic does, ``translate``
turns it into the pivot (``content`` its messages, ``media`` its images and
documents, ``thinking`` the thinking budget ⇄ ``reasoning_effort`` table) and
the ``CallRequest`` (with what the pivot cannot carry in ``untranslatable``:
only a channel that speaks Anthropic takes such a call, as sent), ``answer``
renders pivot answers (plain and streamed) back as Anthropic messages,
``errors`` Anthropic's error body. Pure: no I/O, no Django, no clock.
"""

from gateway_bridge.protocols.anthropic.answer import MessagesResponse, render_models
from gateway_bridge.protocols.anthropic.errors import (
    ERROR_TYPES,
    OVERLOADED_STATUS,
    error_body,
    error_object,
    error_response,
)
from gateway_bridge.protocols.anthropic.request import END_USER_FIELD, FIELDS
from gateway_bridge.protocols.anthropic.translate import (
    UPSTREAM_PATH,
    count_body,
    count_model,
    count_tokens,
    count_tokens_request,
    parse_call,
    parse_messages,
)
from gateway_bridge.protocols.estimate import PREFIX_CHARS

__all__ = [
    "END_USER_FIELD",
    "ERROR_TYPES",
    "FIELDS",
    "OVERLOADED_STATUS",
    "PREFIX_CHARS",
    "UPSTREAM_PATH",
    "MessagesResponse",
    "count_body",
    "count_model",
    "count_tokens",
    "count_tokens_request",
    "error_body",
    "error_object",
    "error_response",
    "parse_call",
    "parse_messages",
    "render_models",
]
