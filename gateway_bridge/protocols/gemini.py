"""The Gemini API (``/v1beta/models/{model}:generateContent``,
``:streamGenerateContent``, ``:countTokens``, ``:embedContent``,
``:batchEmbedContents`` and ``GET /v1beta/models``) on top of the nodes' OpenAI
protocol.

Requests are validated the way Google's API validates them (proto JSON:
camelCase and snake_case field names are both accepted, an unknown field is
``Invalid JSON payload received. Unknown name "x"``) and translated to an
OpenAI chat or embeddings body; answers, plain or streamed, are rendered back
chunk by chunk. Pure: no I/O, no Django, no clock.

Decisions, where Gemini and a text-only OpenAI node do not meet:

* ``systemInstruction`` becomes a leading system message; ``user`` turns are
  user messages, ``model`` turns assistant messages. A ``functionCall`` part is
  an assistant tool call with a gateway id (``call_<turn>_<n>``, or the part's
  own ``id``), and a ``functionResponse`` part answers the earliest open call
  of that name (or its ``id``) as a tool message whose content is the
  response's compact JSON.
* ``thought`` parts of earlier model turns are dropped (as Gemini does with
  thoughts it gets back); ``thinkingConfig`` is validated and ignored: the
  nodes expose no thoughts, so ``thoughtsTokenCount`` is absent.
* ``inlineData``, ``fileData``, ``executableCode`` and
  ``codeExecutionResult`` parts, the built-in tools (``googleSearch``,
  ``codeExecution``, ``urlContext``, ...) and ``cachedContent`` are refused
  with a 400 that says they are not supported: the nodes take text only and
  cache prefixes on their own.
* ``functionDeclarations[].parameters`` (Gemini's OpenAPI subset: upper-case
  types, ``nullable``, ``propertyOrdering``) become JSON schema;
  ``parametersJsonSchema`` is passed as it is. ``toolConfig`` modes map to
  ``tool_choice``: ``AUTO``/``VALIDATED`` → ``auto``, ``NONE`` → ``none``,
  ``ANY`` → ``required`` (or the one named function when
  ``allowedFunctionNames`` names exactly one).
* ``generationConfig``: ``maxOutputTokens``, ``temperature``, ``topP``,
  ``candidateCount``, ``stopSequences``, ``seed``, ``presencePenalty`` and
  ``frequencyPenalty`` are forwarded; ``responseMimeType: application/json``
  (with ``responseSchema`` / ``responseJsonSchema``) becomes
  ``response_format``; ``topK`` and ``safetySettings`` are validated and not
  forwarded.
* Finish reasons: ``stop`` and ``tool_calls`` → ``STOP``, ``length`` →
  ``MAX_TOKENS``, ``content_filter`` → ``SAFETY``.
* Streams (``alt=sse`` or the JSON-array form without it): a chunk per text
  delta; function calls are sent whole (Gemini never streams partial
  arguments) in the last chunk, which also carries ``finishReason`` and the
  billed ``usageMetadata``.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs

from gateway_bridge.protocols import estimate as openai
from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    INTERNAL,
    INVALID_REQUEST,
    NOT_FOUND,
    OVERLOADED,
    PAYMENT_REQUIRED,
    PERMISSION,
    RATE_LIMIT,
    REQUEST_TOO_LARGE,
    TIMEOUT,
    UNSUPPORTED_MEDIA,
    UPSTREAM,
    CallRequest,
    GatewayError,
    ModelInfo,
    ResponseAdapter,
    dumps,
    invalid,
    sse,
)
from gateway_bridge.usage_mapping import TokenUsage, to_gemini

CHAT_PATH = "/v1/chat/completions"
EMBED_PATH = "/v1/embeddings"
MAX_CANDIDATES = 8
MAX_STOP = 5

_STATUS = {
    INVALID_REQUEST: "INVALID_ARGUMENT",
    UNSUPPORTED_MEDIA: "INVALID_ARGUMENT",
    REQUEST_TOO_LARGE: "INVALID_ARGUMENT",
    AUTHENTICATION: "UNAUTHENTICATED",
    PAYMENT_REQUIRED: "RESOURCE_EXHAUSTED",
    PERMISSION: "PERMISSION_DENIED",
    NOT_FOUND: "NOT_FOUND",
    RATE_LIMIT: "RESOURCE_EXHAUSTED",
    INTERNAL: "INTERNAL",
    UPSTREAM: "INTERNAL",
    OVERLOADED: "UNAVAILABLE",
    TIMEOUT: "DEADLINE_EXCEEDED",
}

# Known fields, by message, in their camelCase spelling (snake_case is accepted too).
_REQUEST = {
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
_CONTENT = {"role", "parts"}
_PART = {
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
_UNSUPPORTED_PARTS = {
    "inlineData": "inline data (images, audio, documents) is",
    "fileData": "file data is",
    "executableCode": "executable code parts are",
    "codeExecutionResult": "code execution results are",
}
_TOOL = {
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
_DECLARATION = {
    "name",
    "description",
    "parameters",
    "parametersJsonSchema",
    "response",
    "responseJsonSchema",
    "behavior",
}
_GENERATION = {
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
_THINKING = {"includeThoughts", "thinkingBudget", "thinkingLevel"}
_EMBED = {"model", "content", "taskType", "title", "outputDimensionality"}
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
_MODES = {"MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"}
_SCHEMA_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$")
_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_FINISH = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}


# --------------------------------------------------------------------------- validation


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _bad(path: str, problem: str, code: str = "invalid_request") -> GatewayError:
    return invalid(f"* {path}: {problem}", param=path or None, code=code)


def _unsupported(path: str, what: str) -> GatewayError:
    return invalid(
        f"{path}: {what} not supported by this gateway (its models take text only).",
        param=path,
        code="unsupported",
    )


def _join(path: str, name: str) -> str:
    return f"{path}.{_snake(name)}" if path else _snake(name)


def _fields(value: object, path: str, known: set[str]) -> dict:
    """A proto JSON message: a dict whose keys (either spelling) are known;
    returned with camelCase keys."""
    if not isinstance(value, dict):
        where = f" at '{path}'" if path else ""
        raise invalid(
            f"Invalid JSON payload received. Expected an object{where}.",
            param=path or None,
            code="invalid_type",
        )
    out = {}
    for key, item in value.items():
        name = _camel(key) if isinstance(key, str) else key
        if name not in known:
            where = f" at '{path}'" if path else ""
            raise invalid(
                f'Invalid JSON payload received. Unknown name "{key}"{where}: Cannot find field.',
                param=_join(path, str(key)),
                code="unknown_field",
            )
        if name in out:
            raise _bad(_join(path, name), "the field is given twice (camelCase and snake_case)")
        out[name] = item
    return out


def _list(value: object, path: str) -> list:
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


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _type_error(path, "TYPE_STRING", value)
    return value


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise _type_error(path, "TYPE_BOOL", value)
    return value


def _int(value: object, path: str, low: int | None = None, high: int | None = None) -> int:
    # proto JSON also takes integers as strings ("25")
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        value = int(value)
    if type(value) is not int:
        raise invalid(
            f"Invalid value at '{path}' (TYPE_INT32), {_shown(value)}",
            param=path,
            code="invalid_type",
        )
    _range(path, value, low, high)
    return value


def _number(value: object, path: str, low: float | None, high: float | None) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise invalid(
            f"Invalid value at '{path}' (TYPE_FLOAT), {_shown(value)}",
            param=path,
            code="invalid_type",
        )
    _range(path, value, low, high)
    return value


def _range(path: str, value, low, high) -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise _bad(path, f"{value} is out of range: it must be in [{lo}, {hi}].")


def _shown(value: object) -> str:
    try:
        return json.dumps(value)[:60]
    except (TypeError, ValueError):
        return "(unreadable)"


def _enum(value: object, path: str, choices: set[str]) -> str:
    text = _string(value, path)
    if text not in choices:
        raise invalid(
            f"Invalid value at '{path}', \"{text}\": expected one of {', '.join(sorted(choices))}.",
            param=path,
            code="invalid_value",
        )
    return text


# --------------------------------------------------------------------------- contents


def _part_text(part: dict, path: str) -> str | None:
    if "text" not in part:
        return None
    return _string(part["text"], f"{path}.text")


def _args(value: object, path: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(path, "args must be an object (a JSON struct)")
    return value


class _Turns:
    """Gemini contents → OpenAI messages, pairing function calls with responses."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.open: list[tuple[str, str]] = []  # (call id, function name) not answered yet

    def add(self, index: int, content: object) -> None:
        path = f"contents[{index}]"
        content = _fields(content, path, _CONTENT)
        role = content.get("role") or "user"
        role = _string(role, f"{path}.role")
        if role not in ("user", "model", "function", "tool"):
            raise _bad(f"{path}.role", f'Please use a valid role: user, model (got "{role}").')
        parts = _list(content.get("parts", []), f"{path}.parts")
        if not parts:
            raise _bad(f"{path}.parts", "contents.parts must not be empty.")
        if role == "model":
            self._model(index, parts)
        else:
            self._user(index, parts)

    def _parts(self, index: int, parts: list):
        for i, part in enumerate(parts):
            ppath = f"contents[{index}].parts[{i}]"
            part = _fields(part, ppath, _PART)
            for name, what in _UNSUPPORTED_PARTS.items():
                if name in part:
                    raise _unsupported(_join(ppath, name), what)
            yield ppath, part

    def _model(self, index: int, parts: list) -> None:
        if self.open:
            raise _missing_responses(index, self.open)
        texts: list[str] = []
        calls: list[dict] = []
        for ppath, part in self._parts(index, parts):
            if part.get("thought") is not None and _bool(part["thought"], f"{ppath}.thought"):
                continue  # earlier thoughts are not sent back to the model
            text = _part_text(part, ppath)
            if text:
                texts.append(text)
            if part.get("functionCall") is not None:
                fpath = f"{ppath}.function_call"
                call = _fields(part["functionCall"], fpath, {"id", "name", "args"})
                if "name" not in call:
                    raise _bad(f"{fpath}.name", "Name cannot be empty.")
                name = _string(call["name"], f"{fpath}.name")
                if not _NAME.match(name):
                    raise _bad(f"{fpath}.name", f"Invalid function name: {name!r}.")
                own = call.get("id")
                call_id = _ID_CHARS.sub("", _string(own, f"{fpath}.id")) if own else ""
                call_id = call_id or f"call_{index}_{len(calls)}"
                arguments = dumps(_args(call.get("args"), f"{fpath}.args")).decode()
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                )
                self.open.append((call_id, name))
        if not texts and not calls:
            return
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            message["tool_calls"] = calls
        self.messages.append(message)

    def _user(self, index: int, parts: list) -> None:
        texts: list[str] = []
        results: list[dict] = []
        for ppath, part in self._parts(index, parts):
            text = _part_text(part, ppath)
            if text:
                texts.append(text)
            if part.get("functionCall") is not None:
                raise _bad(
                    f"{ppath}.function_call", "function calls are only allowed in model turns."
                )
            if part.get("functionResponse") is not None:
                results.append(self._response(part["functionResponse"], f"{ppath}"))
        if self.open and not results:
            raise _missing_responses(index - 1, self.open)
        self.messages.extend(results)
        if texts:
            self.messages.append({"role": "user", "content": "\n".join(texts)})

    def _response(self, value: object, ppath: str) -> dict:
        fpath = f"{ppath}.function_response"
        response = _fields(
            value, fpath, {"id", "name", "response", "willContinue", "scheduling", "parts"}
        )
        if "name" not in response:
            raise _bad(f"{fpath}.name", "Name cannot be empty.")
        name = _string(response["name"], f"{fpath}.name")
        own = response.get("id")
        wanted = _ID_CHARS.sub("", _string(own, f"{fpath}.id")) if own else None
        for i, (call_id, call_name) in enumerate(self.open):
            if (wanted and call_id == wanted) or (not wanted and call_name == name):
                del self.open[i]
                break
        else:
            raise _bad(
                fpath,
                f"function response '{name}' does not answer a function call of the previous "
                "model turn.",
            )
        body = response.get("response")
        if body is not None and not isinstance(body, dict):
            raise _bad(f"{fpath}.response", "response must be an object (a JSON struct)")
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "content": dumps(body or {}).decode(),
        }


