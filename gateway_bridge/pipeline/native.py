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
  writes and reads included. The answer shows the vendor's model id.
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

    def __init__(self, reader, sse: bool):
        self.reader = reader
        self.sse = sse
        self.buffer = b""
        self.events = 0

    def feed(self, data: bytes) -> None:
        self.buffer += data
        if not self.sse:
            return
        events, self.buffer = _events(self.buffer)
        for name, payload in events:
            self.events += 1
            self.reader.feed(name.decode("latin-1") if name else None, payload)

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
    if req.on_answer is not None and isinstance(obj, dict):
        await req.on_answer(obj)
    await relay.respond(send, 200, raw, call)


async def stream(gw: Gateway, call: Call, req: CallRequest, resp, dialect, receive, send, t_up) -> bool:  # fmt: skip  # noqa: E501
    """Relay a native stream chunk by chunk. Returns True when it ran to its
    end; raises StreamStarted after bytes reached the client, Retry or
    UpstreamError before."""
    reader = dialect.NativeStreamUsage()
    content_type = resp.headers.get("content-type", "text/event-stream")
    splitter = _Splitter(reader, sse="event-stream" in content_type)
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
            out = b"".join(held)
            while True:
                if call.ttft is None and (reader.content or not splitter.sse):
                    call.ttft = time.perf_counter() - call.t0
                await send({"type": "http.response.body", "body": out, "more_body": True})
                out = await chunks.__anext__()
                splitter.feed(out)
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
                        "body": req.response.stream_error(err),
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
            await req.on_answer(reader.final)
        try:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            gw.metrics.disconnects += 1
        return reader.error is None
    finally:
        watcher.cancel()
