"""Stage 6, relay: the node's answer (or the gateway's error) to the client,
in the client's protocol.

- Plain answers: rendered by the call's response adapter, usage read from
  the node's own fields (or estimated by the token rule when it sent none),
  stored in the response cache when the call asked for it.
- Streams: the first event decides (before it nothing has reached the
  client, so a bad start is retryable: ``Retry``); after it every event is
  relayed as it comes. A client that leaves aborts the node's stream and the
  call is billed for what was produced (``bill_partial``); a node that breaks
  mid-stream gets an error frame in the client's protocol. Either way the
  forward stage learns it through ``StreamStarted`` and does not retry.
- Errors: ``fail`` renders a ``GatewayError`` in the call's protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from console.kernel.tokens import count_tokens
from gateway_bridge import answers
from gateway_bridge.pipeline.adapters import ADAPTERS, DEFAULT
from gateway_bridge.pipeline.call import Call, Retry, StreamStarted
from gateway_bridge.protocols.base import UPSTREAM, CallRequest, GatewayError
from gateway_bridge.upstreams import UpstreamError
from gateway_bridge.usage_mapping import TokenUsage, from_openai

if TYPE_CHECKING:
    from gateway_bridge.asgi import Receive, Send
    from gateway_bridge.pipeline.parts import RelayParts
    from gateway_bridge.protocols.base import ResponseAdapter
    from gateway_bridge.upstreams.response import UpstreamResponse
    from gateway_bridge.vendors.base import ChatStreamReader

# A stream's events: the node's SSE data (``[DONE]`` too), or a dialect's
# OpenAI chunks.
Events = AsyncIterator[Any]


_JSON = (b"content-type", b"application/json")


async def respond(send: Send, status: int, body: bytes, call: Call) -> None:
    """A whole JSON answer."""
    call.status = status
    headers = [
        _JSON,
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", call.request_id.encode()),
        *call.headers_out,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def fail(gw: RelayParts, call: Call, err: GatewayError, send: Send) -> None:
    """``err`` in the call's protocol (the client may be gone, or a response
    may have started already: then nothing more is sent)."""
    call.status = err.status
    call.error_type = err.code
    gw.metrics.error(err.code)
    adapter = ADAPTERS.get(call.protocol, DEFAULT)
    status, body = adapter.error_response(err)
    call.status = status
    for name, value in err.headers:
        call.headers_out.append((name.lower().encode(), str(value).encode()))
    with contextlib.suppress(OSError, RuntimeError):
        await respond(send, status, body, call)


async def start_stream(call: Call, adapter: ResponseAdapter, send: Send) -> None:
    headers = [
        (b"content-type", adapter.stream_content_type.encode()),
        (b"cache-control", b"no-cache"),
        (b"x-request-id", call.request_id.encode()),
        *call.headers_out,
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def plain(
    gw: RelayParts,
    call: Call,
    req: CallRequest,
    obj: dict[str, Any],
    send: Send,
    ckey: str | None,
    cache_ttl: int,
    usage: TokenUsage | None = None,
) -> None:
    """A node's whole answer (an OpenAI chat object: a vendor's was turned into
    one by its dialect, which read ``usage`` from the vendor's own fields),
    rendered for the client (and cached if asked)."""
    adapter = req.response
    if usage is None:
        usage = adapter.usage_of(obj)
    if usage is None:
        usage = TokenUsage(input=req.prompt_tokens_estimate, output=answers.output_tokens(obj))
    call.usage = usage
    if usage.cache_read:
        call.cache_status = "prefix_hit"
    body = adapter.render(obj, usage, req.model)
    if req.on_answer is not None:
        await req.on_answer()
    await respond(send, 200, body, call)
    if ckey and cache_ttl:
        await gw.cache.put(
            ckey,
            {"response": obj, "usage": {"prompt": usage.prompt_total, "output": usage.output}},
            cache_ttl,
        )


async def _translated(events: Events, reader: ChatStreamReader) -> Events:
    """A vendor's stream events as OpenAI chunks (the dialect's ``StreamReader``),
    encoded as the node's would be; ``[DONE]`` once the vendor's stream ends."""
    async for data in events:
        obj = answers.json_object(data)
        if obj is None:
            yield data
            continue
        for chunk in reader.feed(None, obj):
            yield chunk
        if reader.finished:
            break
    yield b"[DONE]"


async def stream(
    gw: RelayParts,
    call: Call,
    req: CallRequest,
    resp: UpstreamResponse,
    receive: Receive,
    send: Send,
    t_up: float,
    ckey: str | None,
    cache_ttl: int,
    reader: ChatStreamReader | None = None,
) -> bool:
    """Relay a streamed answer. Returns True when it ran to its end; raises
    StreamStarted when it broke after bytes reached the client, and
    UpstreamError / Retry when it broke before. ``reader``: a vendor dialect's
    StreamReader when the channel speaks another protocol (its events become
    OpenAI chunks; usage is the vendor's own)."""
    adapter = req.response
    events = resp.sse().__aiter__() if reader is None else _translated(resp.sse(), reader)
    # The first event decides: before it nothing has reached the client.
    chunk = await _first_chunk(events)
    await start_stream(call, adapter, send)
    texts: list[str] = []
    disconnected = asyncio.Event()
    watcher = asyncio.create_task(watch_disconnect(receive, resp, disconnected))
    collected: list[dict[str, Any]] | None = [] if ckey and cache_ttl else None
    try:
        try:
            usage, out = await _relay_events(call, req, resp, events, chunk, send, texts, collected)
        except _Broken as broken:
            call.upstream_s = time.perf_counter() - t_up
            await _broke(gw, call, req, broken, reader, texts, disconnected.is_set(), send)
        call.upstream_s = time.perf_counter() - t_up
        if reader is not None and reader.usage is not None:
            usage = reader.usage
        if usage is None:
            usage = TokenUsage(
                input=req.prompt_tokens_estimate, output=count_tokens("".join(texts))
            )
        await _end_stream(gw, call, req, usage, out, send)
        if collected is not None and ckey:
            await gw.cache.put(
                ckey,
                {
                    "response": answers.assemble(collected, req.endpoint),
                    "usage": {"prompt": usage.prompt_total, "output": usage.output},
                },
                cache_ttl,
            )
        return True
    finally:
        watcher.cancel()


async def watch_disconnect(
    receive: Receive, resp: UpstreamResponse, disconnected: asyncio.Event
) -> None:
    """Abort the node's stream when the client leaves (``disconnected`` set)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            disconnected.set()
            resp.abort()
            return


async def _first_chunk(events: Events) -> dict[str, Any]:
    """The stream's first chunk; a bad start (nothing has reached the client
    yet) is ``Retry`` (or the vendor's client error)."""
    try:
        first = await events.__anext__()
    except StopAsyncIteration:
        first = b"[DONE]"
    except GatewayError as err:  # a vendor's error event before anything was sent
        if err.status >= 500 or err.status == 429:
            raise Retry(err) from None
        raise
    if first == b"[DONE]":
        raise Retry(
            GatewayError(UPSTREAM, "upstream_empty_stream", "The node ended the stream at once.")
        )
    chunk = first if type(first) is dict else answers.json_object(first)
    if chunk is None:
        raise Retry(
            GatewayError(
                UPSTREAM,
                "upstream_invalid_response",
                "The node streamed something that is not JSON.",
            )
        )
    return chunk


class _Broken(Exception):
    """The stream broke after it started: what broke it, the usage the node
    had sent, and the rendered bytes not yet written."""

    def __init__(self, cause: Exception, usage: TokenUsage | None, out: bytes) -> None:
        self.cause = cause
        self.usage = usage
        self.out = out


async def _relay_events(
    call: Call,
    req: CallRequest,
    resp: UpstreamResponse,
    events: Events,
    chunk: dict[str, Any],
    send: Send,
    texts: list[str],
    collected: list[dict[str, Any]] | None,
) -> tuple[TokenUsage | None, bytes]:
    """Every event from ``chunk`` on, relayed as it comes: the node's usage
    (None: it sent none) and the rendered bytes not yet written. A break
    raises ``_Broken``."""
    adapter = req.response
    usage = None
    out = b""  # rendered, not yet written
    try:
        out = adapter.stream_start(req.model)
        while True:
            u = chunk.get("usage")
            if u:
                usage = from_openai(u)
            choices = chunk.get("choices")
            if choices:
                for choice in choices:
                    answers.collect_text(choice, texts)
                if call.ttft is None:
                    call.ttft = time.perf_counter() - call.t0
            if collected is not None:
                collected.append(chunk)
            piece = adapter.stream_chunk(chunk, req.model)
            if piece:
                out = out + piece if out else piece
            # One write for every event already in (``event_buffered``: the next
            # one has arrived); an event is never held back waiting for the node.
            if out and not resp.event_buffered:
                await send({"type": "http.response.body", "body": out, "more_body": True})
                out = b""
            data = await events.__anext__()
            if data == b"[DONE]":
                break
            parsed = data if type(data) is dict else answers.json_object(data)
            if parsed is None:
                raise GatewayError(
                    UPSTREAM,
                    "upstream_invalid_response",
                    "The node streamed something that is not JSON.",
                )
            chunk = parsed
    except StopAsyncIteration:
        pass  # the node closed a well-formed stream without [DONE]
    except (UpstreamError, GatewayError, OSError) as exc:
        raise _Broken(exc, usage, out) from None
    return usage, out


async def _broke(
    gw: RelayParts,
    call: Call,
    req: CallRequest,
    broken: _Broken,
    reader: ChatStreamReader | None,
    texts: list[str],
    disconnected: bool,
    send: Send,
) -> None:
    """A stream that broke after it started: billed for what was produced,
    ended with an error frame when the node (not the client) broke it; always
    raises ``StreamStarted``."""
    exc = broken.cause
    bill_partial(call, req, _vendor_usage(reader, broken.usage), texts)
    if disconnected or isinstance(exc, OSError):
        gw.metrics.disconnects += 1
        call.status = 499
        call.error_type = "client_disconnected"
        raise StreamStarted(node_fault=False) from None
    err = exc if isinstance(exc, GatewayError) else answers.upstream_exception_error(exc)
    call.status = err.status
    call.error_type = err.code
    with contextlib.suppress(OSError):
        await send(
            {
                "type": "http.response.body",
                "body": broken.out + req.response.stream_error(err),
                "more_body": False,
            }
        )
    raise StreamStarted(node_fault=True) from None


async def _end_stream(
    gw: RelayParts, call: Call, req: CallRequest, usage: TokenUsage, out: bytes, send: Send
) -> None:
    """The stream's last bytes (its usage, in the client's protocol)."""
    call.usage = usage
    if usage.cache_read:
        call.cache_status = "prefix_hit"
    tail = req.response.stream_end(usage, req.model)
    if req.on_answer is not None:
        await req.on_answer()
    try:
        await send({"type": "http.response.body", "body": out + tail, "more_body": False})
    except OSError:
        gw.metrics.disconnects += 1


def _vendor_usage(reader: ChatStreamReader | None, usage: TokenUsage | None) -> TokenUsage | None:
    """The vendor's own counts when a dialect read them, else the chunks' usage."""
    if reader is not None and reader.usage is not None:
        return reader.usage
    return usage


def bill_partial(call: Call, req: CallRequest, usage: TokenUsage | None, texts: list[str]) -> None:
    """What a broken or abandoned stream cost: the node's usage if it came,
    else the prompt estimate and the tokens streamed so far (by the
    documented tokenizer rule) — never zero, never the whole budget."""
    if usage is not None:
        call.usage = usage
    else:
        call.usage = TokenUsage(
            input=req.prompt_tokens_estimate, output=count_tokens("".join(texts))
        )