def _missing_responses(index: int, open_calls: list[tuple[str, str]]) -> GatewayError:
    names = ", ".join(name for _, name in open_calls)
    return _bad(
        f"contents[{index}]",
        f"function calls without responses: {names}. Each function call turn must be followed "
        "by a turn with a function response for every call.",
    )


def _system(value: object) -> str:
    if isinstance(value, str):  # the REST API takes a Content; some clients send text
        return value
    content = _fields(value, "system_instruction", _CONTENT)
    texts = []
    for i, part in enumerate(_list(content.get("parts", []), "system_instruction.parts")):
        ppath = f"system_instruction.parts[{i}]"
        part = _fields(part, ppath, _PART)
        text = _part_text(part, ppath)
        if text is None:
            raise _bad(ppath, "system instructions take text parts only.")
        texts.append(text)
    return "\n".join(t for t in texts if t)


# --------------------------------------------------------------------------- tools


def _schema(value: object, path: str) -> dict:
    """Gemini's OpenAPI schema subset → JSON schema."""
    if not isinstance(value, dict):
        raise _bad(path, "a schema must be an object")
    out: dict[str, Any] = {}
    nullable = False
    for key, item in value.items():
        name = _camel(key)
        if name == "type":
            kind = _string(item, f"{path}.type").upper()
            if kind == "TYPE_UNSPECIFIED":
                continue
            if kind not in _SCHEMA_TYPES:
                raise _bad(f"{path}.type", f'unknown type "{item}".')
            out["type"] = kind.lower()
        elif name == "nullable":
            nullable = _bool(item, f"{path}.nullable")
        elif name == "properties":
            if not isinstance(item, dict):
                raise _bad(f"{path}.properties", "properties must be an object")
            out["properties"] = {k: _schema(v, f"{path}.properties.{k}") for k, v in item.items()}
        elif name == "items":
            out["items"] = _schema(item, f"{path}.items")
        elif name == "anyOf":
            out["anyOf"] = [
                _schema(v, f"{path}.any_of[{i}]")
                for i, v in enumerate(_list(item, f"{path}.any_of"))
            ]
        elif name in ("propertyOrdering", "example"):
            continue
        else:
            out[name] = item
    if nullable and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _tools(value: object, body: dict) -> list[str]:
    tools: list[dict] = []
    names: list[str] = []
    for i, tool in enumerate(_list(value, "tools")):
        path = f"tools[{i}]"
        tool = _fields(tool, path, _TOOL)
        for name in tool:
            if name != "functionDeclarations":
                raise _unsupported(_join(path, name), f"the built-in tool '{name}' is")
        for j, decl in enumerate(_list(tool.get("functionDeclarations", []), path)):
            dpath = f"{path}.function_declarations[{j}]"
            decl = _fields(decl, dpath, _DECLARATION)
            if "name" not in decl:
                raise _bad(f"{dpath}.name", "Name cannot be empty.")
            name = _string(decl["name"], f"{dpath}.name")
            if not _NAME.match(name):
                raise _bad(
                    f"{dpath}.name",
                    "Invalid function name. Must start with a letter or an underscore. Must be "
                    "alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or "
                    "dashes (-), with a maximum length of 128.",
                )
            if name in names:
                raise _bad(f"{dpath}.name", f"Duplicate function declaration: {name}.")
            function: dict[str, Any] = {"name": name}
            if decl.get("description") is not None:
                function["description"] = _string(decl["description"], f"{dpath}.description")
            if decl.get("parameters") is not None and decl.get("parametersJsonSchema") is not None:
                raise _bad(dpath, "set parameters or parameters_json_schema, not both.")
            if decl.get("parameters") is not None:
                function["parameters"] = _schema(decl["parameters"], f"{dpath}.parameters")
            elif decl.get("parametersJsonSchema") is not None:
                schema = decl["parametersJsonSchema"]
                if not isinstance(schema, dict):
                    raise _bad(f"{dpath}.parameters_json_schema", "a schema must be an object")
                function["parameters"] = schema
            else:
                function["parameters"] = {"type": "object", "properties": {}}
            tools.append({"type": "function", "function": function})
            names.append(name)
    if tools:
        body["tools"] = tools
    return names


