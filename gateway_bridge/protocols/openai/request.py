"""Validation of OpenAI request bodies, the way OpenAI validates them.

The same error messages, ``param`` and ``code`` as OpenAI, unknown fields
included: OpenAI answers ``Unrecognized request argument supplied: <name>``,
and so does the gateway. ``metadata``, ``store``, ``service_tier`` and the
other account-side fields are accepted (and dropped by the translation).
"""

from __future__ import annotations

from typing import NamedTuple

from gateway_bridge.protocols.base import invalid
from gateway_bridge.protocols.checks import is_int, is_number, json_object
from gateway_bridge.protocols.openai.fields import (
    bad_value,
    bool_field,
    int_field,
    listing,
    missing,
    number_field,
    object_field,
    string_field,
    type_error,
)

# Cost attribution: the body field naming the call's end user (the path;
# empty: none). Chat completions, completions and embeddings name the end user in ``user``.
END_USER_FIELD: tuple[str, ...] = ("user",)

MAX_N = 16  # the nodes' limit (OpenAI's is 128)
MAX_STOP = 4
ROLES = ("system", "assistant", "user", "function", "tool", "developer")
# Media parts of a user message, and the field each must carry: they pass to the
# channel (OpenAI's own shape; translated for an Anthropic or Gemini channel); a
# text-only model refuses them at admission (catalogue modality).
MEDIA_PARTS = {"image_url": "url", "input_audio": "data", "file": None}

# Fields forwarded to the node, per endpoint; IGNORED ones are accepted and dropped.
_SAMPLING = {
    "model", "n", "max_tokens", "temperature", "top_p", "seed", "stop", "stream",
    "stream_options", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "user",
}  # fmt: skip
CHAT_FIELDS = _SAMPLING | {
    "messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "top_logprobs", "reasoning_effort",
}  # fmt: skip
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
COMPLETION_FIELDS = _SAMPLING | {"prompt", "suffix", "echo", "best_of"}
EMBEDDING_FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
IGNORED = {"metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"}
DEPRECATED = {"functions": "tools", "function_call": "tool_choice"}


def _check_fields(body: object, known: set[str]) -> dict:
    body = json_object(body)
    for name in body:
        if name in known or name in IGNORED:
            if name == "reasoning_effort" and body[name] not in (None, *REASONING_EFFORTS):
                raise bad_value(
                    name,
                    f"Invalid value: '{body[name]}'. Supported values are: "
                    f"{listing(REASONING_EFFORTS)}.",
                )
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
        raise type_error("model", "string", value)
    return value


# The fields _sampling checks before ``stream``: each check passes an absent field.
_SHARED = frozenset({
    "n", "temperature", "top_p", "presence_penalty", "frequency_penalty", "seed", "user",
    "stop", "logit_bias", "metadata", "store", "service_tier",
})  # fmt: skip


def _sampling(body: dict) -> tuple[bool, bool, int | None]:
    """The checks the generation endpoints share; returns (stream, include_usage, n)."""
    n = None
    if not _SHARED.isdisjoint(body):
        n = int_field(body, "n", 1, MAX_N)
        number_field(body, "temperature", 0, 2)
        number_field(body, "top_p", 0, 1)
        number_field(body, "presence_penalty", -2, 2)
        number_field(body, "frequency_penalty", -2, 2)
        int_field(body, "seed")
        string_field(body, "user")
        _stop(body)
        _logit_bias(body)
        _metadata(body)
        bool_field(body, "store")
        string_field(body, "service_tier", ("auto", "default", "flex", "scale", "priority"))
    stream = bool(bool_field(body, "stream"))
    options = object_field(body, "stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise bad_value(
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
        include_usage = bool(bool_field(options, "include_usage"))
    return stream, include_usage, n


def _stop(body: dict) -> None:
    value = body.get("stop")
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list):
        raise type_error("stop", "string", value)
    if len(value) > MAX_STOP:
        raise invalid(
            f"Invalid 'stop': array too long. Expected an array with maximum length {MAX_STOP}, "
            f"but got an array with length {len(value)} instead.",
            param="stop",
            code="array_above_max_length",
        )
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise type_error(f"stop[{i}]", "string", item)


