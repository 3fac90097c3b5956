"""The OpenAI protocol: chat completions, completions, embeddings and the model list.

``request`` validates the client's body the way OpenAI does (its messages,
``param`` and ``code``; a chat's messages and tools in ``messages``),
``translate`` turns it into the node's body and the ``CallRequest`` (only
known fields reach the node), ``answer`` renders the
node's answers (plain and streamed) with the public model name and the billed
usage, ``errors`` OpenAI's error body.
"""

from gateway_bridge.protocols.estimate import PREFIX_CHARS, chat_prompt_estimate, count_text
from gateway_bridge.protocols.openai.answer import (
    DONE,
    OpenAIResponse,
    render_models,
    usage_body,
)
from gateway_bridge.protocols.openai.errors import (
    ERROR_TYPES,
    error_body,
    error_object,
    error_response,
)
from gateway_bridge.protocols.openai.messages import MEDIA_PARTS, ROLES
from gateway_bridge.protocols.openai.request import (
    CHAT_FIELDS,
    COMPLETION_FIELDS,
    DEPRECATED,
    EMBEDDING_FIELDS,
    END_USER_FIELD,
    IGNORED,
    MAX_N,
    MAX_STOP,
)
from gateway_bridge.protocols.openai.translate import (
    PROTOCOL,
    parse_call,
    parse_chat,
    parse_completion,
    parse_embeddings,
)

__all__ = [
    "CHAT_FIELDS",
    "COMPLETION_FIELDS",
    "DEPRECATED",
    "DONE",
    "EMBEDDING_FIELDS",
    "END_USER_FIELD",
    "ERROR_TYPES",
    "IGNORED",
    "MAX_N",
    "MAX_STOP",
    "MEDIA_PARTS",
    "PREFIX_CHARS",
    "PROTOCOL",
    "ROLES",
    "OpenAIResponse",
    "chat_prompt_estimate",
    "count_text",
    "error_body",
    "error_object",
    "error_response",
    "parse_call",
    "parse_chat",
    "parse_completion",
    "parse_embeddings",
    "render_models",
    "usage_body",
]