def _tool_config(value: object, names: list[str], body: dict) -> None:
    config = _fields(value, "tool_config", {"functionCallingConfig", "retrievalConfig"})
    calling = config.get("functionCallingConfig")
    if calling is None:
        return
    path = "tool_config.function_calling_config"
    calling = _fields(calling, path, {"mode", "allowedFunctionNames"})
    mode = calling.get("mode")
    mode = "AUTO" if mode is None else _enum(mode, f"{path}.mode", _MODES)
    allowed = [
        _string(n, f"{path}.allowed_function_names[{i}]")
        for i, n in enumerate(_list(calling.get("allowedFunctionNames", []), path))
    ]
    for name in allowed:
        if name not in names:
            raise _bad(f"{path}.allowed_function_names", f"'{name}' is not a declared function.")
    if allowed and mode != "ANY":
        raise _bad(
            f"{path}.allowed_function_names", "allowed_function_names needs mode set to ANY."
        )
    if not names:
        if mode == "ANY":
            raise _bad(path, "mode ANY needs function declarations in tools.")
        return
    if mode == "NONE":
        body["tool_choice"] = "none"
    elif mode == "ANY":
        if len(allowed) == 1:
            body["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
        else:
            body["tool_choice"] = "required"
            if allowed:
                body["tools"] = [t for t in body["tools"] if t["function"]["name"] in allowed]
    else:
        body["tool_choice"] = "auto"


# --------------------------------------------------------------------------- generation


def _generation(value: object, body: dict) -> dict:
    """Validate ``generationConfig`` and copy what the node understands."""
    path = "generation_config"
    config = _fields(value, path, _GENERATION)
    facts: dict[str, Any] = {"n": None, "max_tokens": None, "temperature": None, "seed": None}
    if config.get("maxOutputTokens") is not None:
        facts["max_tokens"] = _int(config["maxOutputTokens"], f"{path}.max_output_tokens", 1)
        body["max_tokens"] = facts["max_tokens"]
    if config.get("candidateCount") is not None:
        n = _int(config["candidateCount"], f"{path}.candidate_count", 1, MAX_CANDIDATES)
        facts["n"] = n
        if n != 1:
            body["n"] = n
    if config.get("temperature") is not None:
        facts["temperature"] = _number(config["temperature"], f"{path}.temperature", 0, 2)
        body["temperature"] = facts["temperature"]
    if config.get("topP") is not None:
        body["top_p"] = _number(config["topP"], f"{path}.top_p", 0, 1)
    if config.get("topK") is not None:
        _int(config["topK"], f"{path}.top_k", 1)
    for name in ("presencePenalty", "frequencyPenalty"):
        if config.get(name) is not None:
            body[_snake(name)] = _number(config[name], f"{path}.{_snake(name)}", -2, 2)
    if config.get("seed") is not None:
        facts["seed"] = _int(config["seed"], f"{path}.seed")
        body["seed"] = facts["seed"]
    if config.get("stopSequences") is not None:
        stops = [
            _string(s, f"{path}.stop_sequences[{i}]")
            for i, s in enumerate(_list(config["stopSequences"], f"{path}.stop_sequences"))
        ]
        if len(stops) > MAX_STOP:
            raise _bad(f"{path}.stop_sequences", f"at most {MAX_STOP} stop sequences.")
        if stops:
            body["stop"] = stops
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema")
    if config.get("responseSchema") is not None:
        if schema is not None:
            raise _bad(path, "set response_schema or response_json_schema, not both.")
        schema = _schema(config["responseSchema"], f"{path}.response_schema")
    if mime is not None:
        mime = _enum(mime, f"{path}.response_mime_type", {"text/plain", "application/json"})
    if schema is not None:
        if mime != "application/json":
            raise _bad(
                f"{path}.response_mime_type",
                "response_mime_type must be application/json when a response schema is set.",
            )
        if not isinstance(schema, dict):
            raise _bad(f"{path}.response_json_schema", "a schema must be an object")
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": schema},
        }
    elif mime == "application/json":
        body["response_format"] = {"type": "json_object"}
    modalities = config.get("responseModalities")
    if modalities is not None:
        for i, m in enumerate(_list(modalities, f"{path}.response_modalities")):
            if _string(m, f"{path}.response_modalities[{i}]").upper() != "TEXT":
                raise _unsupported(f"{path}.response_modalities", f"the {m} modality is")
    if config.get("thinkingConfig") is not None:
        thinking = _fields(config["thinkingConfig"], f"{path}.thinking_config", _THINKING)
        if thinking.get("thinkingBudget") is not None:
            _int(thinking["thinkingBudget"], f"{path}.thinking_config.thinking_budget", -1)
        if thinking.get("includeThoughts") is not None:
            _bool(thinking["includeThoughts"], f"{path}.thinking_config.include_thoughts")
    for name in ("responseLogprobs", "enableEnhancedCivicAnswers"):
        if config.get(name) is not None:
            _bool(config[name], f"{path}.{_snake(name)}")
    if config.get("speechConfig") is not None or config.get("imageConfig") is not None:
        raise _unsupported(path, "speech and image output are")
    return facts