def _logit_bias(body: dict) -> None:
    bias = object_field(body, "logit_bias")
    for key, value in (bias or {}).items():
        if not key.isdigit():
            raise bad_value("logit_bias", f"Invalid key in 'logit_bias': {key}.")
        if not is_number(value) or not -100 <= value <= 100:
            raise bad_value(
                "logit_bias", f"Invalid value for 'logit_bias': {key} must be between -100 and 100."
            )


def _metadata(body: dict) -> None:
    metadata = object_field(body, "metadata")
    if metadata is None:
        return
    if len(metadata) > 16:
        raise bad_value("metadata", "Invalid 'metadata': at most 16 keys are allowed.")
    for key, value in metadata.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise bad_value(
                f"metadata.{key}",
                "Invalid 'metadata': keys are strings of at most 64 characters and values "
                "strings of at most 512.",
            )


# -- chat ----------------------------------------------------------------------------------


def _content_text(
    param: str, content: object, *, parts: tuple[str, ...], media: bool = False
) -> str:
    """The text of a message's content (a string or a list of parts of the given types)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise type_error(param, "string", content)
    texts = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        if not isinstance(part, dict):
            raise type_error(where, "object", part)
        kind = part.get("type")
        if media and kind in MEDIA_PARTS:
            _media_part(where, kind, part)
            continue
        if kind not in parts:
            raise bad_value(
                f"{where}.type",
                f"Invalid value: '{kind}'. Supported values are: {listing(parts)}.",
            )
        key = "refusal" if kind == "refusal" else "text"
        text = part.get(key)
        if not isinstance(text, str):
            raise type_error(f"{where}.{key}", "string", text)
        if kind == "text":
            texts.append(text)
    return "\n".join(texts)


def _media_part(where: str, kind: str, part: dict) -> None:
    """An ``image_url``, ``input_audio`` or ``file`` part, checked as OpenAI does."""
    inner = part.get(kind)
    if not isinstance(inner, dict):
        raise type_error(f"{where}.{kind}", "object", inner)
    field = MEDIA_PARTS[kind]
    if field is not None:
        value = inner.get(field)
        if not isinstance(value, str) or not value:
            raise invalid(
                f"Missing required parameter: '{where}.{kind}.{field}'.",
                param=f"{where}.{kind}.{field}",
                code="missing_required_parameter",
            )
    elif not isinstance(inner.get("file_data"), str) and not isinstance(inner.get("file_id"), str):
        raise invalid(
            f"Missing required parameter: '{where}.file.file_data' or '{where}.file.file_id'.",
            param=f"{where}.file",
            code="missing_required_parameter",
        )


def _tool_calls(param: str, calls: object) -> list[str]:
    """Checks an assistant message's ``tool_calls``; returns their ids."""
    if not isinstance(calls, list):
        raise type_error(param, "array", calls)
    ids = []
    for i, call in enumerate(calls):
        where = f"{param}[{i}]"
        if not isinstance(call, dict):
            raise type_error(where, "object", call)
        for key in ("id", "type"):
            if key not in call:
                raise missing(f"{where}.{key}")
            if not isinstance(call[key], str):
                raise type_error(f"{where}.{key}", "string", call[key])
        if call["type"] != "function":
            raise bad_value(
                f"{where}.type",
                f"Invalid value: '{call['type']}'. Supported values are: 'function'.",
            )
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise missing(f"{where}.function")
        for key in ("name", "arguments"):
            if not isinstance(fn.get(key), str):
                raise missing(f"{where}.function.{key}")
        ids.append(call["id"])
    return ids


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if messages is None:
        raise missing("messages")
    if not isinstance(messages, list):
        raise type_error("messages", "array", messages)
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
            raise type_error(param, "object", message)
        role = message.get("role")
        if role is None:
            raise missing(f"{param}.role")
        if role not in ROLES:
            raise bad_value(
                f"{param}.role",
                f"Invalid value: '{role}'. Supported values are: {listing(ROLES)}.",
            )
        if role != "tool" and pending:
            raise bad_value(
                "messages",
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(pending))}",
            )
        name = message.get("name")
        if name is not None and not isinstance(name, str):
            raise type_error(f"{param}.name", "string", name)
        content = message.get("content")
        where = f"{param}.content"
        if role == "assistant":
            calls = message.get("tool_calls")
            open_calls = None if calls is None else _tool_calls(f"{param}.tool_calls", calls)
            pending = set(open_calls or ())
            if content is None:
                if not calls and message.get("function_call") is None:
                    raise missing(where)
            else:
                _content_text(where, content, parts=("text", "refusal"))
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id is None:
                raise missing(f"{param}.tool_call_id")
            if not isinstance(call_id, str):
                raise type_error(f"{param}.tool_call_id", "string", call_id)
            if open_calls is None:
                raise bad_value(
                    f"{param}.role",
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'.",
                )
            if call_id not in open_calls:
                raise bad_value(
                    f"{param}.tool_call_id",
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                )
            pending.discard(call_id)
        else:
            open_calls = None
        if role == "function":
            if not isinstance(name, str):
                raise missing(f"{param}.name")
            if content is not None and not isinstance(content, str):
                raise type_error(where, "string", content)
            continue
        if content is None:
            raise missing(where)
        _content_text(where, content, parts=("text",), media=role == "user")
    return messages


