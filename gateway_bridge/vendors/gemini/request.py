"""The OpenAI chat (or embeddings) pivot → a Gemini ``generateContent`` (or
``batchEmbedContents``) request. See the package docstring for what is lost."""

from __future__ import annotations

import mimetypes
import re
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway_bridge.protocols.base import GatewayError, invalid
from gateway_bridge.vendors.gemini.schema import convert

#: ``reasoning_effort`` → ``thinkingConfig.thinkingBudget`` (Google's own table
#: for its OpenAI-compatible endpoint; ``none`` turns thinking off).
THINKING_BUDGET = {
    "none": 0,
    "minimal": 1024,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 24576,
}

#: What a function call replayed from the pivot carries as its thought
#: signature: Google's documented value for calls the model did not sign in
#: this conversation (history from another model), which Gemini 3 requires.
SKIP_SIGNATURE = "skip_thought_signature_validator"

# The standard library's own table (not the host's mime.types: the same answer everywhere).
_MIME = mimetypes.MimeTypes(filenames=())
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)((?:;[\w.+-]+=[\w.+-]+)*);base64,(.*)", re.S)
_AUDIO = {"wav": "audio/wav", "mp3": "audio/mp3"}
_TOOL_CHOICE = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
_UNSUPPORTED = {  # pivot field → why the Gemini API cannot take it
    "audio": "audio output is",
    "logit_bias": "logit bias is",
}


def unsupported(param: str, what: str) -> GatewayError:
    return invalid(
        f"{param}: {what} not supported by the Gemini API channel.",
        param=param,
        code="unsupported",
    )


def _bad(param: str, message: str) -> GatewayError:
    return invalid(f"{param}: {message}", param=param)


def _mime_of_url(url: str, param: str) -> str:
    guessed, _ = _MIME.guess_type(urlsplit(url).path, strict=False)
    if not guessed:
        raise unsupported(
            param,
            "a URL without a known file extension (the Gemini API needs the file's MIME type) is",
        )
    return guessed


def _data_part(url: str, param: str) -> dict[str, Any]:
    found = _DATA_URL.fullmatch(url)
    if not found:
        raise _bad(param, "a data URL must be data:<mime type>;base64,<data>.")
    return {"inlineData": {"mimeType": found.group(1), "data": found.group(3)}}


def _image(value: object, param: str) -> dict[str, Any]:
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise _bad(f"{param}.url", "an image needs a URL.")
    if url.startswith("data:"):
        return _data_part(url, f"{param}.url")
    if url.startswith(("https://", "http://")):
        return {"fileData": {"fileUri": url, "mimeType": _mime_of_url(url, f"{param}.url")}}
    raise unsupported(f"{param}.url", "an image URL that is neither data: nor http(s) is")