def _safety(value: object) -> None:
    for i, setting in enumerate(_list(value, "safety_settings")):
        spath = f"safety_settings[{i}]"
        setting = _fields(setting, spath, {"category", "threshold", "method"})
        for key in ("category", "threshold"):
            if key not in setting:
                raise _bad(f"{spath}.{key}", f"{key} is required.")
            _string(setting[key], f"{spath}.{key}")


# --------------------------------------------------------------------------- requests


def _model_name(path_model: str | None, body_model: object = None) -> str:
    name = path_model
    if not name and isinstance(body_model, str):
        name = body_model
    name = (name or "").removeprefix("models/")
    if not name:
        raise _bad("model", "model is not specified.")
    return name


def _parse_contents(body: dict) -> _Turns:
    if "contents" not in body:
        raise _bad("GenerateContentRequest.contents", "contents is not specified")
    contents = _list(body["contents"], "contents")
    if not contents:
        raise _bad("GenerateContentRequest.contents", "contents is not specified")
    turns = _Turns()
    for index, content in enumerate(contents):
        turns.add(index, content)
    if turns.open:
        # The conversation ends on a model turn with calls: nothing to generate.
        raise _missing_responses(len(contents) - 1, turns.open)
    return turns


def _request(body: object) -> tuple[dict, list[dict], list[str], dict]:
    """Validate a GenerateContentRequest: (fields, messages, function names,
    OpenAI body without model and messages)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    body = _fields(body, "", _REQUEST)
    if body.get("cachedContent") is not None:
        raise _unsupported("cached_content", "cached contents are")
    turns = _parse_contents(body)
    messages = turns.messages
    if body.get("systemInstruction") is not None:
        system = _system(body["systemInstruction"])
        if system:
            messages.insert(0, {"role": "system", "content": system})
    out: dict[str, Any] = {}
    names: list[str] = []
    if body.get("tools") is not None:
        names = _tools(body["tools"], out)
    if body.get("toolConfig") is not None:
        _tool_config(body["toolConfig"], names, out)
    if body.get("safetySettings") is not None:
        _safety(body["safetySettings"])
    if body.get("labels") is not None and not isinstance(body["labels"], dict):
        raise _bad("labels", "labels must be an object")
    facts = {"n": None, "max_tokens": None, "temperature": None, "seed": None}
    if body.get("generationConfig") is not None:
        facts = _generation(body["generationConfig"], out)
    return facts, messages, names, out


def _estimate(messages: list[dict], out: dict) -> int:
    return openai.chat_prompt_estimate(messages, out.get("tools"))


def parse_generate(
    path_model: str | None, body: object, *, stream: bool, alt_sse: bool
) -> CallRequest:
    """``:generateContent`` / ``:streamGenerateContent`` → a chat completion call."""
    facts, messages, names, out = _request(body)
    model = _model_name(path_model, body.get("model") if isinstance(body, dict) else None)
    forward = {"model": model, "messages": messages, **out}
    if stream:
        forward["stream"] = True
    estimate = _estimate(messages, out)
    deterministic = (facts["temperature"] == 0 or facts["seed"] is not None) and facts["n"] in (
        None,
        1,
    )
    return CallRequest(
        protocol="gemini",
        endpoint="streamGenerateContent" if stream else "generateContent",
        model=model,
        upstream_path=CHAT_PATH,
        body=forward,
        stream=stream,
        client_wants_usage=True,
        max_output_tokens=facts["max_tokens"],
        prompt_tokens_estimate=estimate,
        prefix_text=openai.chat_prompt(messages, out.get("tools"))[1],
        deterministic=deterministic,
        response=GenerateResponse(
            input_estimate=estimate, stream=stream, alt_sse=alt_sse, tool_names=names
        ),
        extra={"tool_names": names} if names else {},
    )


def count_tokens(path_model: str | None, body: object) -> bytes:
    """``:countTokens``: ``{"contents": [...]}`` or ``{"generateContentRequest": {...}}``
    → ``{"totalTokens": n}`` by the documented tokenizer rule."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    body = _fields(body, "", {"contents", "generateContentRequest"})
    if "generateContentRequest" in body:
        if "contents" in body:
            raise _bad("", "set contents or generate_content_request, not both.")
        _, messages, _, out = _request(body["generateContentRequest"])
    else:
        messages = _parse_contents(body).messages
        out = {}
    return dumps({"totalTokens": _estimate(messages, out)})


