"""The protocol adapters by name: every protocol-specific step of the
pipeline (parse a call, count tokens, list models, render an error) goes
through ``ADAPTERS[call.protocol]``, never an if/else on protocol names.
Gemini's adapter is imported on first use (most deployments never see it).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gateway_bridge.protocols import anthropic, openai


class _Adapters(dict[str, ModuleType]):
    """Protocol modules by name (others than OpenAI's and Anthropic's
    imported on first use)."""

    def __missing__(self, name: str) -> ModuleType:
        module = importlib.import_module(f"gateway_bridge.protocols.{name}")
        self[name] = module
        return module

    # Always with a default (dict.get's overloads allow none); a protocol that
    # fails to import is unknown.
    def get(self, name: str, default: ModuleType) -> ModuleType:  # type: ignore[override]
        try:
            return self[name]
        except (ImportError, KeyError):
            return default


ADAPTERS = _Adapters(openai=openai, anthropic=anthropic)
# Endpoints of a protocol whose requests an adapter package of their own
# parses: the Responses API is the OpenAI protocol (its errors, its usage
# records) with a body of its own (``protocols.responses``).
ENDPOINT_ADAPTERS = {("openai", "responses"): "responses"}


def parser(protocol: str, endpoint: str) -> ModuleType:
    """The adapter whose ``parse_call`` reads a call of ``protocol`` at ``endpoint``."""
    return ADAPTERS[ENDPOINT_ADAPTERS.get((protocol, endpoint), protocol)]


# The adapter that answers when the protocol is unknown.
DEFAULT = openai
