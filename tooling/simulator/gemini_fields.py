"""Gemini proto JSON: field spellings, typed values, schemas, ``generationConfig``.

Google's JSON mapping takes camelCase and snake_case names alike (``fields``
returns camelCase keys), refuses an unknown name with ``Invalid JSON payload
received. Unknown name "x": Cannot find field.``, a wrong type with ``Invalid
value at 'path' (TYPE_...)``, and reports other problems as ``*
GenerateContentRequest.<path>: <problem>`` (all 400 ``INVALID_ARGUMENT``).
``generation_config`` reads ``maxOutputTokens``, ``stopSequences`` (at most 5),
``candidateCount`` (at most 8), ``temperature``, ``topP``, ``seed``,
``responseMimeType`` / ``responseSchema`` / ``responseJsonSchema`` and
``thinkingConfig`` (``thinkingBudget``: 0 off, -1 dynamic; ``thinkingLevel``
means dynamic; ``includeThoughts``); the other known fields are accepted and
ignored.
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

from .protocol import ApiError

GENERATION = {
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "enableEnhancedCivicAnswers",
    "thinkingConfig",
    "mediaResolution",
    "speechConfig",
    "imageConfig",
}
MAX_CANDIDATES = 8
MAX_STOP = 5
MAX_LOGPROBS = 20
_MIME = ("text/plain", "application/json", "text/x.enum")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def bad(path: str, problem: str) -> ApiError:
    return ApiError(400, f"* GenerateContentRequest.{path}: {problem}\n", param=path)


def fields(value: object, path: str, known: set[str] | None = None) -> dict:
    """A proto message with camelCase keys; unknown names refused when ``known``."""
    if not isinstance(value, dict):
        where = f" at '{path}'" if path else ""
        raise ApiError(400, f"Invalid JSON payload received. Expected an object{where}.")
    out = {}
    for key, item in value.items():
        name = camel(key)
        if known is not None and name not in known:
            where = f" at '{path}'" if path else ""
            raise ApiError(
                400,
                f'Invalid JSON payload received. Unknown name "{key}"{where}: Cannot find field.',
            )
        out[name] = item
    return out


def array(value: object, path: str) -> list:
    if not isinstance(value, list):
        raise ApiError(400, f"Invalid JSON payload received. Expected a list at '{path}'.")
    return value


T = TypeVar("T")


def typed(value: object, path: str, kind: type[T], proto: str) -> T:
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise ApiError(400, f"Invalid value at '{path}' ({proto}), {json.dumps(value)[:60]}")
    return value


def integer(value: object, path: str, low: int | None = None) -> int:
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        value = int(value)  # proto JSON takes integers as strings too
    value = typed(value, path, int, "TYPE_INT32")
    if low is not None and value < low:
        raise bad(path, f"{value} is out of range: it must be at least {low}.")
    return value


def compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def schema(value: object) -> object:
    """Gemini's OpenAPI schema subset → JSON schema (lower-case types, ``nullable``)."""
    if isinstance(value, list):
        return [schema(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict = {}
    for key, item in value.items():
        name = camel(key)
        if name == "type" and isinstance(item, str):
            out["type"] = item.lower()
        elif name in ("properties",) and isinstance(item, dict):
            out[name] = {k: schema(v) for k, v in item.items()}
        elif name in ("items", "anyOf"):
            out[name] = schema(item)
        elif name not in ("nullable", "propertyOrdering", "example"):
            out[name] = item
    if value.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _stop_sequences(config: dict, path: str) -> tuple[str, ...]:
    stops = array(config.get("stopSequences") or [], f"{path}.stop_sequences")
    if len(stops) > MAX_STOP:
        raise bad(f"{path}.stop_sequences", f"at most {MAX_STOP} stop sequences are allowed.")
    return tuple(
        typed(s, f"{path}.stop_sequences[{i}]", str, "TYPE_STRING") for i, s in enumerate(stops)
    )


def _check_sampling(config: dict, path: str) -> None:
    """``temperature`` and ``topP`` in range (the simulator's text ignores them)."""
    for name, high in (("temperature", 2), ("topP", 1)):
        value = config.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high
        ):
            raise bad(f"{path}.{name.lower()}", f"must be a number in [0, {high}].")


def _logprobs(config: dict, path: str) -> int | None:
    """How many top alternatives each token's logprobs list (None: no logprobs)."""
    out = None
    if config.get("responseLogprobs") is not None:
        wanted = typed(config["responseLogprobs"], f"{path}.response_logprobs", bool, "TYPE_BOOL")
        out = 0 if wanted else None
    if config.get("logprobs") is not None:
        top = integer(config["logprobs"], f"{path}.logprobs", 0)
        if top > MAX_LOGPROBS:
            raise bad(f"{path}.logprobs", f"must be in [0, {MAX_LOGPROBS}].")
        if out is None:
            raise bad(f"{path}.logprobs", "logprobs needs response_logprobs set to true.")
        out = top
    return out


def _thinking(config: dict, path: str) -> tuple[int, bool]:
    """(thinking budget, whether thoughts are shown) of ``thinkingConfig``."""
    budget, thoughts = 0, False
    if config.get("thinkingConfig") is not None:
        tpath = f"{path}.thinking_config"
        thinking = fields(
            config["thinkingConfig"], tpath, {"includeThoughts", "thinkingBudget", "thinkingLevel"}
        )
        if thinking.get("thinkingBudget") is not None:
            budget = integer(thinking["thinkingBudget"], f"{tpath}.thinking_budget", -1)
        elif thinking.get("thinkingLevel") is not None:
            budget = -1
        if thinking.get("includeThoughts") is not None:
            include = thinking["includeThoughts"]
            thoughts = typed(include, f"{tpath}.include_thoughts", bool, "TYPE_BOOL")
    return budget, thoughts


def generation_config(value: object) -> dict:
    config = fields(value, "generation_config", GENERATION)
    path = "generation_config"
    out: dict = {
        "max": None,
        "stop": (),
        "n": 1,
        "seed": None,
        "mime": "text/plain",
        "schema": None,
        "budget": 0,
        "thoughts": False,
        "logprobs": None,
    }
    if config.get("maxOutputTokens") is not None:
        out["max"] = integer(config["maxOutputTokens"], f"{path}.max_output_tokens", 1)
    out["stop"] = _stop_sequences(config, path)
    if config.get("candidateCount") is not None:
        out["n"] = integer(config["candidateCount"], f"{path}.candidate_count", 1)
        if out["n"] > MAX_CANDIDATES:
            raise bad(f"{path}.candidate_count", f"must be at most {MAX_CANDIDATES}.")
    _check_sampling(config, path)
    if config.get("seed") is not None:
        out["seed"] = integer(config["seed"], f"{path}.seed")
    mime = config.get("responseMimeType") or "text/plain"
    if mime not in _MIME:
        raise bad(f"{path}.response_mime_type", f"allowed mimetypes are {', '.join(_MIME)}.")
    out["mime"] = mime
    out["logprobs"] = _logprobs(config, path)
    if isinstance(config.get("responseJsonSchema"), dict):
        out["schema"] = config["responseJsonSchema"]
    elif isinstance(config.get("responseSchema"), dict):
        out["schema"] = schema(config["responseSchema"])
    out["budget"], out["thoughts"] = _thinking(config, path)
    return out