def _embed_text(request: dict, path: str) -> str:
    if "content" not in request:
        raise _bad(f"{path}.content", "content is not specified")
    content = _fields(request["content"], f"{path}.content", _CONTENT)
    parts = _list(content.get("parts", []), f"{path}.content.parts")
    texts = []
    for i, part in enumerate(parts):
        ppath = f"{path}.content.parts[{i}]"
        part = _fields(part, ppath, _PART)
        text = _part_text(part, ppath)
        if text is None:
            raise _unsupported(ppath, "embedding parts other than text are")
        texts.append(text)
    text = " ".join(texts)
    if not text.strip():
        raise _bad(f"{path}.content", "the text to embed is empty.")
    return text


def _embed_options(request: dict, path: str) -> int | None:
    if request.get("taskType") is not None:
        _enum(request["taskType"], f"{path}.task_type", _TASK_TYPES)
    if request.get("title") is not None:
        _string(request["title"], f"{path}.title")
    if request.get("outputDimensionality") is not None:
        return _int(request["outputDimensionality"], f"{path}.output_dimensionality", 1)
    return None


def _embed_call(model: str, texts: list[str], dims: int | None, endpoint: str) -> CallRequest:
    forward: dict[str, Any] = {"model": model, "input": texts if len(texts) > 1 else texts[0]}
    if dims is not None:
        forward["dimensions"] = dims
    return CallRequest(
        protocol="gemini",
        endpoint=endpoint,
        model=model,
        upstream_path=EMBED_PATH,
        body=forward,
        stream=False,
        client_wants_usage=True,
        max_output_tokens=0,
        prompt_tokens_estimate=sum(openai.count_text(t) for t in texts),
        prefix_text=texts[0][: openai.PREFIX_CHARS],
        deterministic=True,
        response=EmbedResponse(batch=endpoint == "batchEmbedContents"),
    )


