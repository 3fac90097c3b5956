"""Gemini ``generateContent`` requests: validation and the prompt's tokens.

Proto JSON as Google takes it: camelCase and snake_case names alike
(``inline_data`` is ``inlineData``), an unknown field is ``Invalid JSON
payload received. Unknown name "x": Cannot find field.``, other errors are
``* GenerateContentRequest.<path>: <problem>`` (400 ``INVALID_ARGUMENT``).

Parts: ``text``, ``inlineData`` (images, PDFs, audio: the media rule of
``console.tokens`` on the decoded size), ``fileData`` (by URI: the media base
cost), ``functionCall`` (model turns), ``functionResponse``, ``thought`` parts
of earlier model turns (dropped, as Gemini drops them), ``thoughtSignature``.

Tokens: rendered as the OpenAI messages the gateway translates the request to
(``systemInstruction`` first, model turns as assistant messages with
``tool_calls``, function responses as tool messages with the compact JSON of
the response) and counted with the shared chat template, so a native call
costs what the gateway estimates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from console import tokens as tokenizer
from console.tokens import template_messages

from . import protocol
from .protocol import ApiError, ToolPlan

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


def _list(value: object, path: str) -> list:
    if not isinstance(value, list):
        raise ApiError(400, f"Invalid JSON payload received. Expected a list at '{path}'.")
    return value


def _typed(value: object, path: str, kind, proto: str):
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise ApiError(400, f"Invalid value at '{path}' ({proto}), {json.dumps(value)[:60]}")
    return value


def _int(value: object, path: str, low: int | None = None) -> int:
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        value = int(value)  # proto JSON takes integers as strings too
    value = _typed(value, path, int, "TYPE_INT32")
    if low is not None and value < low:
        raise bad(path, f"{value} is out of range: it must be at least {low}.")
    return value


def _compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _schema(value: object) -> object:
    """Gemini's OpenAPI schema subset → JSON schema (lower-case types, ``nullable``)."""
    if isinstance(value, list):
        return [_schema(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict = {}
    for key, item in value.items():
        name = camel(key)
        if name == "type" and isinstance(item, str):
            out["type"] = item.lower()
        elif name in ("properties",) and isinstance(item, dict):
            out[name] = {k: _schema(v) for k, v in item.items()}
        elif name in ("items", "anyOf"):
            out[name] = _schema(item)
        elif name not in ("nullable", "propertyOrdering", "example"):
            out[name] = item
    if value.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@dataclass
class GenerateRequest:
    model: str
    messages: list[dict]
    tools: list[dict]
    plan: ToolPlan
    prompt_ids: list[int]
    max_tokens: int | None
    stop: tuple[str, ...]
    candidates: int
    seed: int | None
    thinking_budget: int  # 0: none; -1: dynamic
    include_thoughts: bool
    mime_type: str
    schema: dict | None


class _Turns:
    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.calls = 0

    def _part(self, part: object, path: str) -> dict:
        return fields(part, path, PART)

    def media(self, part: dict, path: str) -> dict | None:
        if part.get("inlineData") is not None:
            blob = fields(part["inlineData"], f"{path}.inline_data")
            data = blob.get("data")
            if not isinstance(data, str):
                raise bad(f"{path}.inline_data.data", "data is required.")
            mime = blob.get("mimeType")
            if not isinstance(mime, str) or not mime:
                raise bad(f"{path}.inline_data.mime_type", "mime_type is required.")
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
        if part.get("fileData") is not None:
            file = fields(part["fileData"], f"{path}.file_data")
            uri = file.get("fileUri")
            if not isinstance(uri, str) or not uri:
                raise bad(f"{path}.file_data.file_uri", "file_uri is required.")
            return {"type": "file", "file": {"file_data": uri}}
        return None

    def add(self, index: int, content: object) -> None:
        path = f"contents[{index}]"
        content = fields(content, path, {"role", "parts"})
        role = content.get("role") or "user"
        if role not in ("user", "model", "function", "tool"):
            raise bad(f"{path}.role", "Please use a valid role: user, model.")
        parts = _list(content.get("parts", []), f"{path}.parts")
        if not parts:
            raise bad(f"{path}.parts", "contents.parts must not be empty.")
        texts: list[str] = []
        media: list[dict] = []
        calls: list[dict] = []
        results: list[dict] = []
        for i, raw in enumerate(parts):
            ppath = f"{path}.parts[{i}]"
            part = self._part(raw, ppath)
            if role == "model" and part.get("thought") is True:
                continue  # earlier thoughts are not part of the prompt
            if "text" in part:
                texts.append(_typed(part["text"], f"{ppath}.text", str, "TYPE_STRING"))
            found = self.media(part, ppath)
            if found is not None:
                media.append(found)
            if part.get("functionCall") is not None:
                if role != "model":
                    raise bad(
                        f"{ppath}.function_call", "function calls are only allowed in model turns."
                    )
                calls.append(self.call(part["functionCall"], f"{ppath}.function_call"))
            if part.get("functionResponse") is not None:
                results.append(self.response(part["functionResponse"], f"{ppath}"))
        if role == "model":
            if texts or calls:
                message: dict = {"role": "assistant", "content": "".join(texts) or None}
                if calls:
                    message["tool_calls"] = calls
                self.messages.append(message)
            return
        self.messages.extend(results)
        text = "\n".join(texts)
        if media:
            self.messages.append(
                {"role": "user", "content": [{"type": "text", "text": text}, *media]}
            )
        elif texts:
            self.messages.append({"role": "user", "content": text})

    def call(self, value: object, path: str) -> dict:
        call = fields(value, path, {"id", "name", "args"})
        name = call.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"{path}.name", "Name cannot be empty.")
        args = call.get("args") or {}
        if not isinstance(args, dict):
            raise bad(f"{path}.args", "args must be an object (a JSON struct)")
        self.calls += 1
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{self.calls}"
        function = {"name": name, "arguments": _compact(args)}
        return {"id": call_id, "type": "function", "function": function}

    def response(self, value: object, ppath: str) -> dict:
        path = f"{ppath}.function_response"
        response = fields(value, path)
        name = response.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"{path}.name", "Name cannot be empty.")
        body = response.get("response")
        if body is not None and not isinstance(body, dict):
            raise bad(f"{path}.response", "response must be an object (a JSON struct)")
        call_id = None
        for message in reversed(self.messages):
            for call in message.get("tool_calls") or ():
                if call["function"]["name"] == name and call_id is None:
                    call_id = call["id"]
        return {"role": "tool", "tool_call_id": call_id or name, "content": _compact(body or {})}


