"""Gemini requests → the node's OpenAI chat or embeddings body.

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
* The built-in tools (``googleSearch``, ``codeExecution``, ``urlContext``, ...)
  and ``cachedContent`` are refused with a 400 that says they are not
  supported: the nodes cache prefixes on their own.
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
* The prompt estimate (also the ``countTokens`` answer) and the affinity
  prefix come from the translated body (``protocols.estimate``), as for every
  protocol.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from gateway_bridge.protocols.base import CallRequest, dumps
from gateway_bridge.protocols.checks import ID_CHARS, json_object
from gateway_bridge.protocols.estimate import chat_prompt, texts_prompt
from gateway_bridge.protocols.gemini.answer import EmbedResponse, GenerateResponse
from gateway_bridge.protocols.gemini.request import (
    CONTENT,
    DECLARATION,
    EMBED,
    GENERATION,
    MAX_CANDIDATES,
    MAX_STOP,
    MODES,
    NAME,
    PART,
    REQUEST,
    SCHEMA_TYPES,
    THINKING,
    TOOL,
    UNSUPPORTED_PARTS,
    array,
    bad,
    boolean,
    call_args,
    camel,
    check_safety,
    embed_options,
    embed_text,
    enum,
    fields,
    integer,
    join,
    missing_responses,
    model_name,
    number,
    part_text,
    snake,
    string,
    unsupported,
)

CHAT_PATH = "/v1/chat/completions"
EMBED_PATH = "/v1/embeddings"


class _Turns:
    """Gemini contents → OpenAI messages, pairing function calls with responses."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.open: list[tuple[str, str]] = []  # (call id, function name) not answered yet

    def add(self, index: int, content: object) -> None:
        path = f"contents[{index}]"
        content = fields(content, path, CONTENT)
        role = content.get("role") or "user"
        role = string(role, f"{path}.role")
        if role not in ("user", "model", "function", "tool"):
            raise bad(f"{path}.role", f'Please use a valid role: user, model (got "{role}").')
        parts = array(content.get("parts", []), f"{path}.parts")
        if not parts:
            raise bad(f"{path}.parts", "contents.parts must not be empty.")
        if role == "model":
            self._model(index, parts)
        else:
            self._user(index, parts)

    def _parts(self, index: int, parts: list):
        for i, part in enumerate(parts):
            ppath = f"contents[{index}].parts[{i}]"
            part = fields(part, ppath, PART)
            for name, what in UNSUPPORTED_PARTS.items():
                if name in part:
                    raise unsupported(join(ppath, name), what)
            yield ppath, part

    def _model(self, index: int, parts: list) -> None:
        if self.open:
            raise missing_responses(index, self.open)
        texts: list[str] = []
        calls: list[dict] = []
        for ppath, part in self._parts(index, parts):
            if part.get("thought") is not None and boolean(part["thought"], f"{ppath}.thought"):
                continue  # earlier thoughts are not sent back to the model
            text = part_text(part, ppath)
            if text:
                texts.append(text)
            if part.get("functionCall") is not None:
                fpath = f"{ppath}.function_call"
                call = fields(part["functionCall"], fpath, {"id", "name", "args"})
                if "name" not in call:
                    raise bad(f"{fpath}.name", "Name cannot be empty.")
                name = string(call["name"], f"{fpath}.name")
                if not NAME.match(name):
                    raise bad(f"{fpath}.name", f"Invalid function name: {name!r}.")
                own = call.get("id")
                call_id = ID_CHARS.sub("", string(own, f"{fpath}.id")) if own else ""
                call_id = call_id or f"call_{index}_{len(calls)}"
                arguments = dumps(call_args(call.get("args"), f"{fpath}.args")).decode()
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
            text = part_text(part, ppath)
            if text:
                texts.append(text)
            if part.get("functionCall") is not None:
                raise bad(
                    f"{ppath}.function_call", "function calls are only allowed in model turns."
                )
            if part.get("functionResponse") is not None:
                results.append(self._response(part["functionResponse"], f"{ppath}"))
        if self.open and not results:
            raise missing_responses(index - 1, self.open)
        self.messages.extend(results)
        if texts:
            self.messages.append({"role": "user", "content": "\n".join(texts)})

    def _response(self, value: object, ppath: str) -> dict:
        fpath = f"{ppath}.function_response"
        response = fields(
            value, fpath, {"id", "name", "response", "willContinue", "scheduling", "parts"}
        )
        if "name" not in response:
            raise bad(f"{fpath}.name", "Name cannot be empty.")
        name = string(response["name"], f"{fpath}.name")
        own = response.get("id")
        wanted = ID_CHARS.sub("", string(own, f"{fpath}.id")) if own else None
        for i, (call_id, call_name) in enumerate(self.open):
            if (wanted and call_id == wanted) or (not wanted and call_name == name):
                del self.open[i]
                break
        else:
            raise bad(
                fpath,
                f"function response '{name}' does not answer a function call of the previous "
                "model turn.",
            )
        body = response.get("response")
        if body is not None and not isinstance(body, dict):
            raise bad(f"{fpath}.response", "response must be an object (a JSON struct)")
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "content": dumps(body or {}).decode(),
        }