def parse_embed(path_model: str | None, body: object) -> CallRequest:
    """``:embedContent`` → an embeddings call for one text."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    request = _fields(body, "", _EMBED)
    model = _model_name(path_model, request.get("model"))
    text = _embed_text(request, "")
    dims = _embed_options(request, "")
    return _embed_call(model, [text], dims, "embedContent")


def parse_batch_embed(path_model: str | None, body: object) -> CallRequest:
    """``:batchEmbedContents`` → one embeddings call for all the texts."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json")
    body = _fields(body, "", {"requests"})
    model = _model_name(path_model)
    requests = _list(body.get("requests"), "requests")
    if not requests:
        raise _bad("requests", "requests must not be empty.")
    texts: list[str] = []
    dims: set[int | None] = set()
    for i, request in enumerate(requests):
        path = f"requests[{i}]"
        request = _fields(request, path, _EMBED)
        own = request.get("model")
        if own is not None and _model_name(None, _string(own, f"{path}.model")) != model:
            raise _bad(
                f"{path}.model",
                f"Model {own} differs from the model in the URL (models/{model}).",
            )
        texts.append(_embed_text(request, path))
        dims.add(_embed_options(request, path))
    if len(dims) > 1:
        raise _bad("requests", "every request must ask for the same output_dimensionality.")
    return _embed_call(model, texts, dims.pop(), "batchEmbedContents")