def _file(value: object, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(param, "a file part needs a file object.")
    data = value.get("file_data")
    if isinstance(data, str) and data:
        if data.startswith("data:"):
            return _data_part(data, f"{param}.file_data")
        return {"inlineData": {"mimeType": "application/pdf", "data": data}}
    if value.get("file_id") is not None:
        raise unsupported(f"{param}.file_id", "files uploaded to another vendor are")
    raise _bad(param, "a file part needs file_data.")


def _audio(value: object, param: str) -> dict[str, Any]:
    fmt = value.get("format") if isinstance(value, dict) else None
    data = value.get("data") if isinstance(value, dict) else None
    if fmt not in _AUDIO or not isinstance(data, str):
        raise _bad(param, "input_audio needs base64 data and a format of wav or mp3.")
    return {"inlineData": {"mimeType": _AUDIO[fmt], "data": data}}


def _parts(content: object, param: str, *, media: bool = True) -> list[dict[str, Any]]:
    """A message's content → Gemini parts (empty texts left out)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    if not isinstance(content, list):
        raise _bad(param, "content must be a string or a list of parts.")
    out = []
    for j, part in enumerate(content):
        ppath = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "refusal"):
            text = part.get(kind)
            if not isinstance(text, str):
                raise _bad(f"{ppath}.{kind}", "must be a string.")
            if text:
                out.append({"text": text})
        elif kind in ("image_url", "file", "input_audio") and media:
            reader = {"image_url": _image, "file": _file, "input_audio": _audio}[kind]
            out.append(reader(part.get(kind), f"{ppath}.{kind}"))
        else:
            raise unsupported(f"{ppath}.type", f"content parts of type {kind!r} here are")
    return out


def _text_of(content: object, param: str) -> str:
    return "".join(p["text"] for p in _parts(content, param, media=False))


def _function_response(content: object, param: str) -> dict[str, Any]:
    text = _text_of(content, param)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"result": text}


def _call_parts(calls: object, param: str, names: dict[str, str]) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise _bad(param, "tool_calls must be a list.")
    out = []
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str) or not name:
            raise _bad(f"{param}[{k}].function.name", "a tool call needs a function name.")
        arguments = function.get("arguments")
        try:
            args = orjson.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except orjson.JSONDecodeError:
            args = {}
        if isinstance(call.get("id"), str):
            names[call["id"]] = name
        out.append(
            {
                "functionCall": {"name": name, "args": args if isinstance(args, dict) else {}},
                "thoughtSignature": SKIP_SIGNATURE,
            }
        )
    return out


def _contents(messages: object) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system parts, contents) of the pivot's messages."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "messages must be a non-empty list.")
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id → function name, as the calls were made

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(param, "a message must be an object.")
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.extend(_parts(content, f"{param}.content", media=False))
        elif role == "user":
            add("user", _parts(content, f"{param}.content"))
        elif role == "assistant":
            parts = _parts(content, f"{param}.content", media=False)
            if message.get("tool_calls"):
                parts += _call_parts(message["tool_calls"], f"{param}.tool_calls", names)
            add("model", parts)
        elif role in ("tool", "function"):
            if role == "tool":
                call_id = message.get("tool_call_id")
                name = names.get(call_id) if isinstance(call_id, str) else None
                if name is None:
                    raise _bad(
                        f"{param}.tool_call_id",
                        "the tool message answers no tool call of an earlier assistant message.",
                    )
            else:
                name = message.get("name")
                if not isinstance(name, str) or not name:
                    raise _bad(f"{param}.name", "a function message needs the function's name.")
            response = _function_response(content, f"{param}.content")
            add("user", [{"functionResponse": {"name": name, "response": response}}])
        else:
            raise _bad(f"{param}.role", f"unknown role {role!r}.")
    return system, contents


def _tools(tools: object) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise _bad("tools", "tools must be a list.")
    declarations = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise unsupported(f"{param}.type", f"tools of type {kind!r} are")
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str) or not name:
            raise _bad(f"{param}.function.name", "a function needs a name.")
        declaration: dict[str, Any] = {"name": name}
        if isinstance(function.get("description"), str) and function["description"]:
            declaration["description"] = function["description"]
        parameters = convert(function.get("parameters"), f"{param}.function.parameters")
        if parameters.get("properties"):  # Gemini refuses an OBJECT without properties
            declaration["parameters"] = parameters
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}] if declarations else []


def _tool_config(choice: object) -> dict[str, Any]:
    if isinstance(choice, str) and choice in _TOOL_CHOICE:
        return {"functionCallingConfig": {"mode": _TOOL_CHOICE[choice]}}
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if isinstance(name, str) and name:
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
    raise _bad("tool_choice", "tool_choice must be auto, none, required or a named function.")


def _response_format(value: object, config: dict[str, Any]) -> None:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_object":
        config["responseMimeType"] = "application/json"
    elif kind == "json_schema":
        spec = value.get("json_schema") if isinstance(value, dict) else None
        schema = spec.get("schema") if isinstance(spec, dict) else None
        config["responseMimeType"] = "application/json"
        if isinstance(schema, dict):
            config["responseSchema"] = convert(
                schema, "response_format.json_schema.schema", ordered=True
            )
    elif kind != "text":
        raise _bad("response_format.type", "must be text, json_object or json_schema.")


def _generation(body: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        config["maxOutputTokens"] = limit
    for pivot, gemini in (
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ):
        if body.get(pivot) is not None:
            config[gemini] = body[pivot]
    if isinstance(body.get("n"), int) and body["n"] > 1:
        config["candidateCount"] = body["n"]
    stop = body.get("stop")
    if isinstance(stop, str) and stop:
        config["stopSequences"] = [stop]
    elif isinstance(stop, list) and stop:
        config["stopSequences"] = stop
    if body.get("response_format") is not None:
        _response_format(body["response_format"], config)
    if body.get("logprobs"):
        config["responseLogprobs"] = True
        if isinstance(body.get("top_logprobs"), int):
            config["logprobs"] = body["top_logprobs"]
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in THINKING_BUDGET:
            raise unsupported("reasoning_effort", f"the reasoning effort {effort!r} is")
        budget = THINKING_BUDGET[effort]
        config["thinkingConfig"] = (
            {"thinkingBudget": budget, "includeThoughts": True} if budget else {"thinkingBudget": 0}
        )
    return config


def _refuse(body: dict[str, Any]) -> None:
    for name, what in _UNSUPPORTED.items():
        if body.get(name):
            raise unsupported(name, what)
    modalities = body.get("modalities")
    if isinstance(modalities, list) and any(m != "text" for m in modalities):
        raise unsupported("modalities", "output modalities other than text are")


def _embeddings(body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise unsupported("input", "embedding inputs other than texts (token ids) are")
    model = model_name(upstream_model)
    requests = []
    for text in texts:
        request: dict[str, Any] = {"model": model, "content": {"parts": [{"text": text}]}}
        if body.get("dimensions") is not None:
            request["outputDimensionality"] = body["dimensions"]
        requests.append(request)
    return {"requests": requests}


def model_name(upstream_model: str) -> str:
    """The model's resource name (``models/…``; ``tunedModels/…`` as given)."""
    name = upstream_model.strip().removeprefix("models/")
    return name if name.startswith("tunedModels/") else f"models/{name}"


def from_chat(body: dict[str, Any], upstream_model: str, stream: bool) -> dict[str, Any]:
    """The pivot body → a ``generateContent`` (or ``batchEmbedContents``) body."""
    if "messages" not in body and "input" in body:
        return _embeddings(body, upstream_model)
    if "messages" not in body:
        raise unsupported("prompt", "text completions (a prompt without messages) are")
    _refuse(body)
    system, contents = _contents(body["messages"])
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": system}
    if body.get("tools"):
        tools = _tools(body["tools"])
        if tools:
            out["tools"] = tools
            if body.get("tool_choice") is not None:
                out["toolConfig"] = _tool_config(body["tool_choice"])
    config = _generation(body)
    if config:
        out["generationConfig"] = config
    return out