def _system(value: object) -> str:
    if isinstance(value, str):
        return value
    content = fields(value, "system_instruction", {"role", "parts"})
    texts = []
    for i, part in enumerate(_list(content.get("parts", []), "system_instruction.parts")):
        part = fields(part, f"system_instruction.parts[{i}]", PART)
        if not isinstance(part.get("text"), str):
            raise bad(f"system_instruction.parts[{i}]", "system instructions take text parts.")
        texts.append(part["text"])
    return "\n".join(t for t in texts if t)


def _tools(value: object) -> list[dict]:
    tools = []
    for i, tool in enumerate(_list(value, "tools")):
        tool = fields(tool, f"tools[{i}]")
        for j, decl in enumerate(_list(tool.get("functionDeclarations", []), f"tools[{i}]")):
            path = f"tools[{i}].function_declarations[{j}]"
            decl = fields(decl, path)
            name = decl.get("name")
            if not isinstance(name, str) or not protocol._FUNCTION_NAME.fullmatch(name):
                raise bad(
                    f"{path}.name",
                    "Invalid function name. Must start with a letter or "
                    "an underscore, be alphanumeric, with a maximum length of 64.",
                )
            function: dict = {"name": name}
            if isinstance(decl.get("description"), str):
                function["description"] = decl["description"]
            if decl.get("parameters") is not None:
                function["parameters"] = _schema(decl["parameters"])
            elif isinstance(decl.get("parametersJsonSchema"), dict):
                function["parameters"] = decl["parametersJsonSchema"]
            else:
                function["parameters"] = {"type": "object", "properties": {}}
            tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(value: object, tools: list[dict]) -> dict:
    """``toolConfig`` as the OpenAI fields ``protocol.tool_plan`` reads."""
    out: dict = {"tools": tools}
    if value is None or not tools:
        return out
    config = fields(value, "tool_config")
    calling = config.get("functionCallingConfig")
    if calling is None:
        return out
    calling = fields(calling, "tool_config.function_calling_config")
    mode = calling.get("mode") or "AUTO"
    if mode not in ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"):
        raise bad("tool_config.function_calling_config.mode", f'unknown mode "{mode}".')
    allowed = calling.get("allowedFunctionNames") or []
    if mode == "NONE":
        out["tool_choice"] = "none"
    elif mode == "ANY" and len(allowed) == 1:
        out["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
    elif mode == "ANY":
        out["tool_choice"] = "required"
        if allowed:
            out["tools"] = [t for t in tools if t["function"]["name"] in allowed]
    return out


def _generation(value: object) -> dict:
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
    }
    if config.get("maxOutputTokens") is not None:
        out["max"] = _int(config["maxOutputTokens"], f"{path}.max_output_tokens", 1)
    stops = _list(config.get("stopSequences") or [], f"{path}.stop_sequences")
    if len(stops) > MAX_STOP:
        raise bad(f"{path}.stop_sequences", f"at most {MAX_STOP} stop sequences are allowed.")
    out["stop"] = tuple(
        _typed(s, f"{path}.stop_sequences[{i}]", str, "TYPE_STRING") for i, s in enumerate(stops)
    )
    if config.get("candidateCount") is not None:
        out["n"] = _int(config["candidateCount"], f"{path}.candidate_count", 1)
        if out["n"] > MAX_CANDIDATES:
            raise bad(f"{path}.candidate_count", f"must be at most {MAX_CANDIDATES}.")
    for name, high in (("temperature", 2), ("topP", 1)):
        value = config.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high
        ):
            raise bad(f"{path}.{name.lower()}", f"must be a number in [0, {high}].")
    if config.get("seed") is not None:
        out["seed"] = _int(config["seed"], f"{path}.seed")
    mime = config.get("responseMimeType") or "text/plain"
    if mime not in _MIME:
        raise bad(f"{path}.response_mime_type", f"allowed mimetypes are {', '.join(_MIME)}.")
    out["mime"] = mime
    if isinstance(config.get("responseJsonSchema"), dict):
        out["schema"] = config["responseJsonSchema"]
    elif isinstance(config.get("responseSchema"), dict):
        out["schema"] = _schema(config["responseSchema"])
    if config.get("thinkingConfig") is not None:
        tpath = f"{path}.thinking_config"
        thinking = fields(
            config["thinkingConfig"], tpath, {"includeThoughts", "thinkingBudget", "thinkingLevel"}
        )
        if thinking.get("thinkingBudget") is not None:
            out["budget"] = _int(thinking["thinkingBudget"], f"{tpath}.thinking_budget", -1)
        elif thinking.get("thinkingLevel") is not None:
            out["budget"] = -1
        if thinking.get("includeThoughts") is not None:
            include = thinking["includeThoughts"]
            out["thoughts"] = _typed(include, f"{tpath}.include_thoughts", bool, "TYPE_BOOL")
    return out