def _system(value: object) -> str:
    if isinstance(value, str):  # the REST API takes a Content; some clients send text
        return value
    content = fields(value, "system_instruction", CONTENT)
    texts = []
    for i, part in enumerate(array(content.get("parts", []), "system_instruction.parts")):
        ppath = f"system_instruction.parts[{i}]"
        part = fields(part, ppath, PART)
        text = part_text(part, ppath)
        if text is None:
            raise bad(ppath, "system instructions take text parts only.")
        texts.append(text)
    return "\n".join(t for t in texts if t)


def _schema(value: object, path: str) -> dict:
    """Gemini's OpenAPI schema subset → JSON schema."""
    if not isinstance(value, dict):
        raise bad(path, "a schema must be an object")
    out: dict[str, Any] = {}
    nullable = False
    for key, item in value.items():
        name = camel(key)
        if name == "type":
            kind = string(item, f"{path}.type").upper()
            if kind == "TYPE_UNSPECIFIED":
                continue
            if kind not in SCHEMA_TYPES:
                raise bad(f"{path}.type", f'unknown type "{item}".')
            out["type"] = kind.lower()
        elif name == "nullable":
            nullable = boolean(item, f"{path}.nullable")
        elif name == "properties":
            if not isinstance(item, dict):
                raise bad(f"{path}.properties", "properties must be an object")
            out["properties"] = {k: _schema(v, f"{path}.properties.{k}") for k, v in item.items()}
        elif name == "items":
            out["items"] = _schema(item, f"{path}.items")
        elif name == "anyOf":
            out["anyOf"] = [
                _schema(v, f"{path}.any_of[{i}]")
                for i, v in enumerate(array(item, f"{path}.any_of"))
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
    for i, tool in enumerate(array(value, "tools")):
        path = f"tools[{i}]"
        tool = fields(tool, path, TOOL)
        for name in tool:
            if name != "functionDeclarations":
                raise unsupported(join(path, name), f"the built-in tool '{name}' is")
        for j, decl in enumerate(array(tool.get("functionDeclarations", []), path)):
            dpath = f"{path}.function_declarations[{j}]"
            decl = fields(decl, dpath, DECLARATION)
            if "name" not in decl:
                raise bad(f"{dpath}.name", "Name cannot be empty.")
            name = string(decl["name"], f"{dpath}.name")
            if not NAME.match(name):
                raise bad(
                    f"{dpath}.name",
                    "Invalid function name. Must start with a letter or an underscore. Must be "
                    "alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or "
                    "dashes (-), with a maximum length of 128.",
                )
            if name in names:
                raise bad(f"{dpath}.name", f"Duplicate function declaration: {name}.")
            function: dict[str, Any] = {"name": name}
            if decl.get("description") is not None:
                function["description"] = string(decl["description"], f"{dpath}.description")
            if decl.get("parameters") is not None and decl.get("parametersJsonSchema") is not None:
                raise bad(dpath, "set parameters or parameters_json_schema, not both.")
            if decl.get("parameters") is not None:
                function["parameters"] = _schema(decl["parameters"], f"{dpath}.parameters")
            elif decl.get("parametersJsonSchema") is not None:
                schema = decl["parametersJsonSchema"]
                if not isinstance(schema, dict):
                    raise bad(f"{dpath}.parameters_json_schema", "a schema must be an object")
                function["parameters"] = schema
            else:
                function["parameters"] = {"type": "object", "properties": {}}
            tools.append({"type": "function", "function": function})
            names.append(name)
    if tools:
        body["tools"] = tools
    return names


def _tool_config(value: object, names: list[str], body: dict) -> None:
    config = fields(value, "tool_config", {"functionCallingConfig", "retrievalConfig"})
    calling = config.get("functionCallingConfig")
    if calling is None:
        return
    path = "tool_config.function_calling_config"
    calling = fields(calling, path, {"mode", "allowedFunctionNames"})
    mode = calling.get("mode")
    mode = "AUTO" if mode is None else enum(mode, f"{path}.mode", MODES)
    allowed = [
        string(n, f"{path}.allowed_function_names[{i}]")
        for i, n in enumerate(array(calling.get("allowedFunctionNames", []), path))
    ]
    for name in allowed:
        if name not in names:
            raise bad(f"{path}.allowed_function_names", f"'{name}' is not a declared function.")
    if allowed and mode != "ANY":
        raise bad(f"{path}.allowed_function_names", "allowed_function_names needs mode set to ANY.")
    if not names:
        if mode == "ANY":
            raise bad(path, "mode ANY needs function declarations in tools.")
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


def _generation(value: object, body: dict) -> dict:
    """Validate ``generationConfig`` and copy what the node understands."""
    path = "generation_config"
    config = fields(value, path, GENERATION)
    facts: dict[str, Any] = {"n": None, "max_tokens": None, "temperature": None, "seed": None}
    if config.get("maxOutputTokens") is not None:
        facts["max_tokens"] = integer(config["maxOutputTokens"], f"{path}.max_output_tokens", 1)
        body["max_tokens"] = facts["max_tokens"]
    if config.get("candidateCount") is not None:
        n = integer(config["candidateCount"], f"{path}.candidate_count", 1, MAX_CANDIDATES)
        facts["n"] = n
        if n != 1:
            body["n"] = n
    if config.get("temperature") is not None:
        facts["temperature"] = number(config["temperature"], f"{path}.temperature", 0, 2)
        body["temperature"] = facts["temperature"]
    if config.get("topP") is not None:
        body["top_p"] = number(config["topP"], f"{path}.top_p", 0, 1)
    if config.get("topK") is not None:
        integer(config["topK"], f"{path}.top_k", 1)
    for name in ("presencePenalty", "frequencyPenalty"):
        if config.get(name) is not None:
            body[snake(name)] = number(config[name], f"{path}.{snake(name)}", -2, 2)
    if config.get("seed") is not None:
        facts["seed"] = integer(config["seed"], f"{path}.seed")
        body["seed"] = facts["seed"]
    if config.get("stopSequences") is not None:
        stops = [
            string(s, f"{path}.stop_sequences[{i}]")
            for i, s in enumerate(array(config["stopSequences"], f"{path}.stop_sequences"))
        ]
        if len(stops) > MAX_STOP:
            raise bad(f"{path}.stop_sequences", f"at most {MAX_STOP} stop sequences.")
        if stops:
            body["stop"] = stops
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema")
    if config.get("responseSchema") is not None:
        if schema is not None:
            raise bad(path, "set response_schema or response_json_schema, not both.")
        schema = _schema(config["responseSchema"], f"{path}.response_schema")
    if mime is not None:
        mime = enum(mime, f"{path}.response_mime_type", {"text/plain", "application/json"})
    if schema is not None:
        if mime != "application/json":
            raise bad(
                f"{path}.response_mime_type",
                "response_mime_type must be application/json when a response schema is set.",
            )
        if not isinstance(schema, dict):
            raise bad(f"{path}.response_json_schema", "a schema must be an object")
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": schema},
        }
    elif mime == "application/json":
        body["response_format"] = {"type": "json_object"}
    modalities = config.get("responseModalities")
    if modalities is not None:
        for i, m in enumerate(array(modalities, f"{path}.response_modalities")):
            if string(m, f"{path}.response_modalities[{i}]").upper() != "TEXT":
                raise unsupported(f"{path}.response_modalities", f"the {m} modality is")
    if config.get("thinkingConfig") is not None:
        thinking = fields(config["thinkingConfig"], f"{path}.thinking_config", THINKING)
        if thinking.get("thinkingBudget") is not None:
            integer(thinking["thinkingBudget"], f"{path}.thinking_config.thinking_budget", -1)
        if thinking.get("includeThoughts") is not None:
            boolean(thinking["includeThoughts"], f"{path}.thinking_config.include_thoughts")
    for name in ("responseLogprobs", "enableEnhancedCivicAnswers"):
        if config.get(name) is not None:
            boolean(config[name], f"{path}.{snake(name)}")
    if config.get("speechConfig") is not None or config.get("imageConfig") is not None:
        raise unsupported(path, "speech and image output are")
    return facts


