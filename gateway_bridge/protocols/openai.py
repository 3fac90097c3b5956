"""The OpenAI protocol: chat completions, completions, embeddings and the model list.

Requests are validated the way OpenAI validates them (the same error
messages, ``param`` and ``code``), unknown fields included: OpenAI answers
``Unrecognized request argument supplied: <name>``, and so does the gateway.
Only known fields reach the node; ``metadata``, ``store``, ``service_tier`` and
the other account-side fields are accepted and dropped. Answers are the
node's own OpenAI bodies with the public model name and the usage written
from the mapped ``TokenUsage`` (so ``prompt_tokens_details.cached_tokens`` is
what was billed). In a stream the usage-only chunk and the ``usage`` field of
the other chunks reach the client only when it asked with
``stream_options.include_usage``, as with OpenAI.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from console import tokens as tokenizer
from console.tokens import template_messages
from gateway_bridge.protocols import base
from gateway_bridge.protocols.base import CallRequest, GatewayError, ModelInfo, dumps, invalid, sse
from gateway_bridge.usage_mapping import TokenUsage, from_openai, to_openai

PROTOCOL = "openai"
MAX_N = 16  # the nodes' limit (OpenAI's is 128)
MAX_STOP = 4
# How much of the rendered prompt prefix-affinity routing gets to hash.
PREFIX_CHARS = 4096
ROLES = ("system", "assistant", "user", "function", "tool", "developer")
UNSUPPORTED_PARTS = {"image_url": "image", "input_audio": "audio", "file": "file"}
DONE = b"data: [DONE]\n\n"

# Fields forwarded to the node, per endpoint; IGNORED ones are accepted and dropped.
_SAMPLING = {
    "model", "n", "max_tokens", "temperature", "top_p", "seed", "stop", "stream",
    "stream_options", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "user",
}  # fmt: skip
CHAT_FIELDS = _SAMPLING | {
    "messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "top_logprobs",
}  # fmt: skip
COMPLETION_FIELDS = _SAMPLING | {"prompt", "suffix", "echo", "best_of"}
EMBEDDING_FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
IGNORED = {"metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"}
DEPRECATED = {"functions": "tools", "function_call": "tool_choice"}

ERROR_TYPES = {
    base.INVALID_REQUEST: "invalid_request_error",
    base.AUTHENTICATION: "authentication_error",
    base.PAYMENT_REQUIRED: "insufficient_quota",
    base.PERMISSION: "permission_error",
    base.NOT_FOUND: "not_found_error",
    base.REQUEST_TOO_LARGE: "invalid_request_error",
    base.UNSUPPORTED_MEDIA: "invalid_request_error",
    base.RATE_LIMIT: "rate_limit_error",
    base.INTERNAL: "server_error",
    base.UPSTREAM: "server_error",
    base.OVERLOADED: "server_error",
    base.TIMEOUT: "timeout_error",
}


# -- errors ---------------------------------------------------------------------------------


def error_object(err: GatewayError) -> dict:
    return {
        "message": err.message,
        "type": ERROR_TYPES.get(err.kind, "server_error"),
        "param": err.param,
        "code": err.code,
    }


def error_body(err: GatewayError) -> bytes:
    return dumps({"error": error_object(err)})


def error_response(err: GatewayError) -> tuple[int, bytes]:
    return err.status, error_body(err)


def render_models(models: list[ModelInfo], owned_by: str = "system") -> bytes:
    data = [
        {"id": m.name, "object": "model", "created": m.created, "owned_by": owned_by}
        for m in models
    ]
    return dumps({"object": "list", "data": data})


# -- field checks (OpenAI's wording) ---------------------------------------------------------

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "decimal": "a decimal",
    "boolean": "a boolean",
    "object": "an object",
    "array": "an array",
}


def _got(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _type_error(param: str, expected: str, value: object) -> GatewayError:
    return invalid(
        f"Invalid type for '{param}': expected {_TYPE_NAMES[expected]}, "
        f"but got {_got(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _missing(param: str) -> GatewayError:
    return invalid(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _bad_value(param: str, message: str) -> GatewayError:
    return invalid(message, param=param, code="invalid_value")


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_number(value: object) -> bool:
    return type(value) in (int, float)


def _int(body: dict, name: str, low: int | None = None, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value):
        raise _type_error(name, "integer", value)
    _bounds(name, "integer", value, low, high)
    return value


def _number(body: dict, name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_number(value):
        raise _type_error(name, "decimal", value)
    _bounds(name, "decimal", value, low, high)
    return value


def _bounds(name: str, kind: str, value, low, high) -> None:
    if low is not None and value < low:
        raise invalid(
            f"Invalid '{name}': {kind} below minimum value. Expected a value >= {low}, "
            f"but got {value} instead.",
            param=name,
            code=f"{kind}_below_min_value",
        )
    if high is not None and value > high:
        raise invalid(
            f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high}, "
            f"but got {value} instead.",
            param=name,
            code=f"{kind}_above_max_value",
        )


def _bool(body: dict, name: str) -> bool | None:
    value = body.get(name)
    if value is not None and type(value) is not bool:
        raise _type_error(name, "boolean", value)
    return value


def _string(body: dict, name: str, choices: tuple[str, ...] | None = None) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _type_error(name, "string", value)
    if choices is not None and value not in choices:
        raise _bad_value(
            name, f"Invalid value: '{value}'. Supported values are: {_listing(choices)}."
        )
    return value


def _object(body: dict, name: str) -> dict | None:
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise _type_error(name, "object", value)
    return value


def _listing(choices) -> str:
    quoted = [f"'{c}'" for c in choices]
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def _check_fields(body: object, known: set[str]) -> dict:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", code="invalid_json", param=None)
    for name in body:
        if name in known or name in IGNORED:
            continue
        if name in DEPRECATED:
            raise invalid(
                f"'{name}' is deprecated and not supported here; use '{DEPRECATED[name]}'.",
                param=name,
                code="unsupported_parameter",
            )
        raise invalid(
            f"Unrecognized request argument supplied: {name}", param=name, code="unknown_parameter"
        )
    return body


def _model(body: dict) -> str:
    value = body.get("model")
    if value is None:
        raise invalid("you must provide a model parameter", param="model", code="missing_model")
    if not isinstance(value, str) or not value:
        raise _type_error("model", "string", value)
    return value


def _sampling(body: dict) -> tuple[bool, bool, int | None]:
    """The checks the generation endpoints share; returns (stream, include_usage, n)."""
    n = _int(body, "n", 1, MAX_N)
    _number(body, "temperature", 0, 2)
    _number(body, "top_p", 0, 1)
    _number(body, "presence_penalty", -2, 2)
    _number(body, "frequency_penalty", -2, 2)
    _int(body, "seed")
    _string(body, "user")
    _stop(body)
    _logit_bias(body)
    _metadata(body)
    _bool(body, "store")
    _string(body, "service_tier", ("auto", "default", "flex", "scale", "priority"))
    stream = bool(_bool(body, "stream"))
    options = _object(body, "stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise _bad_value(
                "stream_options",
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            )
        for key in options:
            if key not in ("include_usage", "include_obfuscation"):
                raise invalid(
                    f"Unrecognized request argument supplied: stream_options.{key}",
                    param=f"stream_options.{key}",
                    code="unknown_parameter",
                )
        include_usage = bool(_bool(options, "include_usage"))
    return stream, include_usage, n


def _stop(body: dict) -> None:
    value = body.get("stop")
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list):
        raise _type_error("stop", "string", value)
    if len(value) > MAX_STOP:
        raise invalid(
            f"Invalid 'stop': array too long. Expected an array with maximum length {MAX_STOP}, "
            f"but got an array with length {len(value)} instead.",
            param="stop",
            code="array_above_max_length",
        )
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _type_error(f"stop[{i}]", "string", item)


def _logit_bias(body: dict) -> None:
    bias = _object(body, "logit_bias")
    for key, value in (bias or {}).items():
        if not key.isdigit():
            raise _bad_value("logit_bias", f"Invalid key in 'logit_bias': {key}.")
        if not _is_number(value) or not -100 <= value <= 100:
            raise _bad_value(
                "logit_bias", f"Invalid value for 'logit_bias': {key} must be between -100 and 100."
            )


def _metadata(body: dict) -> None:
    metadata = _object(body, "metadata")
    if metadata is None:
        return
    if len(metadata) > 16:
        raise _bad_value("metadata", "Invalid 'metadata': at most 16 keys are allowed.")
    for key, value in metadata.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise _bad_value(
                f"metadata.{key}",
                "Invalid 'metadata': keys are strings of at most 64 characters and values "
                "strings of at most 512.",
            )


def _forward(body: dict, known: set[str]) -> dict:
    return {k: v for k, v in body.items() if v is not None and k in known}


# -- chat ----------------------------------------------------------------------------------


def _content_text(
    param: str, content: object, *, parts: tuple[str, ...], media: bool = False
) -> str:
    """The text of a message's content (a string or a list of parts of the given types)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _type_error(param, "string", content)
    texts = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        if not isinstance(part, dict):
            raise _type_error(where, "object", part)
        kind = part.get("type")
        if media and kind in UNSUPPORTED_PARTS:
            raise invalid(
                f"Content parts of type '{kind}' are not supported: this gateway's models take "
                f"text only (no {UNSUPPORTED_PARTS[kind]} input).",
                param=f"{where}.type",
                code="unsupported_content_type",
            )
        if kind not in parts:
            raise _bad_value(
                f"{where}.type",
                f"Invalid value: '{kind}'. Supported values are: {_listing(parts)}.",
            )
        key = "refusal" if kind == "refusal" else "text"
        text = part.get(key)
        if not isinstance(text, str):
            raise _type_error(f"{where}.{key}", "string", text)
        if kind == "text":
            texts.append(text)
    return "\n".join(texts)