def parse_generate(body: dict, model: str, *, count_only: bool = False) -> GenerateRequest:
    """A checked ``generateContent`` body (``countTokens`` takes ``contents`` alone or
    a ``generateContentRequest``)."""
    if count_only:
        body = fields(body, "", {"contents", "generateContentRequest"})
        if body.get("generateContentRequest") is not None:
            body = body["generateContentRequest"]
    body = fields(body, "", REQUEST)
    contents = body.get("contents")
    if not contents:
        raise bad("contents", "contents is not specified")
    turns = _Turns()
    for index, content in enumerate(_list(contents, "contents")):
        turns.add(index, content)
    messages = turns.messages
    if body.get("systemInstruction") is not None:
        system = _system(body["systemInstruction"])
        if system:
            messages.insert(0, {"role": "system", "content": system})
    tools = _tools(body["tools"]) if body.get("tools") is not None else []
    if body.get("cachedContent") is not None:
        raise bad(
            "cached_content",
            "explicit cached contents are not supported by the "
            "simulator; implicit caching is automatic.",
        )
    config = _generation(body.get("generationConfig") or {})
    choice = _tool_choice(body.get("toolConfig"), tools)
    plan = protocol.tool_plan(choice, messages) if messages else ToolPlan()
    prompt_ids = tokenizer.chat_prompt_tokens(template_messages(messages, tools or None))
    return GenerateRequest(
        model=model,
        messages=messages,
        tools=tools,
        plan=plan,
        prompt_ids=prompt_ids,
        max_tokens=config["max"],
        stop=tuple(s for s in config["stop"] if s),
        candidates=config["n"],
        seed=config["seed"],
        thinking_budget=config["budget"],
        include_thoughts=config["thoughts"],
        mime_type=config["mime"],
        schema=config["schema"],
    )