def _tools(body: dict) -> list[str]:
    """Checks ``tools``, ``tool_choice`` and ``parallel_tool_calls``; returns the tool names."""
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise type_error("tools", "array", tools)
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
                raise type_error(param, "object", tool)
            if tool.get("type") != "function":
                if "type" not in tool:
                    raise missing(f"{param}.type")
                raise bad_value(
                    f"{param}.type",
                    f"Invalid value: '{tool.get('type')}'. Supported values are: 'function'.",
                )
            fn = tool.get("function")
            if fn is None:
                raise missing(f"{param}.function")
            if not isinstance(fn, dict):
                raise type_error(f"{param}.function", "object", fn)
            name = fn.get("name")
            if name is None:
                raise missing(f"{param}.function.name")
            if not isinstance(name, str) or not _valid_name(name):
                raise bad_value(
                    f"{param}.function.name",
                    f"Invalid '{param}.function.name': string does not match pattern. Expected "
                    "a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
                )
            string_field(fn, "description")
            if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
                raise type_error(f"{param}.function.parameters", "object", fn["parameters"])
            names.append(name)
    choice = body.get("tool_choice")
    if choice is not None:
        if tools is None:
            raise bad_value(
                "tool_choice",
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
            )
        if isinstance(choice, str):
            if choice not in ("none", "auto", "required"):
                raise bad_value(
                    "tool_choice",
                    f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and "
                    "'required'.",
                )
        elif isinstance(choice, dict):
            fn = choice.get("function")
            if choice.get("type") != "function" or not isinstance(fn, dict):
                raise bad_value(
                    "tool_choice",
                    "Invalid 'tool_choice': expected {'type': 'function', "
                    "'function': {'name': ...}}.",
                )
            if fn.get("name") not in names:
                raise bad_value(
                    "tool_choice",
                    f"Invalid 'tool_choice': function '{fn.get('name')}' not found in 'tools'.",
                )
        else:
            raise type_error("tool_choice", "string", choice)
    if body.get("parallel_tool_calls") is not None:
        if tools is None:
            raise bad_value(
                "parallel_tool_calls",
                "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed "
                "when 'tools' are specified.",
            )
        bool_field(body, "parallel_tool_calls")
    return names