def _tool_calls(param: str, calls: object) -> list[str]:
    """Checks an assistant message's ``tool_calls``; returns their ids."""
    if not isinstance(calls, list):
        raise _type_error(param, "array", calls)
    ids = []
    for i, call in enumerate(calls):
        where = f"{param}[{i}]"
        if not isinstance(call, dict):
            raise _type_error(where, "object", call)
        for key in ("id", "type"):
            if key not in call:
                raise _missing(f"{where}.{key}")
            if not isinstance(call[key], str):
                raise _type_error(f"{where}.{key}", "string", call[key])
        if call["type"] != "function":
            raise _bad_value(
                f"{where}.type",
                f"Invalid value: '{call['type']}'. Supported values are: 'function'.",
            )
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise _missing(f"{where}.function")
        for key in ("name", "arguments"):
            if not isinstance(fn.get(key), str):
                raise _missing(f"{where}.function.{key}")
        ids.append(call["id"])
    return ids


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if messages is None:
        raise _missing("messages")
    if not isinstance(messages, list):
        raise _type_error("messages", "array", messages)
    if not messages:
        raise invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    open_calls: list[str] | None = None  # ids of the last assistant's tool calls
    pending: set[str] = set()  # those not answered by a tool message yet
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _type_error(param, "object", message)
        role = message.get("role")
        if role is None:
            raise _missing(f"{param}.role")
        if role not in ROLES:
            raise _bad_value(
                f"{param}.role",
                f"Invalid value: '{role}'. Supported values are: {_listing(ROLES)}.",
            )
        if role != "tool" and pending:
            raise _bad_value(
                "messages",
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(pending))}",
            )
        name = message.get("name")
        if name is not None and not isinstance(name, str):
            raise _type_error(f"{param}.name", "string", name)
        content = message.get("content")
        where = f"{param}.content"
        if role == "assistant":
            calls = message.get("tool_calls")
            open_calls = None if calls is None else _tool_calls(f"{param}.tool_calls", calls)
            pending = set(open_calls or ())
            if content is None:
                if not calls and message.get("function_call") is None:
                    raise _missing(where)
            else:
                _content_text(where, content, parts=("text", "refusal"))
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id is None:
                raise _missing(f"{param}.tool_call_id")
            if not isinstance(call_id, str):
                raise _type_error(f"{param}.tool_call_id", "string", call_id)
            if open_calls is None:
                raise _bad_value(
                    f"{param}.role",
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'.",
                )
            if call_id not in open_calls:
                raise _bad_value(
                    f"{param}.tool_call_id",
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                )
            pending.discard(call_id)
        else:
            open_calls = None
        if role == "function":
            if not isinstance(name, str):
                raise _missing(f"{param}.name")
            if content is not None and not isinstance(content, str):
                raise _type_error(where, "string", content)
            continue
        if content is None:
            raise _missing(where)
        _content_text(where, content, parts=("text",), media=role == "user")
    return messages


