"""Native pass-through: a channel that speaks the client's own protocol
(an Anthropic client on an Anthropic channel, a Gemini client on a Gemini
channel) gets the client's body as it was sent, and the client gets the
vendor's answer as it was sent.

* **Request**: the raw bytes, with only the model id rewritten to the
  channel's (``rewrite_model``: the one top-level ``"model"`` value replaced
  in place; Gemini names the model in the path, so its body goes untouched).
  Images, PDFs, thinking, ``cache_control``, tools and any field the vendor
  adds later reach it. When the bytes cannot be edited in place (several
  ``"model"`` keys, a non-string value) the parsed body is re-encoded with
  the model replaced: same content, not the same bytes.
* **Answer**: a plain answer's bytes as they came; a stream's chunks relayed
  as they arrive (``UpstreamResponse.chunks``), never re-encoded. The events
  are split beside the relay only to read usage and the first token
  (the dialect's ``NativeStreamUsage``): the vendor's own counts, cache
  writes and reads included.
* **Model name**: the answer shows the public name the client asked for
  (``req.model``), never the vendor's id: Anthropic's and the Responses API's
  ``"model"``, Gemini's ``"modelVersion"`` are rewritten in the bytes, the
  rest left as the vendor sent it. A plain answer: its top-level key (found in
  place; re-encoded only when it cannot be edited in place). A stream
  (``ModelRewriter``): ``"modelVersion"`` whatever its string value; ``"model"``
  where its value is the id the vendor named in its first events
  (``message_start``'s message, ``response.created``'s response: read where
  the protocol puts it, so a tool's argument that happens to be called
  ``model`` is left alone; an Anthropic stream is looked at only until its
  ``message_start``, the one event naming the model, went out). Only a
  chunk's tail that may still become such a field (a key or value cut by the
  chunk's end) is held back until the next chunk; everything else goes out as
  it came. The call record keeps the public model and the channel
  (``node_id``), whose mapping names the channel's upstream id; the id the
  vendor answered with is not recorded.
* **Retry**: nothing has reached the client until the first complete event
  (or, for a plain answer, the whole body) is in; a failure before that moves
  the call to another credential or channel like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import TYPE_CHECKING

import orjson

from console.tokens import count_tokens
from gateway_bridge import answers
from gateway_bridge.pipeline.call import Call, Retry, StreamStarted
from gateway_bridge.protocols.base import UPSTREAM, CallRequest, GatewayError
from gateway_bridge.upstreams import UpstreamError
from gateway_bridge.usage_mapping import TokenUsage

if TYPE_CHECKING:
    from gateway_bridge.gateway import Gateway

_MODEL_KEY = re.compile(rb'"model"\s*:\s*')
_STRING_END = re.compile(rb'(?<!\\)(?:\\\\)*"')
# Where an answer names its model, by the client's protocol: the top-level key
# (a plain answer, a Gemini event); for a stream, the object of the first
# events that holds it (Anthropic's message_start message, the Responses
# API's response; None: every event names it, any value is the vendor's), and
# whether only that first event names it (Anthropic: then the rest of the
# stream is not looked at).
ANSWER_MODEL_KEYS = {"anthropic": "model", "openai": "model", "gemini": "modelVersion"}
_STREAM_FIELDS = {
    "anthropic": ("model", "message", True),
    "openai": ("model", "response", False),
    "gemini": ("modelVersion", None, False),
}
# How many of a stream's first events may name the vendor's id before it is given up.
_LEARN_EVENTS = 4
_JSON_SPACE = b" \t\r\n"
_BACKSLASH = 0x5C
_COLON = 0x3A
_ANY_STRING = rb'"(?:[^"\\]|\\.)*"'
_KEY_PATTERNS: dict[str, re.Pattern] = {}
_KEY_CUTS: dict[str, tuple[bytes, ...]] = {}
# The rewriters' patterns by (key, vendor ids; None: any string), bounded.
_FIELD_PATTERNS: dict[tuple[str, tuple[bytes, ...] | None], re.Pattern] = {}
_MAX_FIELD_PATTERNS = 256


def _key_pattern(key: str) -> re.Pattern:
    """``"<key>"`` and its colon: a key, unless after a backslash (then inside a
    string; checked by the callers: a lookbehind here would cost the search
    its literal prefix)."""
    pattern = _KEY_PATTERNS.get(key)
    if pattern is None:
        quoted = re.escape(orjson.dumps(key))
        pattern = _KEY_PATTERNS[key] = re.compile(quoted + rb"[ \t\r\n]*:[ \t\r\n]*")
    return pattern


def _key_cuts(key: str) -> tuple[bytes, ...]:
    """``"<key>"`` cut short (``"``, ``"m``, ... ``"mode``), the longest first."""
    cuts = _KEY_CUTS.get(key)
    if cuts is None:
        quoted = orjson.dumps(key)
        cuts = _KEY_CUTS[key] = tuple(quoted[:n] for n in range(len(quoted) - 1, 0, -1))
    return cuts


def rename_answer(raw: bytes, obj: dict, key: str, public: str) -> tuple[bytes, dict]:
    """A plain answer ``raw`` (whose parse is ``obj``) with its top-level ``key``
    naming ``public``, and that parse. The value is replaced in place, the other
    bytes kept; when several ``key`` keys are in the answer (a tool's input
    named so), the one whose replacement parses as the renamed answer. Only
    when none can be edited in place is the answer re-encoded."""
    value = obj.get(key)
    if not isinstance(value, str) or value == public:
        return raw, obj
    renamed = {**obj, key: public}
    literal = orjson.dumps(public)
    keys = [m for m in _key_pattern(key).finditer(raw) if raw[m.start() - 1 : m.start()] != b"\\"]
    for match in keys:
        start = match.end()
        if raw[start : start + 1] != b'"':
            continue
        end = _STRING_END.search(raw, start + 1)
        if end is None:
            continue
        edited = raw[:start] + literal + raw[end.end() :]
        if len(keys) == 1:  # the one such key of the answer is its top-level one
            return edited, renamed
        with contextlib.suppress(orjson.JSONDecodeError):
            if orjson.loads(raw[start : end.end()]) == value and orjson.loads(edited) == renamed:
                return edited, renamed
    return orjson.dumps(renamed), renamed


class ModelRewriter:
    """Renames the model in a native stream's bytes as they are relayed: each
    ``"<key>": "<vendor id>"`` becomes ``"<key>": "<public>"``, all other bytes
    as they came. ``feed`` returns what may go out now: a chunk less only the
    tail that may still become such a field once the next chunk is in (a
    pattern cut by a chunk boundary), held until then; ``close`` returns the
    held tail at the stream's end, as it came.

    The vendor ids: with ``holder`` None (Gemini's ``modelVersion``) any string
    value; else those ``learn`` reads from the first events, at
    ``event[holder][key]`` (Anthropic's ``message_start``, the Responses API's
    ``response.created``), before those events' bytes go out."""

    __slots__ = (
        "_cuts",
        "_key",
        "_literals",
        "_once",
        "_pattern",
        "_pending",
        "_prev",
        "_public",
        "holder",
        "key",
        "learned",
        "public",
    )

    def __init__(self, key: str, public: str, holder: str | None, once: bool = False):
        self.key = key
        self.public = public
        self.holder = holder
        self.learned: set[str] = set()
        self._once = once
        self._key = orjson.dumps(key)
        self._cuts = _key_cuts(key)
        self._public = orjson.dumps(public)
        # The vendor ids as JSON strings; None: any string (then always compiled).
        self._literals: list[bytes] | None = None if holder is None else []
        self._pattern = None if holder is not None else self._compile()
        self._pending = b""
        self._prev = b""  # its last byte: the one before the next data

    def _compile(self) -> re.Pattern:
        literals = None if self._literals is None else tuple(self._literals)
        pattern = _FIELD_PATTERNS.get((self.key, literals))
        if pattern is None:
            values = _ANY_STRING if literals is None else b"|".join(map(re.escape, literals))
            pattern = re.compile(_key_pattern(self.key).pattern + b"(" + values + b")")
            if len(_FIELD_PATTERNS) >= _MAX_FIELD_PATTERNS:
                _FIELD_PATTERNS.clear()
            _FIELD_PATTERNS[(self.key, literals)] = pattern
        return pattern

    @property
    def learning(self) -> bool:
        return self.holder is not None and not self.learned

    def renames(self, value: object) -> bool:
        """Whether the stream's ``value`` of the key reaches the client renamed."""
        return isinstance(value, str) and (self.holder is None or value in self.learned)

    def learn(self, payload: bytes) -> bool:
        """Read the vendor's id from one of the first events' data; True once known."""
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return False
        holder = event.get(self.holder) if isinstance(event, dict) else None
        value = holder.get(self.key) if isinstance(holder, dict) else None
        if not isinstance(value, str):
            return False
        self.learned.add(value)
        if value != self.public:
            self._literals.append(orjson.dumps(value))
            self._pattern = self._compile()
        return True

    def feed(self, chunk: bytes) -> bytes:
        pattern = self._pattern
        if pattern is None:  # nothing to rename (yet)
            return chunk
        data = self._pending + chunk if self._pending else chunk
        parts = None
        last = 0
        if self._key not in data:
            if not data.endswith(self._cuts):  # the common case: out as it came
                self._pending = b""
                self._prev = data
                return data
        else:
            for match in pattern.finditer(data):
                if self._after_backslash(data, match.start()):
                    continue
                if parts is None:
                    parts = []
                parts.append(data[last : match.start(1)])
                parts.append(self._public)
                last = match.end(1)
        cut = self._undecided(data, last)
        if cut < len(data):
            self._pending = data[cut:]
            if cut:
                self._prev = data[cut - 1 : cut]
        else:
            self._pending = b""
            self._prev = data
        if parts is None:
            return data[:cut] if self._pending else data
        if self._once and not self._pending:  # the one event naming the model is done
            self._pattern = None
        parts.append(data[last:cut])
        return b"".join(parts)

    def close(self) -> bytes:
        """The held tail (a field the stream ended inside of), as it came."""
        tail, self._pending = self._pending, b""
        return tail

    def _undecided(self, data: bytes, start: int) -> int:
        """Where the tail of ``data`` from ``start`` on that may still become a
        renamed field begins (``len(data)``: none)."""
        key = self._key
        at = data.rfind(key, start)
        if at >= 0 and not self._after_backslash(data, at) and self._open(data, at + len(key)):
            return at
        end = len(data)
        if data.endswith(self._cuts):  # a key cut short by the end: where, the longest first
            for cut in self._cuts:
                at = end - len(cut)
                if at >= start and data.endswith(cut) and not self._after_backslash(data, at):
                    return at
        return end

    def _after_backslash(self, data: bytes, at: int) -> bool:
        return data[at - 1] == _BACKSLASH if at else self._prev[-1:] == b"\\"

    def _open(self, data: bytes, at: int) -> bool:
        """Whether ``data[at:]``, after a key, may still become its renamed value."""
        end = len(data)
        while at < end and data[at] in _JSON_SPACE:
            at += 1
        if at == end:
            return True
        if data[at] != _COLON:
            return False
        at += 1
        while at < end and data[at] in _JSON_SPACE:
            at += 1
        rest = data[at:]
        if self._literals is None:
            return not rest or (rest[:1] == b'"' and _STRING_END.search(rest, 1) is None)
        return any(len(rest) < len(v) and v.startswith(rest) for v in self._literals)


def model_rewriter(req: CallRequest, protocol: str) -> ModelRewriter:
    """The rewriter of a native stream in ``protocol`` answering ``req``."""
    key, holder, once = _STREAM_FIELDS[protocol]
    return ModelRewriter(key, req.model, holder, once)


def rewrite_model(raw: bytes, body: dict, upstream: str) -> bytes:
    """``raw`` (whose parse is ``body``) with its top-level ``model`` set to
    ``upstream``; unchanged bytes when it already is."""
    if body.get("model") == upstream:
        return raw
    keys = list(_MODEL_KEY.finditer(raw))
    # Outside strings "model" followed by a colon is a key; inside a JSON string
    # its quotes would be escaped. One such key must be the top-level one.
    if len(keys) == 1 and isinstance(body.get("model"), str):
        start = keys[0].end()
        if raw[start : start + 1] == b'"':
            end = _STRING_END.search(raw, start + 1)
            if end is not None:
                return raw[:start] + orjson.dumps(upstream) + raw[end.end() :]
    return orjson.dumps({**body, "model": upstream})


def _events(buffer: bytes) -> tuple[list[tuple[bytes | None, bytes]], bytes]:
    """The complete SSE events of ``buffer`` as (event name, data), and the rest."""
    if b"\r" in buffer:
        buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    out = []
    start = 0
    while True:
        end = buffer.find(b"\n\n", start)
        if end < 0:
            return out, buffer[start:]
        name = None
        data = None
        for line in buffer[start:end].split(b"\n"):
            if line[:5] == b"data:":
                value = line[5:].removeprefix(b" ")
                data = value if data is None else data + b"\n" + value
            elif line[:6] == b"event:":
                name = line[6:].strip()
        start = end + 2
        if data is not None:
            out.append((name, data))


class _Splitter:
    """Feeds a native stream's events to the dialect's usage reader: SSE events
    as they complete, or (Gemini's ``streamGenerateContent`` without
    ``alt=sse``: one JSON array) the array's elements at the end."""

    def __init__(self, reader, sse: bool, rewriter: ModelRewriter | None = None):
        self.reader = reader
        self.sse = sse
        self.buffer = b""
        self.events = 0
        # Shown the first events until it has read the vendor's model id.
        self.learner = rewriter if rewriter is not None and rewriter.learning else None

    def feed(self, data: bytes) -> None:
        self.buffer += data
        if not self.sse:
            return
        events, self.buffer = _events(self.buffer)
        for name, payload in events:
            self.events += 1
            self.reader.feed(name.decode("latin-1") if name else None, payload)
            if self.learner is not None and (
                self.learner.learn(payload) or self.events >= _LEARN_EVENTS
            ):
                self.learner = None

    def close(self) -> None:
        if self.sse:
            if self.buffer.strip():
                self.feed(b"\n\n")
            return
        try:
            items = orjson.loads(self.buffer)
        except orjson.JSONDecodeError:
            return
        for item in items if isinstance(items, list) else [items]:
            self.events += 1
            self.reader.feed(None, orjson.dumps(item))


def _estimate(call: Call, req: CallRequest, reader) -> TokenUsage:
    """What a call that produced no vendor usage cost: the prompt estimate and
    no output, or the tokens of the text streamed when the reader kept it (never
    zero input; the vendor's own counts whenever it sent any)."""
    usage = reader.usage
    if usage is not None:
        return usage
    streamed = getattr(reader, "streamed_text", "")
    return TokenUsage(
        input=req.prompt_tokens_estimate, output=count_tokens(streamed) if streamed else 0
    )


async def plain(gw: Gateway, call: Call, req: CallRequest, resp, dialect, send) -> None:
    """A native plain answer: its bytes to the client, its usage recorded."""
    from gateway_bridge.pipeline import relay

    raw = await resp.read()
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict | list):
        raise Retry(
            GatewayError(
                UPSTREAM,
                "upstream_invalid_response",
                "The vendor answered with something not JSON.",
            )
        )
    usage = dialect.native_usage(obj) if isinstance(obj, dict) else None
    if usage is None:
        usage = TokenUsage(input=req.prompt_tokens_estimate, output=0)
    call.usage = usage
    if usage.cache_read:
        call.cache_status = "prefix_hit"
    if isinstance(obj, dict):
        raw, obj = rename_answer(raw, obj, ANSWER_MODEL_KEYS[dialect.PROTOCOL], req.model)
        if req.on_answer is not None:
            await req.on_answer(obj)
    await relay.respond(send, 200, raw, call)


