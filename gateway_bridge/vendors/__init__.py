"""Vendor dialects: how the gateway talks to a channel of each kind.

A channel (``inference_node.models.Node``) has a kind; each kind speaks one
wire protocol, and that protocol's dialect module here knows how to call it:

    kind                 dialect     auth header
    openai_compatible    openai      Authorization: Bearer (vLLM, SGLang, DeepSeek, Kimi, ...)
    openai               openai      Authorization: Bearer
    anthropic            anthropic   x-api-key + anthropic-version (+ anthropic-beta passed on)
    gemini               gemini      x-goog-api-key

Two ways through a dialect (``gateway_bridge.pipeline.forward`` chooses):

* **native** — the client's protocol is the channel's: the client's body goes
  as it was sent (only the model id rewritten, ``pipeline.native``), the answer
  and its stream come back byte for byte, and usage is read from the vendor's
  own fields (``native_usage`` / ``NativeStreamUsage``);
* **translated** — the client's request was parsed into the OpenAI chat pivot
  (``CallRequest.body``); ``from_chat`` writes it in the channel's protocol,
  ``to_chat`` and ``StreamReader`` turn the answer back into OpenAI chat
  objects, which the client protocol's response adapter renders as before.

Every dialect module exposes the same names (``base.Dialect``, which the type
checker holds each module to). Pure: no I/O, no Django, no clock.
"""

from __future__ import annotations

from gateway_bridge.vendors import anthropic, gemini, openai
from gateway_bridge.vendors.base import Dialect

KIND_DIALECT = {
    "openai_compatible": "openai",
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
}

# Each module assigned to the Protocol type: the type checker holds every
# dialect to ``Dialect`` (a missing name or a wrong signature is an error).
_OPENAI: Dialect = openai
_ANTHROPIC: Dialect = anthropic
_GEMINI: Dialect = gemini

DIALECTS: dict[str, Dialect] = {"openai": _OPENAI, "anthropic": _ANTHROPIC, "gemini": _GEMINI}

# The endpoints of its own protocol a channel kind takes as the client sent
# them (None: every one). A compatible server gets the pivot; the OpenAI API
# takes the Responses API as sent (the pivot would lose what only OpenAI runs:
# the client-run tools, encrypted reasoning).
_AS_SENT: dict[str, frozenset[str] | None] = {
    "openai_compatible": frozenset(),
    "openai": frozenset({"responses"}),
    "anthropic": None,
    "gemini": None,
}


def dialect_for(kind: str) -> Dialect:
    """The dialect module of a channel kind (``openai`` for an unknown one)."""
    return DIALECTS[KIND_DIALECT.get(kind, "openai")]


def takes_as_sent(kind: str, protocol: str, endpoint: str) -> bool:
    """Whether a channel of ``kind`` takes a call of ``protocol``'s ``endpoint``
    as the client sent it (native), rather than the pivot translated."""
    if protocol != dialect_for(kind).PROTOCOL:
        return False
    endpoints = _AS_SENT.get(kind, frozenset())
    return endpoints is None or endpoint in endpoints
