"""Native pass-through: a channel that speaks the client's own protocol
(an Anthropic client on an Anthropic channel, a Gemini client on a Gemini
channel) gets the client's body as it was sent, and the client gets the
vendor's answer as it was sent.

* **Request**: the raw bytes, with only the model id rewritten to the
  channel's (``model_name.rewrite_model``: the one top-level ``"model"`` value replaced
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
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from console.kernel.tokens import count_tokens
from gateway_bridge import answers
from gateway_bridge.pipeline import relay
from gateway_bridge.pipeline.call import Call, Retry, StreamStarted
from gateway_bridge.pipeline.model_name import (
    ANSWER_MODEL_KEYS,
    LEARN_EVENTS,
    ModelRewriter,
    model_rewriter,
    rename_answer,
)
from gateway_bridge.protocols.base import UPSTREAM, CallRequest, GatewayError
from gateway_bridge.upstreams import UpstreamError
from gateway_bridge.usage_mapping import TokenUsage

if TYPE_CHECKING:
    from gateway_bridge.asgi import Receive, Send
    from gateway_bridge.pipeline.parts import RelayParts
    from gateway_bridge.upstreams.response import UpstreamResponse
    from gateway_bridge.vendors.base import Dialect, NativeStreamReader


def _events(buffer: bytes) -> tuple[list[tuple[bytes | None, bytes]], bytes]:
    """The complete SSE events of ``buffer`` as (event name, data), and the rest."""
    if b"\r" in buffer:
        buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    out: list[tuple[bytes | None, bytes]] = []
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

    def __init__(
        self, reader: NativeStreamReader, sse: bool, rewriter: ModelRewriter | None = None
    ) -> None:
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
                self.learner.learn(payload) or self.events >= LEARN_EVENTS
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


def _estimate(call: Call, req: CallRequest, reader: NativeStreamReader) -> TokenUsage:
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


async def plain(
    gw: RelayParts,
    call: Call,
    req: CallRequest,
    resp: UpstreamResponse,
    dialect: Dialect,
    send: Send,
) -> None:
    """A native plain answer: its bytes to the client, its usage recorded."""
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


async def stream(
    gw: RelayParts,
    call: Call,
    req: CallRequest,
    resp: UpstreamResponse,
    dialect: Dialect,
    receive: Receive,
    send: Send,
    t_up: float,
) -> bool:
    """Relay a native stream chunk by chunk. Returns True when it ran to its
    end; raises StreamStarted after bytes reached the client, Retry or
    UpstreamError before."""
    reader = dialect.NativeStreamUsage()
    content_type = resp.headers.get("content-type", "text/event-stream")
    rewriter = model_rewriter(req, dialect.PROTOCOL)
    splitter = _Splitter(reader, "event-stream" in content_type, rewriter)
    chunks = resp.chunks().__aiter__()
    held = await _held_start(chunks, splitter, reader)
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
    watcher = asyncio.create_task(relay.watch_disconnect(receive, resp, disconnected))
    try:
        try:
            await _relay_chunks(call, chunks, splitter, reader, rewriter, held, send)
        except (UpstreamError, OSError) as exc:
            call.upstream_s = time.perf_counter() - t_up
            splitter.close()
            call.usage = _estimate(call, req, reader)
            await _broke(gw, call, req, exc, rewriter, disconnected.is_set(), send)
        call.upstream_s = time.perf_counter() - t_up
        splitter.close()
        return await _end_stream(gw, call, req, reader, rewriter, send)
    finally:
        watcher.cancel()


async def _held_start(
    chunks: AsyncIterator[bytes], splitter: _Splitter, reader: NativeStreamReader
) -> list[bytes]:
    """The stream's first chunks, held back: nothing reaches the client
    before the first complete event (or, for a JSON array stream, the first
    bytes); until then a failure is retryable (``Retry``)."""
    held: list[bytes] = []
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
            return held
        held.append(data)
        splitter.feed(data)
        if reader.error is not None:
            raise Retry(reader.error)
        if splitter.events or not splitter.sse:
            return held


async def _relay_chunks(
    call: Call,
    chunks: AsyncIterator[bytes],
    splitter: _Splitter,
    reader: NativeStreamReader,
    rewriter: ModelRewriter,
    held: list[bytes],
    send: Send,
) -> None:
    """The held chunks, then every chunk as it comes (model id renamed), to
    the vendor's stream end."""
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


async def _broke(
    gw: RelayParts,
    call: Call,
    req: CallRequest,
    exc: UpstreamError | OSError,
    rewriter: ModelRewriter,
    disconnected: bool,
    send: Send,
) -> None:
    """A stream that broke after it started (its usage already estimated):
    ended with an error event when the vendor broke it; always raises
    ``StreamStarted``."""
    if disconnected or isinstance(exc, OSError):
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


async def _end_stream(
    gw: RelayParts,
    call: Call,
    req: CallRequest,
    reader: NativeStreamReader,
    rewriter: ModelRewriter,
    send: Send,
) -> bool:
    """The stream's end: its usage and (a vendor's error event) its error
    recorded, its last bytes sent; True unless the vendor streamed an error."""
    call.usage = _estimate(call, req, reader)
    if call.usage.cache_read:
        call.cache_status = "prefix_hit"
    error = reader.error
    if error is not None:
        # The vendor streamed an error event (relayed as it came): record it.
        call.status = error.status
        call.error_type = error.code
    elif req.on_answer is not None and getattr(reader, "final", None) is not None:
        final: dict[str, Any] = getattr(reader, "final")  # noqa: B009 - not every reader has it
        if rewriter.renames(final.get(rewriter.key)):  # as the client got it
            final = {**final, rewriter.key: rewriter.public}
        await req.on_answer(final)
    try:
        await send({"type": "http.response.body", "body": rewriter.close(), "more_body": False})
    except OSError:
        gw.metrics.disconnects += 1
    return error is None
