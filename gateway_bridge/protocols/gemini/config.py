"""Gemini's tools, ``toolConfig`` and ``generationConfig`` → the pivot's
``tools``, ``tool_choice``, sampling fields and ``reasoning_effort``.

* ``functionDeclarations[].parameters`` (Gemini's OpenAPI subset: upper-case
  types, ``nullable``, ``propertyOrdering``) become JSON schema;
  ``parametersJsonSchema`` is passed as it is. The built-in tools
  (``googleSearch``, ``codeExecution``, ``urlContext``, ...) have no pivot form:
  they are recorded as untranslatable (a Gemini channel takes them natively).
* ``toolConfig`` modes map to ``tool_choice``: ``AUTO``/``VALIDATED`` →
  ``auto``, ``NONE`` → ``none``, ``ANY`` → ``required`` (or the one named
  function when ``allowedFunctionNames`` names exactly one).
* ``generationConfig``: ``maxOutputTokens``, ``temperature``, ``topP``,
  ``candidateCount``, ``stopSequences``, ``seed``, ``presencePenalty`` and
  ``frequencyPenalty`` are forwarded; ``responseMimeType: application/json``
  (with ``responseSchema`` / ``responseJsonSchema``) becomes
  ``response_format``; ``responseLogprobs`` / ``logprobs`` become
  ``logprobs`` / ``top_logprobs`` (a channel without log probabilities refuses
  them by name); ``topK`` and ``safetySettings`` are validated and not
  forwarded; non-text ``responseModalities``, ``speechConfig`` and
  ``imageConfig`` are untranslatable.
* ``thinkingConfig`` → ``reasoning_effort`` (``EFFORT_OF_LEVEL`` and
  ``effort_of_budget``): ``thinkingLevel`` MINIMAL/LOW/MEDIUM/HIGH → the same
  effort; ``thinkingBudget`` 0 → ``none``, 1 to 1024 → ``low``, 1025 to 8192 →
  ``medium``, more → ``high``, -1 (dynamic) → no effort (the model's default).
  Google's table the other way (``vendors.gemini``: low 1024, medium 8192,
  high 24576, none 0) reads back to the same effort. ``includeThoughts``
  decides whether the answer's ``reasoning_content`` comes back as thought
  parts (``answer.GenerateResponse``).
"""

from __future__ import annotations

from typing import Any

from gateway_bridge.protocols.gemini.request import (
    DECLARATION,
    GENERATION,
    MAX_CANDIDATES,
    MAX_LOGPROBS,
    MAX_STOP,
    MODES,
    NAME,
    SCHEMA_TYPES,
    THINKING,
    TOOL,
    array,
    bad,
    boolean,
    camel,
    enum,
    fields,
    integer,
    join,
    number,
    snake,
    string,
)

EFFORT_OF_LEVEL = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}
_LEVELS = {"THINKING_LEVEL_UNSPECIFIED", *EFFORT_OF_LEVEL}


def effort_of_budget(budget: int) -> str | None:
    """A ``thinkingBudget`` → the pivot's ``reasoning_effort`` (None: dynamic)."""
    if budget < 0:
        return None
    if budget == 0:
        return "none"
    if budget <= 1024:
        return "low"
    if budget <= 8192:
        return "medium"
    return "high"


NO_FACTS = {
    "n": None,
    "max_tokens": None,
    "temperature": None,
    "seed": None,
    "include_thoughts": False,
}


