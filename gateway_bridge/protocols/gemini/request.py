"""Validation of Gemini requests, the way Google's API validates them.

Proto JSON: camelCase and snake_case field names are both accepted (``fields``
returns camelCase keys), an unknown field is ``Invalid JSON payload received.
Unknown name "x"``, a wrong type ``Invalid value at 'path' (TYPE_STRING)``, and
error paths are spelled in snake_case. What the OpenAI pivot cannot carry is
not refused here: ``translate`` records it (``CallRequest.untranslatable``).

A generateContent request is read tolerantly (``tolerant``): a field this
module does not know, at any depth (the API grows), is collected instead of
refused. A Gemini channel gets it as sent; a translation leaves it out and
names it (``CallRequest.dropped``, the ``x-gateway-dropped`` header).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from gateway_bridge.protocols.base import GatewayError, invalid

# Cost attribution: the body field naming the call's end user (the path;
# empty: none). Gemini has no end-user field: only the ``x-gateway-end-user`` header names one.
END_USER_FIELD: tuple[str, ...] = ()

MAX_CANDIDATES = 8
MAX_STOP = 5
MAX_LOGPROBS = 20  # generationConfig.logprobs: top candidates per token
_INT_STRING = re.compile(r"-?\d{1,18}")  # proto JSON takes integers as strings too
_UPPER = re.compile(r"(?<!^)([A-Z])")

REQUEST = {
    "model",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "safetySettings",
    "generationConfig",
    "cachedContent",
    "labels",
}
CONTENT = {"role", "parts"}
PART = {
    "text",
    "thought",
    "thoughtSignature",
    "functionCall",
    "functionResponse",
    "inlineData",
    "fileData",
    "executableCode",
    "codeExecutionResult",
    "videoMetadata",
    "partMetadata",
    "mediaResolution",
}
TOOL = {
    "functionDeclarations",
    "googleSearch",
    "googleSearchRetrieval",
    "codeExecution",
    "urlContext",
    "retrieval",
    "computerUse",
    "fileSearch",
    "googleMaps",
    "enterpriseWebSearch",
}
DECLARATION = {
    "name",
    "description",
    "parameters",
    "parametersJsonSchema",
    "response",
    "responseJsonSchema",
    "behavior",
}
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
THINKING = {"includeThoughts", "thinkingBudget", "thinkingLevel"}
EMBED = {"model", "content", "taskType", "title", "outputDimensionality"}
_TASK_TYPES = {
    "TASK_TYPE_UNSPECIFIED",
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
}
MODES = {"MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"}
SCHEMA_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$")


def camel(name: str) -> str:
    """A field name in its camelCase spelling (proto JSON takes snake_case too)."""
    if "_" not in name:
        return name
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def snake(name: str) -> str:
    return _UPPER.sub(r"_\1", name).lower()


def bad(path: str, problem: str, code: str = "invalid_request") -> GatewayError:
    return invalid(f"* {path}: {problem}", param=path or None, code=code)


def unsupported(path: str, what: str) -> GatewayError:
    return invalid(
        f"{path}: {what} not supported by this gateway.",
        param=path,
        code="unsupported",
    )


def join(path: str, name: str) -> str:
    return f"{path}.{snake(name)}" if path else snake(name)


# The unknown fields of the request being read tolerantly (None: refuse them).
_UNKNOWN: ContextVar[list[str] | None] = ContextVar("gemini_unknown_fields", default=None)


@contextlib.contextmanager
def tolerant() -> Iterator[list[str]]:
    """Within: ``fields`` collects the paths of unknown fields into the list
    yielded and leaves them out, instead of refusing them."""
    found: list[str] = []
    token = _UNKNOWN.set(found)
    try:
        yield found
    finally:
        _UNKNOWN.reset(token)


def fields(value: object, path: str, known: set[str]) -> dict[str, Any]:
    """A proto JSON message: a dict whose keys (either spelling) are known;
    returned with camelCase keys (an unknown one is refused, or collected and
    left out within ``tolerant``)."""
    if not isinstance(value, dict):
        where = f" at '{path}'" if path else ""
        raise invalid(
            f"Invalid JSON payload received. Expected an object{where}.",
            param=path or None,
            code="invalid_type",
        )
    out = {}
    for key, item in value.items():
        name = camel(key) if isinstance(key, str) else key
        if name not in known:
            collected = _UNKNOWN.get()
            if collected is not None:
                collected.append(join(path, str(key)))
                continue
            where = f" at '{path}'" if path else ""
            raise invalid(
                f'Invalid JSON payload received. Unknown name "{key}"{where}: Cannot find field.',
                param=join(path, str(key)),
                code="unknown_field",
            )
        if name in out:
            raise bad(join(path, name), "the field is given twice (camelCase and snake_case)")
        out[name] = item
    return out


def array(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(
            f"Invalid JSON payload received. Expected a list at '{path}'.",
            param=path,
            code="invalid_type",
        )
    return value


def _type_error(path: str, proto_type: str, value: object) -> GatewayError:
    return invalid(
        f"Invalid value at '{path}' ({proto_type}), {_shown(value)}",
        param=path,
        code="invalid_type",
    )


def string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _type_error(path, "TYPE_STRING", value)
    return value


def boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise _type_error(path, "TYPE_BOOL", value)
    return value


def integer(value: object, path: str, low: int | None = None, high: int | None = None) -> int:
    # proto JSON also takes integers as strings ("25")
    if isinstance(value, str) and _INT_STRING.fullmatch(value):
        value = int(value)
    if type(value) is not int:
        raise invalid(
            f"Invalid value at '{path}' (TYPE_INT32), {_shown(value)}",
            param=path,
            code="invalid_type",
        )
    _range(path, value, low, high)
    return value


def number(value: object, path: str, low: float | None, high: float | None) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise invalid(
            f"Invalid value at '{path}' (TYPE_FLOAT), {_shown(value)}",
            param=path,
            code="invalid_type",
        )
    _range(path, value, low, high)
    return value


def _range(path: str, value: float, low: float | None, high: float | None) -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise bad(path, f"{value} is out of range: it must be in [{lo}, {hi}].")


def _shown(value: object) -> str:
    try:
        return json.dumps(value)[:60]
    except (TypeError, ValueError):
        return "(unreadable)"


def enum(value: object, path: str, choices: set[str]) -> str:
    text = string(value, path)
    if text not in choices:
        raise invalid(
            f"Invalid value at '{path}', \"{text}\": expected one of {', '.join(sorted(choices))}.",
            param=path,
            code="invalid_value",
        )
    return text


def part_text(part: dict[str, Any], path: str) -> str | None:
    if "text" not in part:
        return None
    return string(part["text"], f"{path}.text")


def call_args(value: object, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad(path, "args must be an object (a JSON struct)")
    return value


def missing_responses(index: int, open_calls: list[tuple[str, str]]) -> GatewayError:
    names = ", ".join(name for _, name in open_calls)
    return bad(
        f"contents[{index}]",
        f"function calls without responses: {names}. Each function call turn must be followed "
        "by a turn with a function response for every call.",
    )


def check_safety(value: object) -> None:
    for i, setting in enumerate(array(value, "safety_settings")):
        spath = f"safety_settings[{i}]"
        setting = fields(setting, spath, {"category", "threshold", "method"})
        for key in ("category", "threshold"):
            if key not in setting:
                raise bad(f"{spath}.{key}", f"{key} is required.")
            string(setting[key], f"{spath}.{key}")


def model_name(path_model: str | None, body_model: object = None) -> str:
    name = path_model
    if not name and isinstance(body_model, str):
        name = body_model
    name = (name or "").removeprefix("models/")
    if not name:
        raise bad("model", "model is not specified.")
    return name


def embed_text(request: dict[str, Any], path: str) -> str:
    if "content" not in request:
        raise bad(f"{path}.content", "content is not specified")
    content = fields(request["content"], f"{path}.content", CONTENT)
    parts = array(content.get("parts", []), f"{path}.content.parts")
    texts = []
    for i, part in enumerate(parts):
        ppath = f"{path}.content.parts[{i}]"
        part = fields(part, ppath, PART)
        text = part_text(part, ppath)
        if text is None:
            raise unsupported(ppath, "embedding parts other than text are")
        texts.append(text)
    text = " ".join(texts)
    if not text.strip():
        raise bad(f"{path}.content", "the text to embed is empty.")
    return text


def embed_options(request: dict[str, Any], path: str) -> int | None:
    if request.get("taskType") is not None:
        enum(request["taskType"], f"{path}.task_type", _TASK_TYPES)
    if request.get("title") is not None:
        string(request["title"], f"{path}.title")
    if request.get("outputDimensionality") is not None:
        return integer(request["outputDimensionality"], f"{path}.output_dimensionality", 1)
    return None