def parse_call(endpoint: str, data: object, *, path_model, query, headers) -> CallRequest:
    """The pipeline's one entry: the client's parsed JSON for ``endpoint``
    (``query`` is the raw query string: ``alt=sse`` picks the stream framing)."""
    if endpoint == "embedContent":
        return parse_embed(path_model, data)
    if endpoint == "batchEmbedContents":
        return parse_batch_embed(path_model, data)
    alt_sse = (parse_qs(query.decode("latin-1")).get("alt") or [""])[0] == "sse"
    return parse_generate(
        path_model, data, stream=endpoint == "streamGenerateContent", alt_sse=alt_sse
    )


def count_model(data: object, path_model) -> object:
    """The model a ``countTokens`` request names: the one in its path."""
    return path_model


def count_body(data: object, path_model) -> bytes:
    return count_tokens(path_model, data)


# --------------------------------------------------------------------------- answers


# A node's answer is untrusted JSON: these read its fields without assuming types.


def _list_of(value: object) -> list:
    return value if isinstance(value, list) else []


def _choice_index(value: object, default: int) -> int:
    return value if type(value) is int and value >= 0 else default


def _text_or_empty(value: object) -> str:
    return value if isinstance(value, str) else ""


def _finish_reason(value: object) -> str:
    return _FINISH.get(value, "STOP") if isinstance(value, str) else "STOP"


def _response_id(upstream_id: object) -> str:
    raw = upstream_id if isinstance(upstream_id, str) else ""
    for prefix in ("chatcmpl-", "chatcmpl_", "cmpl-"):
        raw = raw.removeprefix(prefix)
    return _ID_CHARS.sub("", raw) or "gateway"


def _call_part(name: object, arguments: object) -> dict:
    args: object = {}
    if isinstance(arguments, dict):
        args = arguments
    elif isinstance(arguments, str) and arguments.strip():
        try:
            args = json.loads(arguments)
        except ValueError:
            args = {}
    return {
        "functionCall": {
            "name": name if isinstance(name, str) else "",
            "args": args if isinstance(args, dict) else {},
        }
    }


class GenerateResponse(ResponseAdapter):
    """The node's chat completion as a GenerateContentResponse; a stream
    keeps its state (open function calls, finish reasons) here."""

    def __init__(self, *, input_estimate: int, stream: bool, alt_sse: bool, tool_names=()) -> None:
        self.input_estimate = input_estimate
        self.alt_sse = alt_sse
        self.stream_content_type = (
            "text/event-stream" if alt_sse or not stream else "application/json"
        )
        self.tool_names = tuple(tool_names)
        self._id = "gateway"
        self._sent = 0  # chunks sent (the JSON-array form needs commas)
        self._calls: dict[tuple[int, int], dict] = {}  # (candidate, call index) → name/args
        self._finish: dict[int, str] = {}
        self._output: list[str] = []

    def _usage(self, usage: TokenUsage | None) -> dict:
        if usage is None:
            usage = TokenUsage(
                input=self.input_estimate, output=openai.count_text("".join(self._output))
            )
        return to_gemini(usage)

    def render(self, upstream: dict, usage: TokenUsage | None, model: str) -> bytes:
        choices = upstream.get("choices") if isinstance(upstream, dict) else None
        if not isinstance(choices, list) or not choices:
            raise GatewayError(
                UPSTREAM, "upstream_invalid_response", "The model node sent an invalid answer."
            )
        candidates = []
        for position, choice in enumerate(choices):
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                raise GatewayError(
                    UPSTREAM, "upstream_invalid_response", "The model node sent an invalid answer."
                )
            parts: list[dict] = []
            text = message.get("content")
            if isinstance(text, str) and text:
                parts.append({"text": text})
                self._output.append(text)
            for call in _list_of(message.get("tool_calls")):
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    parts.append(_call_part(function.get("name"), function.get("arguments")))
            candidates.append(
                {
                    "content": {"parts": parts or [{"text": ""}], "role": "model"},
                    "finishReason": _finish_reason(choice.get("finish_reason")),
                    "index": _choice_index(choice.get("index"), position),
                }
            )
        return dumps(
            {
                "candidates": candidates,
                "usageMetadata": self._usage(usage),
                "modelVersion": model,
                "responseId": _response_id(upstream.get("id")),
            }
        )

    # ---- streams

    def _frame(self, obj: dict) -> bytes:
        self._sent += 1
        if self.alt_sse:
            return sse(obj)
        head = b"[" if self._sent == 1 else b",\r\n"
        return head + dumps(obj)

    def stream_start(self, model: str) -> bytes:
        return b""

    def stream_chunk(self, chunk: dict, model: str) -> bytes:
        if isinstance(chunk.get("id"), str):
            self._id = _response_id(chunk["id"])
        candidates = []
        for choice in _list_of(chunk.get("choices")):
            if not isinstance(choice, dict):
                continue
            index = _choice_index(choice.get("index"), 0)
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            for call in _list_of(delta.get("tool_calls")):
                if not isinstance(call, dict):
                    continue
                slot = self._calls.setdefault(
                    (index, _choice_index(call.get("index"), 0)), {"name": "", "arguments": ""}
                )
                function = call.get("function")
                function = function if isinstance(function, dict) else {}
                slot["name"] += _text_or_empty(function.get("name"))
                slot["arguments"] += _text_or_empty(function.get("arguments"))
            if choice.get("finish_reason") is not None:
                self._finish[index] = _finish_reason(choice["finish_reason"])
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._output.append(text)
                candidates.append(
                    {"content": {"parts": [{"text": text}], "role": "model"}, "index": index}
                )
        if not candidates:
            return b""
        return self._frame(
            {"candidates": candidates, "modelVersion": model, "responseId": self._id}
        )

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        indexes = sorted({i for i, _ in self._calls} | set(self._finish) | {0})
        candidates = []
        for index in indexes:
            parts = [
                _call_part(slot["name"], slot["arguments"])
                for (i, _), slot in sorted(self._calls.items())
                if i == index
            ]
            candidates.append(
                {
                    "content": {"parts": parts or [{"text": ""}], "role": "model"},
                    "finishReason": self._finish.get(index, "STOP"),
                    "index": index,
                }
            )
        last = {
            "candidates": candidates,
            "usageMetadata": self._usage(usage),
            "modelVersion": model,
            "responseId": self._id,
        }
        out = self._frame(last)
        return out if self.alt_sse else out + b"]"

    def stream_error(self, error: GatewayError) -> bytes:
        body = _error(error)
        if self.alt_sse:
            return sse(body)
        return (b"[" if self._sent == 0 else b",\r\n") + dumps(body) + b"]"