def _parse_contents(body: dict) -> _Turns:
    if "contents" not in body:
        raise bad("GenerateContentRequest.contents", "contents is not specified")
    contents = array(body["contents"], "contents")
    if not contents:
        raise bad("GenerateContentRequest.contents", "contents is not specified")
    turns = _Turns()
    for index, content in enumerate(contents):
        turns.add(index, content)
    if turns.open:
        # The conversation ends on a model turn with calls: nothing to generate.
        raise missing_responses(len(contents) - 1, turns.open)
    return turns


def _request(body: object) -> tuple[dict, list[dict], list[str], dict]:
    """Validate a GenerateContentRequest: (fields, messages, function names,
    OpenAI body without model and messages)."""
    json_object(body)
    body = fields(body, "", REQUEST)
    if body.get("cachedContent") is not None:
        raise unsupported("cached_content", "cached contents are")
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
        check_safety(body["safetySettings"])
    if body.get("labels") is not None and not isinstance(body["labels"], dict):
        raise bad("labels", "labels must be an object")
    facts = {"n": None, "max_tokens": None, "temperature": None, "seed": None}
    if body.get("generationConfig") is not None:
        facts = _generation(body["generationConfig"], out)
    return facts, messages, names, out


def parse_generate(
    path_model: str | None, body: object, *, stream: bool, alt_sse: bool
) -> CallRequest:
    """``:generateContent`` / ``:streamGenerateContent`` → a chat completion call."""
    facts, messages, names, out = _request(body)
    model = model_name(path_model, body.get("model") if isinstance(body, dict) else None)
    forward = {"model": model, "messages": messages, **out}
    if stream:
        forward["stream"] = True
    estimate, prefix = chat_prompt(forward["messages"], forward.get("tools"))
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
        prefix_text=prefix,
        deterministic=deterministic,
        response=GenerateResponse(
            input_estimate=estimate, stream=stream, alt_sse=alt_sse, tool_names=names
        ),
        extra={"tool_names": names} if names else {},
    )


