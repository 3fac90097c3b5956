"""The protocol adapters: each client protocol (``openai``, ``anthropic``,
``gemini``) is a package of ``request`` (validation of the client's body, with
the vendor's field-path error messages), ``translate`` (the client's request →
the node's OpenAI-protocol body and the ``CallRequest``), ``answer`` (plain
answers and stream framing back in the client's protocol) and ``errors`` (the
protocol's error body and status). What they share: ``base`` (``CallRequest``,
``GatewayError``, error kinds, ``ResponseAdapter``), ``checks`` (request checks
that do not depend on a vendor's wording) and ``estimate`` (one prompt estimate
and one affinity prefix, read from the node's body, for every protocol).

Each package is held by the type checker to the interface the pipeline uses
(``base.ProtocolAdapter``; ``base.TokenCounter`` for a protocol with a
token-count endpoint; ``base.RequestParser`` for ``responses``), below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # For the type checker only: at run time the pipeline imports the packages
    # it needs (Gemini's on first use), and these would be import cycles.
    from gateway_bridge.protocols import anthropic, gemini, openai, responses
    from gateway_bridge.protocols.base import ProtocolAdapter, RequestParser, TokenCounter

    _OPENAI: ProtocolAdapter = openai
    _ANTHROPIC: TokenCounter = anthropic
    _GEMINI: TokenCounter = gemini
    _RESPONSES: RequestParser = responses