async def stream(gw: Gateway, call: Call, req: CallRequest, resp, dialect, receive, send, t_up) -> bool:  # fmt: skip  # noqa: E501
    """Relay a native stream chunk by chunk. Returns True when it ran to its
    end; raises StreamStarted after bytes reached the client, Retry or
    UpstreamError before."""
    reader = dialect.NativeStreamUsage()
    content_type = resp.headers.get("content-type", "text/event-stream")
    rewriter = model_rewriter(req, dialect.PROTOCOL)
    splitter = _Splitter(reader, "event-stream" in content_type, rewriter)
    chunks = resp.chunks().__aiter__()
    held: list[bytes] = []
    # Nothing reaches the client before the first complete event (or, for a JSON
    # array stream, the first bytes): until then a failure is retryable.
    while True:
        try:
            data = await chunks.__anext__()
        except StopAsyncIteration:
            splitter.close()
            if reader.error is not None:
                raise Retry(reader.error) from None
            if not held:
                raise Retry(
                    GatewayError(
                        UPSTREAM, "upstream_empty_stream", "The vendor ended the stream at once."
                    )
                ) from None
            break
        held.append(data)
        splitter.feed(data)
        if reader.error is not None:
            raise Retry(reader.error)
        if splitter.events or not splitter.sse:
            break
    call.status = 200
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", content_type.encode("latin-1")),
                (b"cache-control", b"no-cache"),
                (b"x-request-id", call.request_id.encode()),
                *call.headers_out,
            ],
        }
    )
    disconnected = asyncio.Event()

    async def watch():
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
                resp.abort()
                return

    watcher = asyncio.create_task(watch())
    try:
        try:
            out = rewriter.feed(b"".join(held))
            while True:
                if call.ttft is None and (reader.content or not splitter.sse):
                    call.ttft = time.perf_counter() - call.t0
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                out = await chunks.__anext__()
                splitter.feed(out)
                out = rewriter.feed(out)
        except StopAsyncIteration:
            pass
        except (UpstreamError, OSError) as exc:
            call.upstream_s = time.perf_counter() - t_up
            splitter.close()
            call.usage = _estimate(call, req, reader)
            if disconnected.is_set() or isinstance(exc, OSError):
                gw.metrics.disconnects += 1
                call.status = 499
                call.error_type = "client_disconnected"
                raise StreamStarted(node_fault=False) from None
            # The vendor broke off: end the stream with an error event in the
            # client's protocol (its SDK raises instead of taking a cut answer).
            err = answers.upstream_exception_error(exc)
            call.status = err.status
            call.error_type = err.code
            with contextlib.suppress(OSError):
                await send(
                    {
                        "type": "http.response.body",
                        "body": rewriter.close() + req.response.stream_error(err),
                        "more_body": False,
                    }
                )
            raise StreamStarted(node_fault=True) from None
        call.upstream_s = time.perf_counter() - t_up
        splitter.close()
        call.usage = _estimate(call, req, reader)
        if call.usage.cache_read:
            call.cache_status = "prefix_hit"
        if reader.error is not None:
            # The vendor streamed an error event (relayed as it came): record it.
            call.status = reader.error.status
            call.error_type = reader.error.code
        elif req.on_answer is not None and getattr(reader, "final", None) is not None:
            final = reader.final
            if rewriter.renames(final.get(rewriter.key)):  # as the client got it
                final = {**final, rewriter.key: rewriter.public}
            await req.on_answer(final)
        try:
            await send({"type": "http.response.body", "body": rewriter.close(), "more_body": False})
        except OSError:
            gw.metrics.disconnects += 1
        return reader.error is None
    finally:
        watcher.cancel()