def schema_of(value: object, path: str) -> dict[str, Any]:
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
            out["properties"] = {k: schema_of(v, f"{path}.properties.{k}") for k, v in item.items()}
        elif name == "items":
            out["items"] = schema_of(item, f"{path}.items")
        elif name == "anyOf":
            out["anyOf"] = [
                schema_of(v, f"{path}.any_of[{i}]")
                for i, v in enumerate(array(item, f"{path}.any_of"))
            ]
        elif name in ("propertyOrdering", "example"):
            continue
        else:
            out[name] = item
    if nullable and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def tools_of(value: object, body: dict[str, Any], lost: list[str]) -> list[str]:
    """Validate ``tools``; the function declarations go to ``body[\"tools\"]``,
    the built-in tools to ``lost``. Returns the declared names."""
    tools: list[dict[str, Any]] = []
    names: list[str] = []
    for i, tool in enumerate(array(value, "tools")):
        path = f"tools[{i}]"
        tool = fields(tool, path, TOOL)
        for name in tool:
            if name != "functionDeclarations":
                lost.append(f"{join(path, name)}: the built-in tool {name}")
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
                function["parameters"] = schema_of(decl["parameters"], f"{dpath}.parameters")
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


def tool_config_of(value: object, names: list[str], body: dict[str, Any]) -> None:
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


def _response_format(config: dict[str, Any], path: str, body: dict[str, Any]) -> None:
    """``responseMimeType`` with ``responseSchema`` / ``responseJsonSchema`` →
    the pivot's ``response_format``."""
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema")
    if config.get("responseSchema") is not None:
        if schema is not None:
            raise bad(path, "set response_schema or response_json_schema, not both.")
        schema = schema_of(config["responseSchema"], f"{path}.response_schema")
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


def _logprobs(config: dict[str, Any], path: str, body: dict[str, Any]) -> None:
    """``logprobs`` (needs ``responseLogprobs``) and ``responseLogprobs`` → the
    pivot's ``top_logprobs`` and ``logprobs``."""
    if config.get("logprobs") is not None:
        top = integer(config["logprobs"], f"{path}.logprobs", 0, MAX_LOGPROBS)
        if not config.get("responseLogprobs"):
            raise bad(f"{path}.logprobs", "logprobs needs response_logprobs set to true.")
        body["top_logprobs"] = top
    if config.get("responseLogprobs"):
        body["logprobs"] = True  # rendered back as logprobsResult (answer.GenerateResponse)


def generation_of(value: object, body: dict[str, Any], lost: list[str]) -> dict[str, Any]:
    """Validate ``generationConfig`` and copy what the pivot carries to ``body``;
    returns the facts the call needs (n, max_tokens, temperature, seed,
    include_thoughts)."""
    path = "generation_config"
    config = fields(value, path, GENERATION)
    facts: dict[str, Any] = dict(NO_FACTS)
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
    _response_format(config, path, body)
    modalities = config.get("responseModalities")
    if modalities is not None:
        for i, m in enumerate(array(modalities, f"{path}.response_modalities")):
            if string(m, f"{path}.response_modalities[{i}]").upper() != "TEXT":
                lost.append(f"{path}.response_modalities[{i}]: the {m} output modality")
    if config.get("thinkingConfig") is not None:
        _thinking(config["thinkingConfig"], f"{path}.thinking_config", body, facts)
    for name in ("responseLogprobs", "enableEnhancedCivicAnswers"):
        if config.get(name) is not None:
            boolean(config[name], f"{path}.{snake(name)}")
    _logprobs(config, path, body)
    for name, what in (("speechConfig", "speech output"), ("imageConfig", "image output")):
        if config.get(name) is not None:
            lost.append(f"{path}.{snake(name)}: {what}")
    return facts


def _thinking(value: object, path: str, body: dict[str, Any], facts: dict[str, Any]) -> None:
    thinking = fields(value, path, THINKING)
    effort = None
    if thinking.get("thinkingBudget") is not None:
        effort = effort_of_budget(
            integer(thinking["thinkingBudget"], f"{path}.thinking_budget", -1)
        )
    if thinking.get("thinkingLevel") is not None:
        level = enum(thinking["thinkingLevel"], f"{path}.thinking_level", _LEVELS)
        effort = EFFORT_OF_LEVEL.get(level, effort)
    if effort is not None:
        body["reasoning_effort"] = effort
    if thinking.get("includeThoughts") is not None:
        facts["include_thoughts"] = boolean(thinking["includeThoughts"], f"{path}.include_thoughts")
