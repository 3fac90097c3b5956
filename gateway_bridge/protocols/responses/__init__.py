"""The OpenAI Responses API (``POST /v1/responses``) on top of the chat pivot.

``request`` checks the body's fields in OpenAI's wording (tools, tool choice,
reasoning, text format), ``items`` turns ``input`` items (messages, function
calls and their outputs) into pivot messages, ``translate`` builds the pivot
body and the ``CallRequest`` (recorded as the OpenAI protocol's
``responses`` endpoint, sent here by ``pipeline.adapters.ENDPOINT_ADAPTERS``;
its errors are OpenAI's, ``protocols.openai.errors``), ``answer`` renders
the node's answers as a ``response`` object or its typed stream events.
Stored responses (``store``, ``previous_response_id``, ``GET`` / ``DELETE
/v1/responses/{id}``) are I/O: ``pipeline.stored``. Pure: no I/O, no
Django, no clock.
"""

from gateway_bridge.protocols.responses.answer import ResponsesResponse
from gateway_bridge.protocols.responses.request import END_USER_FIELD
from gateway_bridge.protocols.responses.translate import (
    ENDPOINT,
    adapter_of,
    continue_from,
    conversation,
    parse_call,
    parse_responses,
)

__all__ = [
    "ENDPOINT",
    "END_USER_FIELD",
    "ResponsesResponse",
    "adapter_of",
    "continue_from",
    "conversation",
    "parse_call",
    "parse_responses",
]