def _tools(body: dict) -> list[str]:
    """Checks ``tools``, ``tool_choice`` and ``parallel_tool_calls``; returns the tool names."""
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise _type_error("tools", "array", tools)
        if not tools:
            raise invalid(
                "Invalid 'tools': empty array. Expected an array with minimum length 1, "
                "but got an empty array instead.",
                param="tools",
                code="empty_array",
            )
        for i, tool in enumerate(tools):
            param = f"tools[{i}]"
            if not isinstance(tool, dict):
                raise _type_error(param, "object", tool)
            if tool.get("type") != "function":
                if "type" not in tool:
                    raise _missing(f"{param}.type")
                raise _bad_value(
                    f"{param}.type",
                    f"Invalid value: '{tool.get('type')}'. Supported values are: 'function'.",
                )
            fn = tool.get("function")
            if fn is None:
                raise _missing(f"{param}.function")
            if not isinstance(fn, dict):
                raise _type_error(f"{param}.function", "object", fn)
            name = fn.get("name")
            if name is None:
                raise _missing(f"{param}.function.name")
            if not isinstance(name, str) or not _valid_name(name):
                raise _bad_value(
                    f"{param}.function.name",
                    f"Invalid '{param}.function.name': string does not match pattern. Expected "
                    "a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
                )
            _string(fn, "description")
            if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
                raise _type_error(f"{param}.function.parameters", "object", fn["parameters"])
            names.append(name)
    choice = body.get("tool_choice")
    if choice is not None:
        if tools is None:
            raise _bad_value(
                "tool_choice",
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
            )
        if isinstance(choice, str):
            if choice not in ("none", "auto", "required"):
                raise _bad_value(
                    "tool_choice",
                    f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and "
                    "'required'.",
                )
        elif isinstance(choice, dict):
            fn = choice.get("function")
            if choice.get("type") != "function" or not isinstance(fn, dict):
                raise _bad_value(
                    "tool_choice",
                    "Invalid 'tool_choice': expected {'type': 'function', "
                    "'function': {'name': ...}}.",
                )
            if fn.get("name") not in names:
                raise _bad_value(
                    "tool_choice",
                    f"Invalid 'tool_choice': function '{fn.get('name')}' not found in 'tools'.",
                )
        else:
            raise _type_error("tool_choice", "string", choice)
    if body.get("parallel_tool_calls") is not None:
        if tools is None:
            raise _bad_value(
                "parallel_tool_calls",
                "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed "
                "when 'tools' are specified.",
            )
        _bool(body, "parallel_tool_calls")
    return names


