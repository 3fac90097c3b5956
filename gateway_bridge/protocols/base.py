"""What every protocol adapter shares: the normalized call, the gateway's
error and its rendering in each protocol's own error format.

An adapter (``openai``, ``anthropic``, ``gemini``) turns a client request into
a ``CallRequest`` — an OpenAI-protocol body for the node plus what the hot
path needs to know before forwarding — and turns the node's OpenAI answer
(plain or streamed) back into the client's protocol through a
``ResponseAdapter``. Adapters are pure: no I/O, no Django, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import orjson

from gateway_bridge.usage_mapping import TokenUsage, from_openai

# Error kinds: the protocol-neutral category of a GatewayError. Each protocol
# maps a kind to its own type name / status string.
INVALID_REQUEST = "invalid_request"  # 400
AUTHENTICATION = "authentication"  # 401
PERMISSION = "permission"  # 403
NOT_FOUND = "not_found"  # 404
PAYMENT_REQUIRED = "payment_required"  # 402 (prepaid balance exhausted)
REQUEST_TOO_LARGE = "request_too_large"  # 413
UNSUPPORTED_MEDIA = "unsupported_media_type"  # 415
RATE_LIMIT = "rate_limit"  # 429 (rate limits, spend caps, queue full)
UPSTREAM = "upstream"  # 502 (node answered garbage or failed)
OVERLOADED = "overloaded"  # 503 (no node can serve now, queue timeout)
TIMEOUT = "timeout"  # 504
INTERNAL = "internal"  # 500 (never expected; no trace leaks)

KIND_STATUS = {
    INVALID_REQUEST: 400,
    AUTHENTICATION: 401,
    PAYMENT_REQUIRED: 402,
    PERMISSION: 403,
    NOT_FOUND: 404,
    REQUEST_TOO_LARGE: 413,
    UNSUPPORTED_MEDIA: 415,
    RATE_LIMIT: 429,
    INTERNAL: 500,
    UPSTREAM: 502,
    OVERLOADED: 503,
    TIMEOUT: 504,
}


class GatewayError(Exception):
    """A call the gateway answers with an error. ``code`` is a stable,
    machine-readable reason (``invalid_api_key``, ``model_not_found``,
    ``key_daily_cap_exceeded``, ``rpm_limit_exceeded``, ...) that is also
    recorded as the call's ``error_type``; ``param`` names the offending
    request field when there is one."""

    def __init__(
        self,
        kind: str,
        code: str,
        message: str,
        *,
        param: str | None = None,
        status: int | None = None,
        headers: list[tuple[str, str]] | None = None,
    ):
        super().__init__(message)
        self.kind = kind
        self.code = code
        self.message = message
        self.param = param
        self.status = status or KIND_STATUS[kind]
        self.headers = headers or []


def invalid(
    message: str, *, param: str | None = None, code: str = "invalid_request"
) -> GatewayError:
    return GatewayError(INVALID_REQUEST, code, message, param=param)


def invalid_answer(message: str = "The model node sent an invalid answer.") -> GatewayError:
    """The node's answer is not what the protocol needs (a 502 to the client)."""
    return GatewayError(UPSTREAM, "upstream_invalid_response", message)


@dataclass(slots=True)
class CallRequest:
    """One client call, normalized. The gateway sets ``body["model"]`` to the
    chosen node's upstream model name and forces
    ``body["stream_options"] = {"include_usage": True}`` on streams."""

    protocol: str  # "openai" | "anthropic" | "gemini"
    endpoint: str  # a usage.events.ENDPOINTS value, e.g. "chat.completions", "messages"
    model: str  # the public model name the client asked for
    upstream_path: str  # "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings"
    body: dict[str, Any]  # OpenAI-protocol request body for the node
    stream: bool
    # Whether the client gets a usage report in the stream. OpenAI: only with
    # stream_options.include_usage; Anthropic and Gemini streams always carry it.
    client_wants_usage: bool
    # The output budget the client asked for (max_tokens, max_completion_tokens,
    # maxOutputTokens); None when it did not ask (the gateway then applies its
    # configured default budget for reservations).
    max_output_tokens: int | None
    # Prompt tokens by the documented tokenizer rule
    # (console.kernel.tokens): for reservations, TPM and disconnect billing.
    prompt_tokens_estimate: int
    # The start of the prompt as the node sees it (system prompt and the first
    # messages, rendered): prefix-affinity routing hashes its first blocks.
    prefix_text: str
    # True when the answer is a function of the request alone (temperature 0,
    # or a seed, and a single choice): only then may the response cache answer.
    deterministic: bool
    # The adapter that renders the node's answer back in the client's protocol.
    response: ResponseAdapter
    # Anything else the adapter wants to remember (tool names, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    # Native pass-through (a channel that speaks the client's protocol): the
    # client's body as it arrived, and as parsed, and the query string of the
    # request (Gemini's ``alt=sse``). ``gateway_bridge.pipeline.native`` sends
    # ``raw`` with only the model id rewritten.
    raw: bytes = b""
    client_body: dict[str, Any] | None = None
    query: str = ""
    # What ``body`` (the OpenAI pivot) could not carry, as "<path>: <what>"
    # (an Anthropic ``container``, a ``document`` block a channel of another
    # protocol cannot take, ...): a channel of the client's own protocol takes
    # the call as sent; any other answers 400 naming the first of them.
    untranslatable: tuple[str, ...] = ()
    # What a translation leaves out without changing what is asked, as
    # "<path>: <what>" (a coding agent's default hosted tools, fields the
    # pivot does not carry): a channel of the client's own protocol gets them
    # as sent; any other is called without them, and the answer names them
    # in its ``x-gateway-dropped`` header.
    dropped: tuple[str, ...] = ()
    # Awaited by the relay once the answer is rendered, before its last bytes
    # go out (set by the pipeline: the Responses API stores the answer there,
    # so a client that continues from it at once finds it). None: nothing. A
    # native relay passes the vendor's own answer object (a plain body, or a
    # stream's final one, after its bytes went out).
    on_answer: Any = None