def _valid_name(name: str) -> bool:
    return 0 < len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def _response_format(body: dict) -> None:
    fmt = object_field(body, "response_format")
    if fmt is None:
        return
    kind = fmt.get("type")
    if kind not in ("text", "json_object", "json_schema"):
        raise bad_value(
            "response_format.type",
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and "
            "'json_schema'.",
        )
    if kind == "json_schema":
        schema = fmt.get("json_schema")
        if not isinstance(schema, dict):
            raise missing("response_format.json_schema")
        if not isinstance(schema.get("name"), str):
            raise missing("response_format.json_schema.name")


def _logprobs(body: dict) -> None:
    wanted = bool_field(body, "logprobs")
    top = int_field(body, "top_logprobs", 0, 20)
    if top is not None and not wanted:
        raise bad_value(
            "top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be set to true."
        )


def _max_output(body: dict) -> int | None:
    completion = int_field(body, "max_completion_tokens", 1)
    plain = int_field(body, "max_tokens", 1)
    return completion if completion is not None else plain


# -- completions and embeddings ---------------------------------------------------------------


def _token_array(value: object) -> bool:
    return isinstance(value, list) and all(is_int(t) and t >= 0 for t in value)


def _input(name: str, value: object, *, allow_empty_string: bool) -> str:
    """Checks a prompt / input; returns its shape: ``"text"`` (a string), ``"texts"``
    (a list of strings), ``"tokens"`` (a token array) or ``"token_lists"``."""
    if value is None:
        raise missing(name)
    if isinstance(value, str):
        if not value and not allow_empty_string:
            raise bad_value(name, f"'$.{name}' is invalid: it must not be empty.")
        return "text"
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            if not allow_empty_string and not all(value):
                raise bad_value(name, f"'$.{name}' is invalid: strings must not be empty.")
            return "texts"
        if _token_array(value):
            return "tokens"
        if all(_token_array(item) and item for item in value):
            return "token_lists"
    raise bad_value(
        name,
        f"Invalid '{name}': expected a string, an array of strings, an array of tokens or an "
        "array of token arrays.",
    )


class Checked(NamedTuple):
    """What a valid request tells the translation besides its body."""

    model: str
    stream: bool
    include_usage: bool  # stream_options.include_usage
    n: int | None
    max_output: int | None
    tool_names: list[str] = []
    input_shape: str = ""  # completions' prompt, embeddings' input (see _input)
    best_of: int | None = None


def check_chat(body: object) -> Checked:
    """``POST /v1/chat/completions``: every check, in OpenAI's order."""
    body = _check_fields(body, CHAT_FIELDS)
    model = _model(body)
    _messages(body)
    stream, include_usage, n = _sampling(body)
    max_output = _max_output(body)
    tool_names = _tools(body)
    _response_format(body)
    _logprobs(body)
    return Checked(model, stream, include_usage, n, max_output, tool_names)


def check_completion(body: object) -> Checked:
    """``POST /v1/completions``."""
    body = _check_fields(body, COMPLETION_FIELDS)
    model = _model(body)
    stream, include_usage, n = _sampling(body)
    shape = _input("prompt", body.get("prompt"), allow_empty_string=True)
    max_output = int_field(body, "max_tokens", 1)
    string_field(body, "suffix")
    bool_field(body, "echo")
    int_field(body, "logprobs", 0, 5)
    best_of = int_field(body, "best_of", 1, 20)
    if best_of is not None and best_of < (n or 1):
        raise bad_value("best_of", "Invalid value for 'best_of': it must be at least 'n'.")
    return Checked(model, stream, include_usage, n, max_output, [], shape, best_of)


def check_embeddings(body: object) -> Checked:
    """``POST /v1/embeddings``."""
    body = _check_fields(body, EMBEDDING_FIELDS)
    model = _model(body)
    shape = _input("input", body.get("input"), allow_empty_string=False)
    string_field(body, "encoding_format", ("float", "base64"))
    int_field(body, "dimensions", 1)
    string_field(body, "user")
    return Checked(model, False, False, None, 0, [], shape)