def _valid_name(name: str) -> bool:
    return 0 < len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def _response_format(body: dict) -> None:
    fmt = _object(body, "response_format")
    if fmt is None:
        return
    kind = fmt.get("type")
    if kind not in ("text", "json_object", "json_schema"):
        raise _bad_value(
            "response_format.type",
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and "
            "'json_schema'.",
        )
    if kind == "json_schema":
        schema = fmt.get("json_schema")
        if not isinstance(schema, dict):
            raise _missing("response_format.json_schema")
        if not isinstance(schema.get("name"), str):
            raise _missing("response_format.json_schema.name")


def _logprobs(body: dict) -> None:
    wanted = _bool(body, "logprobs")
    top = _int(body, "top_logprobs", 0, 20)
    if top is not None and not wanted:
        raise _bad_value(
            "top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be set to true."
        )


def _max_output(body: dict) -> int | None:
    completion = _int(body, "max_completion_tokens", 1)
    plain = _int(body, "max_tokens", 1)
    return completion if completion is not None else plain


def render_prefix(messages: list[dict], limit: int = PREFIX_CHARS) -> str:
    """The start of the chat prompt as the node's template renders it (markers spelled out)."""
    out: list[str] = []
    size = 0
    for message in messages:
        name = message.get("name")
        head = f"<|start|>{message.get('role', '')}{' ' + name if name else ''}<|sep|>"
        content = message.get("content")
        text = content if isinstance(content, str) else _parts_text(content)
        piece = head + text + "<|end|>"
        out.append(piece)
        size += len(piece)
        if size >= limit:
            break
    return "".join(out)[:limit]