def count_tokens(path_model: str | None, body: object) -> bytes:
    """``:countTokens``: ``{"contents": [...]}`` or ``{"generateContentRequest": {...}}``
    → ``{"totalTokens": n}`` by the documented tokenizer rule."""
    json_object(body)
    body = fields(body, "", {"contents", "generateContentRequest"})
    if "generateContentRequest" in body:
        if "contents" in body:
            raise bad("", "set contents or generate_content_request, not both.")
        _, messages, _, out = _request(body["generateContentRequest"])
    else:
        messages = _parse_contents(body).messages
        out = {}
    return dumps({"totalTokens": chat_prompt(messages, out.get("tools"))[0]})


def _embed_call(model: str, texts: list[str], dims: int | None, endpoint: str) -> CallRequest:
    forward: dict[str, Any] = {"model": model, "input": texts if len(texts) > 1 else texts[0]}
    if dims is not None:
        forward["dimensions"] = dims
    tokens, prefix = texts_prompt(texts)
    return CallRequest(
        protocol="gemini",
        endpoint=endpoint,
        model=model,
        upstream_path=EMBED_PATH,
        body=forward,
        stream=False,
        client_wants_usage=True,
        max_output_tokens=0,
        prompt_tokens_estimate=tokens,
        prefix_text=prefix,
        deterministic=True,
        response=EmbedResponse(batch=endpoint == "batchEmbedContents"),
    )


def parse_embed(path_model: str | None, body: object) -> CallRequest:
    """``:embedContent`` → an embeddings call for one text."""
    json_object(body)
    request = fields(body, "", EMBED)
    model = model_name(path_model, request.get("model"))
    text = embed_text(request, "")
    dims = embed_options(request, "")
    return _embed_call(model, [text], dims, "embedContent")


def parse_batch_embed(path_model: str | None, body: object) -> CallRequest:
    """``:batchEmbedContents`` → one embeddings call for all the texts."""
    json_object(body)
    body = fields(body, "", {"requests"})
    model = model_name(path_model)
    requests = array(body.get("requests"), "requests")
    if not requests:
        raise bad("requests", "requests must not be empty.")
    texts: list[str] = []
    dims: set[int | None] = set()
    for i, request in enumerate(requests):
        path = f"requests[{i}]"
        request = fields(request, path, EMBED)
        own = request.get("model")
        if own is not None and model_name(None, string(own, f"{path}.model")) != model:
            raise bad(
                f"{path}.model",
                f"Model {own} differs from the model in the URL (models/{model}).",
            )
        texts.append(embed_text(request, path))
        dims.add(embed_options(request, path))
    if len(dims) > 1:
        raise bad("requests", "every request must ask for the same output_dimensionality.")
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
