"""The vendor probe's two vendor-specific parts: the request for a vendor's
model list (URL and auth headers by node kind) and reading each vendor's list
shape into ``discovered_models`` entries ``{"id": ..., "max_model_len": ...}``.

* OpenAI and OpenAI-compatible vendors: ``GET <prefix>/models`` with
  ``Authorization: Bearer``; ``{"data": [{"id": ...}]}``, the context length
  as ``max_model_len`` (vLLM), ``context_length`` (OpenRouter) or
  ``context_window`` when a vendor gives one.
* Anthropic: ``GET /v1/models?limit=1000`` with ``x-api-key`` and
  ``anthropic-version``; ``{"data": [{"id": ..., "max_input_tokens": ...}]}``.
* Gemini: ``GET /v1beta/models?pageSize=1000`` with ``x-goog-api-key`` (never
  the key in the query, where logs would keep it); ``{"models": [{"name":
  "models/<id>", "inputTokenLimit": ...}]}``.

``<prefix>`` is the node's API path, or the kind's usual one. No database and
no network here; ``inference_node.health`` sends the request.
"""

from __future__ import annotations

import json

from inference_node.models import NodeKind
from inference_node.presets import ANTHROPIC_VERSION, api_prefix

MAX_DISCOVERED_MODELS = 200
_QUERY: dict[str, str] = {NodeKind.ANTHROPIC: "?limit=1000", NodeKind.GEMINI: "?pageSize=1000"}
_LENGTH_KEYS: dict[str, tuple[str, ...]] = {
    NodeKind.ANTHROPIC: ("max_input_tokens",),
    NodeKind.GEMINI: ("inputTokenLimit",),
}
_OPENAI_LENGTH_KEYS = ("max_model_len", "context_length", "context_window")


def auth_headers(kind: str, secret: str) -> dict[str, str]:
    if not secret:
        return {}
    if kind == NodeKind.ANTHROPIC:
        return {"x-api-key": secret, "anthropic-version": ANTHROPIC_VERSION}
    if kind == NodeKind.GEMINI:
        return {"x-goog-api-key": secret}
    return {"Authorization": f"Bearer {secret}"}


def models_request(
    kind: str, base_url: str, api_path: str, secret: str
) -> tuple[str, str, dict[str, str]]:
    """(URL, the path to name in messages, headers) of the model-list request."""
    path = f"{api_prefix(kind, api_path)}/models"
    url = f"{base_url.rstrip('/')}{path}{_QUERY.get(kind, '')}"
    return url, path, auth_headers(kind, secret)


def _length(item: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = item.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def parse_models(kind: str, body: bytes, path: str) -> tuple[dict, ...]:
    """The vendor's model list; ValueError (naming ``path``, safe to show) when
    the answer is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        raise ValueError(f"{path} did not answer JSON") from None
    list_key = "models" if kind == NodeKind.GEMINI else "data"
    items = data.get(list_key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"{path} answered no model list")
    keys = _LENGTH_KEYS.get(kind, _OPENAI_LENGTH_KEYS)
    out = []
    for item in items[:MAX_DISCOVERED_MODELS]:
        if not isinstance(item, dict):
            continue
        model_id = item.get("name") if kind == NodeKind.GEMINI else item.get("id")
        if not isinstance(model_id, str) or not model_id:
            continue
        if kind == NodeKind.GEMINI:
            model_id = model_id.removeprefix("models/")
        out.append({"id": model_id[:200], "max_model_len": _length(item, keys)})
    return tuple(out)
