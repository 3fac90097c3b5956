"""Gemini ``generateContent`` requests: validation and the prompt's tokens.

Proto JSON as Google takes it (both spellings, Google's error messages) and
``generationConfig`` are read by ``gemini_fields``.

Parts: ``text``, ``inlineData`` (images, PDFs, audio: the media rule of
``console.kernel.tokens`` on the decoded size), ``fileData`` (by URI: the media base
cost), ``functionCall`` (model turns), ``functionResponse``, ``thought`` parts
of earlier model turns (dropped, as Gemini drops them), ``thoughtSignature``.

Tokens: rendered as the OpenAI messages the gateway translates the request to
(``systemInstruction`` first, model turns as assistant messages with
``tool_calls``, function responses as tool messages with the compact JSON of
the response) and counted with the shared chat template, so a native call
costs what the gateway estimates.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.kernel import tokens as tokenizer
from console.kernel.tokens import template_messages

from . import protocol
from .gemini_fields import array, bad, compact, fields, generation_config, schema, typed
from .tool_plan import ToolPlan

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
    logprobs: int | None = None  # responseLogprobs: top candidates per token (None: off)


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
        parts = array(content.get("parts", []), f"{path}.parts")
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
                texts.append(typed(part["text"], f"{ppath}.text", str, "TYPE_STRING"))
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
        function = {"name": name, "arguments": compact(args)}
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
        return {"role": "tool", "tool_call_id": call_id or name, "content": compact(body or {})}


def _system(value: object) -> str:
    if isinstance(value, str):
        return value
    content = fields(value, "system_instruction", {"role", "parts"})
    texts = []
    for i, part in enumerate(array(content.get("parts", []), "system_instruction.parts")):
        part = fields(part, f"system_instruction.parts[{i}]", PART)
        if not isinstance(part.get("text"), str):
            raise bad(f"system_instruction.parts[{i}]", "system instructions take text parts.")
        texts.append(part["text"])
    return "\n".join(t for t in texts if t)


def _tools(value: object) -> list[dict]:
    tools = []
    for i, tool in enumerate(array(value, "tools")):
        tool = fields(tool, f"tools[{i}]")
        for j, decl in enumerate(array(tool.get("functionDeclarations", []), f"tools[{i}]")):
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
                function["parameters"] = schema(decl["parameters"])
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
    for index, content in enumerate(array(contents, "contents")):
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
    config = generation_config(body.get("generationConfig") or {})
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
        logprobs=config["logprobs"],
    )
