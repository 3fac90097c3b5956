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
from typing import TYPE_CHECKING

from console.kernel.tokens import count_tokens
from gateway_bridge import answers
from gateway_bridge.pipeline.adapters import ADAPTERS, DEFAULT
from gateway_bridge.pipeline.call import Call, Retry, StreamStarted
from gateway_bridge.protocols.base import UPSTREAM, CallRequest, GatewayError
from gateway_bridge.upstreams import UpstreamError
from gateway_bridge.usage_mapping import TokenUsage, from_openai

if TYPE_CHECKING:
    from gateway_bridge.gateway import Gateway

_JSON = (b"content-type", b"application/json")


async def respond(send, status: int, body: bytes, call: Call) -> None:
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


async def fail(gw: Gateway, call: Call, err: GatewayError, send) -> None:
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


async def start_stream(call: Call, adapter, send) -> None:
    headers = [
        (b"content-type", adapter.stream_content_type.encode()),
        (b"cache-control", b"no-cache"),
        (b"x-request-id", call.request_id.encode()),
        *call.headers_out,
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def plain(gw: Gateway, call: Call, req: CallRequest, obj: dict, send, ckey, cache_ttl, usage=None):  # fmt: skip  # noqa: E501
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


async def _translated(events, reader):
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


async def stream(gw: Gateway, call: Call, req: CallRequest, resp, receive, send, t_up, ckey, cache_ttl, reader=None) -> bool:  # fmt: skip  # noqa: E501
    """Relay a streamed answer. Returns True when it ran to its end; raises
    StreamStarted when it broke after bytes reached the client, and
    UpstreamError / Retry when it broke before. ``reader``: a vendor dialect's
    StreamReader when the channel speaks another protocol (its events become
    OpenAI chunks; usage is the vendor's own)."""
    adapter = req.response
    events = resp.sse().__aiter__() if reader is None else _translated(resp.sse(), reader)
    # The first event decides: before it nothing has reached the client.
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
    await start_stream(call, adapter, send)
    texts: list[str] = []
    usage = None
    disconnected = asyncio.Event()

    async def watch():
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
                resp.abort()
                return

    watcher = asyncio.create_task(watch())
    collected: list[dict] = [] if ckey and cache_ttl else None
    out = b""  # rendered, not yet written
    try:
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
                chunk = data if type(data) is dict else answers.json_object(data)
                if chunk is None:
                    raise GatewayError(
                        UPSTREAM,
                        "upstream_invalid_response",
                        "The node streamed something that is not JSON.",
                    )
        except StopAsyncIteration:
            pass  # the node closed a well-formed stream without [DONE]
        except (UpstreamError, GatewayError, OSError) as exc:
            call.upstream_s = time.perf_counter() - t_up
            if disconnected.is_set() or isinstance(exc, OSError):
                bill_partial(call, req, _vendor_usage(reader, usage), texts)
                gw.metrics.disconnects += 1
                call.status = 499
                call.error_type = "client_disconnected"
                raise StreamStarted(node_fault=False) from None
            err = exc if isinstance(exc, GatewayError) else answers.upstream_exception_error(exc)
            bill_partial(call, req, _vendor_usage(reader, usage), texts)
            call.status = err.status
            call.error_type = err.code
            with contextlib.suppress(OSError):
                await send(
                    {
                        "type": "http.response.body",
                        "body": out + adapter.stream_error(err),
                        "more_body": False,
                    }
                )
            raise StreamStarted(node_fault=True) from None
        call.upstream_s = time.perf_counter() - t_up
        if reader is not None and reader.usage is not None:
            usage = reader.usage
        if usage is None:
            usage = TokenUsage(
                input=req.prompt_tokens_estimate, output=count_tokens("".join(texts))
            )
        call.usage = usage
        if usage.cache_read:
            call.cache_status = "prefix_hit"
        tail = adapter.stream_end(usage, req.model)
        if req.on_answer is not None:
            await req.on_answer()
        try:
            await send({"type": "http.response.body", "body": out + tail, "more_body": False})
        except OSError:
            gw.metrics.disconnects += 1
        if collected is not None:
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


def _vendor_usage(reader, usage):
    """The vendor's own counts when a dialect read them, else the chunks' usage."""
    if reader is not None and reader.usage is not None:
        return reader.usage
    return usage


def bill_partial(call: Call, req: CallRequest, usage, texts) -> None:
    """What a broken or abandoned stream cost: the node's usage if it came,
    else the prompt estimate and the tokens streamed so far (by the
    documented tokenizer rule) — never zero, never the whole budget."""
    if usage is not None:
        call.usage = usage
    else:
        call.usage = TokenUsage(
            input=req.prompt_tokens_estimate, output=count_tokens("".join(texts))
        )