def _parts_text(content: object) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(
        p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


@lru_cache(maxsize=1024)
def _cached_count(text: str) -> int:
    return tokenizer.count_tokens(text)


def count_text(text: str) -> int:
    """``tokenizer.count_tokens``, remembered for the long texts that repeat (system
    prompts, tool definitions): the rule costs ~0.1 µs a character."""
    if 256 <= len(text) <= 32768:
        return _cached_count(text)
    return tokenizer.count_tokens(text)


_GENERATION_PROMPT = 2 + tokenizer.count_tokens("assistant")  # <|start|>assistant<|sep|>


def chat_prompt_estimate(messages: list[dict]) -> int:
    """``len(tokenizer.chat_prompt_tokens(messages))`` without hashing every piece: each
    message costs its role, name and content tokens plus three markers."""
    total = _GENERATION_PROMPT
    for message in messages:
        total += 3 + count_text(str(message.get("role", "")))
        name = message.get("name")
        if isinstance(name, str) and name:
            total += count_text(" " + name)
        content = message.get("content")
        total += count_text(content if isinstance(content, str) else _parts_text(content))
    return total


def _deterministic(body: dict, n: int | None) -> bool:
    return (body.get("temperature") == 0 or body.get("seed") is not None) and n in (None, 1)


def parse_chat(body: Any) -> CallRequest:
    body = _check_fields(body, CHAT_FIELDS)
    model = _model(body)
    messages = _messages(body)
    stream, include_usage, n = _sampling(body)
    max_output = _max_output(body)
    tool_names = _tools(body)
    _response_format(body)
    _logprobs(body)
    forward = _forward(body, CHAT_FIELDS)
    forward.pop("max_completion_tokens", None)
    if max_output is not None:
        forward["max_tokens"] = max_output
    rendered = template_messages(messages, body.get("tools"))
    return CallRequest(
        protocol=PROTOCOL,
        endpoint="chat.completions",
        model=model,
        upstream_path="/v1/chat/completions",
        body=forward,
        stream=stream,
        client_wants_usage=include_usage if stream else True,
        max_output_tokens=max_output,
        prompt_tokens_estimate=chat_prompt_estimate(rendered),
        prefix_text=render_prefix(rendered),
        deterministic=_deterministic(body, n),
        response=OpenAIResponse("chat.completions", include_usage if stream else True),
        extra={"tool_names": tool_names} if tool_names else {},
    )


# -- completions and embeddings ---------------------------------------------------------------


def _token_array(value: object) -> bool:
    return isinstance(value, list) and all(_is_int(t) and t >= 0 for t in value)


def _texts(name: str, value: object, *, allow_empty_string: bool) -> tuple[int, str]:
    """(tokens, text to show routing) of a prompt / input: a string, a list of strings,
    a token array or a list of token arrays."""
    if value is None:
        raise _missing(name)
    if isinstance(value, str):
        if not value and not allow_empty_string:
            raise _bad_value(name, f"'$.{name}' is invalid: it must not be empty.")
        return count_text(value), value[:PREFIX_CHARS]
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            if not allow_empty_string and not all(value):
                raise _bad_value(name, f"'$.{name}' is invalid: strings must not be empty.")
            return sum(count_text(s) for s in value), value[0][:PREFIX_CHARS]
        if _token_array(value):
            return len(value), " ".join(map(str, value[:1024]))
        if all(_token_array(item) and item for item in value):
            return sum(len(item) for item in value), " ".join(map(str, value[0][:1024]))
    raise _bad_value(
        name,
        f"Invalid '{name}': expected a string, an array of strings, an array of tokens or an "
        "array of token arrays.",
    )


def parse_completion(body: Any) -> CallRequest:
    body = _check_fields(body, COMPLETION_FIELDS)
    model = _model(body)
    stream, include_usage, n = _sampling(body)
    prompt_tokens, prefix = _texts("prompt", body.get("prompt"), allow_empty_string=True)
    max_output = _int(body, "max_tokens", 1)
    _string(body, "suffix")
    _bool(body, "echo")
    _int(body, "logprobs", 0, 5)
    best_of = _int(body, "best_of", 1, 20)
    if best_of is not None and best_of < (n or 1):
        raise _bad_value("best_of", "Invalid value for 'best_of': it must be at least 'n'.")
    wants = include_usage if stream else True
    return CallRequest(
        protocol=PROTOCOL,
        endpoint="completions",
        model=model,
        upstream_path="/v1/completions",
        body=_forward(body, COMPLETION_FIELDS),
        stream=stream,
        client_wants_usage=wants,
        max_output_tokens=max_output,
        prompt_tokens_estimate=prompt_tokens,
        prefix_text=prefix,
        deterministic=_deterministic(body, n) and best_of in (None, 1),
        response=OpenAIResponse("completions", wants),
    )


def parse_embeddings(body: Any) -> CallRequest:
    body = _check_fields(body, EMBEDDING_FIELDS)
    model = _model(body)
    tokens, prefix = _texts("input", body.get("input"), allow_empty_string=False)
    _string(body, "encoding_format", ("float", "base64"))
    _int(body, "dimensions", 1)
    _string(body, "user")
    return CallRequest(
        protocol=PROTOCOL,
        endpoint="embeddings",
        model=model,
        upstream_path="/v1/embeddings",
        body=_forward(body, EMBEDDING_FIELDS),
        stream=False,
        client_wants_usage=True,
        max_output_tokens=0,  # embeddings generate nothing: no output budget to reserve
        prompt_tokens_estimate=tokens,
        prefix_text=prefix,
        deterministic=True,  # no sampling: the vector is a function of the input
        response=OpenAIResponse("embeddings", True),
    )


# -- answers -------------------------------------------------------------------------------


def usage_body(usage: TokenUsage, endpoint: str) -> dict:
    if endpoint == "embeddings":
        return {"prompt_tokens": usage.prompt_total, "total_tokens": usage.prompt_total}
    return to_openai(usage)


class OpenAIResponse(base.ResponseAdapter):
    """The node's OpenAI answer with the public model name and the billed usage."""

    def __init__(self, endpoint: str, wants_usage: bool):
        self.endpoint = endpoint
        self.wants_usage = wants_usage
        self._usage_sent = False
        self._head: dict | None = None  # id/object/created of the stream, for a late usage chunk

    def render(self, upstream: dict, usage: TokenUsage | None, model: str) -> bytes:
        body = {**upstream, "model": model}
        if usage is not None:
            body["usage"] = usage_body(usage, self.endpoint)
        else:
            body.pop("usage", None)
        return dumps(body)

    def stream_chunk(self, chunk: dict, model: str) -> bytes:
        out = {**chunk, "model": model}
        if self._head is None:
            self._head = {k: chunk[k] for k in ("id", "object", "created") if k in chunk}
        if not chunk.get("choices"):  # the usage-only chunk
            if not self.wants_usage or self._usage_sent:
                return b""
            mapped = from_openai(chunk.get("usage"))
            if mapped is None:
                return b""
            out["usage"] = usage_body(mapped, self.endpoint)
            self._usage_sent = True
        elif not self.wants_usage:
            out.pop("usage", None)
        elif out.get("usage") is not None:  # OpenAI puts usage only on the last chunk
            out["usage"] = None
        return sse(out)

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        if self.wants_usage and not self._usage_sent and usage is not None:
            # The node sent no usage chunk (the gateway counted): the client still gets one.
            self._usage_sent = True
            head = self._head or {"object": "chat.completion.chunk"}
            chunk = {
                **head,
                "model": model,
                "choices": [],
                "usage": usage_body(usage, self.endpoint),
            }
            return sse(chunk) + DONE
        return DONE

    def stream_error(self, error: GatewayError) -> bytes:
        return sse({"error": error_object(error)}) + DONE


_PARSERS = {
    "chat.completions": parse_chat,
    "completions": parse_completion,
    "embeddings": parse_embeddings,
}


def parse_call(endpoint: str, data: Any, *, path_model, query, headers) -> CallRequest:
    """The pipeline's one entry: the client's parsed JSON for ``endpoint``."""
    return _PARSERS[endpoint](data)
