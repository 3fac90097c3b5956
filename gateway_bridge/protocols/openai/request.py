"""Validation of OpenAI request bodies, the way OpenAI validates them.

The same error messages, ``param`` and ``code`` as OpenAI, unknown fields
included: OpenAI answers ``Unrecognized request argument supplied: <name>``,
and so does the gateway. ``metadata``, ``store``, ``service_tier`` and the
other account-side fields are accepted (and dropped by the translation).
A chat's ``messages`` and ``tools`` are checked in ``messages``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

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
from gateway_bridge.protocols.openai.messages import check_messages, check_tools

# Cost attribution: the body field naming the call's end user (the path;
# empty: none). Chat completions, completions and embeddings name the end user in ``user``.
END_USER_FIELD: tuple[str, ...] = ("user",)

MAX_N = 16  # the nodes' limit (OpenAI's is 128)
MAX_STOP = 4

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


def _check_fields(body: object, known: set[str]) -> dict[str, Any]:
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


def _model(body: dict[str, Any]) -> str:
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


def _sampling(body: dict[str, Any]) -> tuple[bool, bool, int | None]:
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


def _stop(body: dict[str, Any]) -> None:
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


def _logit_bias(body: dict[str, Any]) -> None:
    bias = object_field(body, "logit_bias")
    for key, value in (bias or {}).items():
        if not key.isdigit():
            raise bad_value("logit_bias", f"Invalid key in 'logit_bias': {key}.")
        if not is_number(value) or not -100 <= value <= 100:
            raise bad_value(
                "logit_bias", f"Invalid value for 'logit_bias': {key} must be between -100 and 100."
            )


def _metadata(body: dict[str, Any]) -> None:
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


def _response_format(body: dict[str, Any]) -> None:
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


def _logprobs(body: dict[str, Any]) -> None:
    wanted = bool_field(body, "logprobs")
    top = int_field(body, "top_logprobs", 0, 20)
    if top is not None and not wanted:
        raise bad_value(
            "top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be set to true."
        )


def _max_output(body: dict[str, Any]) -> int | None:
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
    check_messages(body)
    stream, include_usage, n = _sampling(body)
    max_output = _max_output(body)
    tool_names = check_tools(body)
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