class EmbedResponse(ResponseAdapter):
    """OpenAI embeddings → ``{"embedding": {...}}`` or ``{"embeddings": [...]}``."""

    def __init__(self, *, batch: bool) -> None:
        self.batch = batch

    def render(self, upstream: dict, usage: TokenUsage | None, model: str) -> bytes:
        data = upstream.get("data") if isinstance(upstream, dict) else None
        if not isinstance(data, list) or not data:
            raise GatewayError(
                UPSTREAM, "upstream_invalid_response", "The model node sent an invalid answer."
            )
        vectors = []
        for item in sorted(
            (d for d in data if isinstance(d, dict)),
            key=lambda d: _choice_index(d.get("index"), 0),
        ):
            values = item.get("embedding")
            if not isinstance(values, list):
                raise GatewayError(
                    UPSTREAM,
                    "upstream_invalid_response",
                    "The model node sent an embedding that is not a list of numbers.",
                )
            vectors.append({"values": values})
        if not vectors:
            raise GatewayError(
                UPSTREAM, "upstream_invalid_response", "The model node sent no embeddings."
            )
        if self.batch:
            return dumps({"embeddings": vectors})
        return dumps({"embedding": vectors[0]})


# --------------------------------------------------------------------------- errors, models


def _error(err: GatewayError) -> dict:
    status = err.status
    return {
        "error": {
            "code": status,
            "message": err.message,
            "status": _STATUS.get(err.kind, "INTERNAL"),
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": err.code,
                    "domain": "gateway",
                    **({"metadata": {"field": err.param}} if err.param else {}),
                }
            ],
        }
    }


def error_body(err: GatewayError) -> bytes:
    """Google's error JSON: ``{"error": {"code", "message", "status", "details"}}``."""
    return dumps(_error(err))


def error_response(err: GatewayError) -> tuple[int, bytes]:
    return err.status, error_body(err)


_METHODS = {
    "chat": ["generateContent", "streamGenerateContent", "countTokens"],
    "embedding": ["embedContent", "batchEmbedContents"],
}


def render_models(models: list[ModelInfo]) -> bytes:
    """Gemini's ``/v1beta/models`` page (everything on one page)."""
    data = [
        {
            "name": f"models/{m.name}",
            "baseModelId": m.name,
            "version": "001",
            "displayName": m.display_name,
            "description": m.display_name,
            "inputTokenLimit": m.context_window,
            "outputTokenLimit": m.context_window,
            "supportedGenerationMethods": _METHODS[m.kind],
        }
        for m in models
        if m.kind in _METHODS
    ]
    return dumps({"models": data})
