"""Stage 1, route: method and path → protocol, endpoint, action, model in the path.

The paths the SDKs use:

- OpenAI: ``POST /v1/chat/completions``, ``/v1/completions``,
  ``/v1/embeddings``, ``/v1/responses``; ``GET /v1/models``,
  ``/v1/models/{model}``; ``GET`` and ``DELETE /v1/responses/{id}``.
- Anthropic: ``POST /v1/messages``, ``/v1/messages/count_tokens``;
  ``GET /v1/models`` and ``/v1/models/{model}`` with an ``anthropic-version``
  header.
- A key's own balance, limits and spend: ``GET /v1/dashboard/billing/subscription``,
  ``/v1/dashboard/billing/usage``, ``/v1/key`` and ``/api/v1/key``.
- Gemini: ``POST /v1beta/models/{model}:generateContent`` (and
  ``:streamGenerateContent``, ``:countTokens``, ``:embedContent``,
  ``:batchEmbedContents``); ``GET /v1beta/models``, ``/v1beta/models/{model}``.
  The same under ``/v1/`` (google-genai's default API version is ``v1``): a
  ``/v1/models/{model}:{verb}`` path with one of those verbs is Gemini's
  whatever its headers; ``GET /v1/models`` and ``/v1/models/{model}`` are
  Gemini's when the key comes as ``x-goog-api-key`` or ``?key=`` (and no
  ``anthropic-version`` header says Anthropic).

An unknown path answers (404) in the protocol its prefix implies: Gemini's
under ``/v1beta``, Anthropic's under ``/v1/messages``, OpenAI's otherwise. A
known path with the wrong method answers 405 with an ``Allow`` header.

Routes of fixed paths are built once; only a path that names a model builds
one per call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway_bridge.protocols.base import INVALID_REQUEST, NOT_FOUND, GatewayError

# What the gateway does with a routed call.
GENERATE = "generate"  # forward to a node (chat, completions, embeddings, messages, ...)
COUNT = "count"  # count a prompt's tokens, answered by the gateway itself
MODELS = "models"  # list the models the key may use
MODEL = "model"  # describe one model
ACCOUNT = "account"  # the key's own balance, limits and spend (pipeline.account)
STORED = "stored"  # a stored response of the Responses API: GET or DELETE
UNKNOWN = "unknown"  # no such path: 404


class Route(NamedTuple):
    protocol: str
    endpoint: str
    action: str
    method: str | None  # the one method the path takes (None: unknown path)
    model: str | None = None  # the model (Gemini, /v1/models/{model}) or response id in the path


_OPENAI_ENDPOINTS = {
    "/v1/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
}
_GEMINI_VERBS = {
    "generateContent": GENERATE,
    "streamGenerateContent": GENERATE,
    "countTokens": COUNT,
    "embedContent": GENERATE,
    "batchEmbedContents": GENERATE,
}

_EXACT: dict[str, Route] = {
    "/v1/messages": Route("anthropic", "messages", GENERATE, "POST"),
    "/v1/messages/": Route("anthropic", "messages", GENERATE, "POST"),
    "/v1/messages/count_tokens": Route("anthropic", "count_tokens", COUNT, "POST"),
    **{path: Route("openai", ep, GENERATE, "POST") for path, ep in _OPENAI_ENDPOINTS.items()},
    "/v1beta/models": Route("gemini", "models", MODELS, "GET"),
    # A key's balance and usage: OpenAI's old billing paths (as New API serves
    # them), and OpenRouter's key path (the router sends /api/v1/key here too).
    "/v1/dashboard/billing/subscription": Route("openai", "billing.subscription", ACCOUNT, "GET"),
    "/v1/dashboard/billing/usage": Route("openai", "billing.usage", ACCOUNT, "GET"),
    "/v1/key": Route("openai", "key", ACCOUNT, "GET"),
    "/api/v1/key": Route("openai", "key", ACCOUNT, "GET"),
}
_MODEL_LISTS = {
    "openai": Route("openai", "models", MODELS, "GET"),
    "anthropic": Route("anthropic", "models", MODELS, "GET"),
    "gemini": Route("gemini", "models", MODELS, "GET"),
}
_UNKNOWN_GEMINI = Route("gemini", "unknown", UNKNOWN, None)
_UNKNOWN_ANTHROPIC = Route("anthropic", "unknown", UNKNOWN, None)
_UNKNOWN_OPENAI = Route("openai", "unknown", UNKNOWN, None)


def _models_protocol(headers: dict[str, Any], query: bytes) -> str:
    """Whose ``GET /v1/models[/{model}]`` this is: Anthropic's with an
    ``anthropic-version`` header, Gemini's with its key in ``x-goog-api-key``
    or ``?key=``, OpenAI's otherwise."""
    if "anthropic-version" in headers:
        return "anthropic"
    if "x-goog-api-key" in headers or query.startswith(b"key=") or b"&key=" in query:
        return "gemini"
    return "openai"


_STORED_METHODS = ("GET", "DELETE")


def resolve(path: str, headers: dict[str, Any], query: bytes = b"", method: str = "") -> Route:
    """The route of a request (``headers`` lower-cased names: an
    ``anthropic-version`` header makes ``/v1/models`` Anthropic's, a Gemini
    key Gemini's; ``query`` the raw query string). A stored response takes two
    methods: its route's is the request's when it is one of them, else
    ``"GET, DELETE"`` (a 405 naming both)."""
    route = _EXACT.get(path)
    if route is not None:
        return route
    if path.startswith("/v1beta/"):
        rest = path[8:]
        if rest.startswith("models/"):
            name, sep, verb = rest[7:].partition(":")
            if not sep:
                return Route("gemini", "models", MODEL, "GET", name)
            action = _GEMINI_VERBS.get(verb)
            if action is not None:
                return Route("gemini", verb, action, "POST", name)
        return _UNKNOWN_GEMINI
    if path in ("/v1/models", "/v1/models/"):
        return _MODEL_LISTS[_models_protocol(headers, query)]
    if path.startswith("/v1/models/"):
        name, sep, verb = path[11:].rpartition(":")
        action = _GEMINI_VERBS.get(verb) if sep else None
        if action is not None:
            return Route("gemini", verb, action, "POST", name)
        return Route(_models_protocol(headers, query), "models", MODEL, "GET", path[11:])
    endpoint = _OPENAI_ENDPOINTS.get(path.rstrip("/"))
    if endpoint is not None:
        return Route("openai", endpoint, GENERATE, "POST")
    if path.startswith("/v1/responses/"):
        response_id = path[14:].rstrip("/")
        if response_id and "/" not in response_id:
            allowed = method if method in _STORED_METHODS else ", ".join(_STORED_METHODS)
            return Route("openai", "responses", STORED, allowed, response_id)
    if path == "/v1beta":
        return _UNKNOWN_GEMINI
    if path.startswith("/v1/messages/"):
        return _UNKNOWN_ANTHROPIC
    return _UNKNOWN_OPENAI


def refusal(route: Route, method: str, path: str) -> GatewayError:
    """The error for a request its route does not take: 404 for an unknown
    path, 405 (with ``Allow``) for a known path and the wrong method."""
    if route.method is None:
        return GatewayError(NOT_FOUND, "unknown_url", f"Unknown request URL: {path}")
    return GatewayError(
        INVALID_REQUEST,
        "method_not_allowed",
        f"{method} is not allowed here; use {route.method}.",
        status=405,
        headers=[("allow", route.method)],
    )