@runtime_checkable
class ResponseAdapter(Protocol):
    """Renders node (OpenAI-protocol) answers in the client's protocol.

    Plain calls: ``render(upstream_json, usage, model)`` → body bytes.
    Streams: ``stream_chunk`` for every upstream chunk (a parsed OpenAI
    ``chat.completion.chunk`` / ``text_completion`` dict, usage chunks
    included), then exactly one of ``stream_end`` (normal end) or
    ``stream_error`` (the stream broke after bytes reached the client). Each
    returns the bytes to send now (possibly ``b""``). ``model`` is the public
    model name to show the client; ``usage`` the call's mapped usage (None when
    the node sent none). The adapter decides whether usage reaches the client
    (``CallRequest.client_wants_usage``).

    A ``typing.Protocol``: the adapters subclass it (taking ``stream_start``
    and ``usage_of`` as they are here), and the type checker refuses one that
    lacks a method or gets a signature wrong."""

    #: Content type of a streamed answer ("text/event-stream", or
    #: "application/json" for Gemini's streamGenerateContent without alt=sse).
    stream_content_type: str = "text/event-stream"

    def render(self, upstream: dict[str, Any], usage: TokenUsage | None, model: str) -> bytes:
        raise NotImplementedError

    def stream_start(self, model: str) -> bytes:
        return b""

    def stream_chunk(self, chunk: dict[str, Any], model: str) -> bytes:
        raise NotImplementedError

    def stream_end(self, usage: TokenUsage | None, model: str) -> bytes:
        raise NotImplementedError

    def stream_error(self, error: GatewayError) -> bytes:
        raise NotImplementedError

    def usage_of(self, upstream: dict[str, Any]) -> TokenUsage | None:
        """The usage of a plain upstream answer (OpenAI fields; see usage_mapping)."""
        return from_openai(upstream.get("usage")) if isinstance(upstream, dict) else None


class RequestParser(Protocol):
    """What the pipeline asks of the package that parses a call (a protocol's
    package, or ``responses`` for the OpenAI protocol's ``/v1/responses``):
    ``parse_call`` validates and normalizes the client's parsed JSON for
    ``endpoint`` (``path_model``: the model named in the path, Gemini's;
    ``query``: the raw query string; ``headers``: lower-case names), and
    ``END_USER_FIELD`` is the body path of the end user's id (``()``: none)."""

    @property
    def END_USER_FIELD(self) -> tuple[str, ...]: ...

    def parse_call(
        self,
        endpoint: str,
        data: Any,
        *,
        path_model: str | None,
        query: bytes,
        headers: dict[str, str],
    ) -> CallRequest: ...


class ProtocolAdapter(RequestParser, Protocol):
    """A client protocol's package (``openai``, ``anthropic``, ``gemini``) as the
    pipeline uses it: parse a call, list models, render an error (its status
    and body in the protocol's own format)."""

    def render_models(self, models: list[ModelInfo]) -> bytes: ...

    def error_response(self, err: GatewayError) -> tuple[int, bytes]: ...


class TokenCounter(ProtocolAdapter, Protocol):
    """A protocol with a token-count endpoint (Anthropic's ``count_tokens``,
    Gemini's ``countTokens``): the model a count names (``path_model`` for
    Gemini, the body's for Anthropic; checked against the key) and the answer."""

    def count_model(self, data: Any, path_model: str | None) -> object: ...

    def count_body(self, data: Any, path_model: str | None) -> bytes: ...


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A model as the model-list endpoints show it."""

    name: str
    display_name: str
    context_window: int
    kind: str  # "chat" | "embedding" | "completion"
    created: int  # POSIX seconds


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event frame: ``data`` is JSON-encoded unless it is bytes or text."""
    if type(data) is dict:  # the usual case first: one type check
        payload = orjson.dumps(data)
    elif isinstance(data, bytes):
        payload = data
    elif isinstance(data, str):
        payload = data.encode()
    else:
        payload = orjson.dumps(data)
    if event:
        return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"
    return b"data: " + payload + b"\n\n"


def tool_call_deltas(
    delta: dict[str, Any], is_open: Callable[[], tuple[Any, ...] | None], kind: str
) -> Iterator[tuple[dict[str, Any], dict[str, Any], tuple[str, Any, Any], bool]]:
    """The tool-call parts of one streamed OpenAI ``delta``, as ``(call, function,
    key, opens)``: ``key`` is ``(kind, index, id)`` and ``opens`` whether the part
    starts a new call after the block open now (``is_open()``, read before each
    part, returns its key or None): another index, or (servers that number every
    call 0) another id. Malformed parts are skipped."""
    calls = delta.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        index, call_id = call.get("index", 0), call.get("id")
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        open_ = is_open()
        opens = (
            open_ is None
            or open_[0] != kind
            or open_[1] != index
            or bool(call_id and open_[2] and call_id != open_[2])
        )
        yield call, function, (kind, index, call_id), opens


def tool_arguments(arguments: object) -> dict[str, Any]:
    """A tool call's arguments as an object: the node sends a JSON string, which
    may be empty or broken (a model's output): then ``{}``."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
