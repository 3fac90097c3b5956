"""Shared pieces of the upstream client's tests: request bodies, small raw
servers that answer garbage, hang or close at the wrong moment, and checks
that the pool holds nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json

from gateway_bridge.upstreams import UpstreamError, UpstreamPool

CHAT = "/v1/chat/completions"
JSON = [("content-type", "application/json")]


def chat_body(max_tokens: int = 8, **fields) -> bytes:
    body = {
        "model": "sim-chat-small",
        "messages": [{"role": "user", "content": "Tell me about pools."}],
        "max_tokens": max_tokens,
        **fields,
    }
    return json.dumps(body).encode()


def run(coro):
    return asyncio.run(coro)


def assert_nothing_in_use(pool: UpstreamPool) -> None:
    for url, stats in pool.stats().items():
        assert stats["in_use"] == 0, (url, stats)
        assert stats["waiting"] == 0, (url, stats)
        assert stats["open"] == stats["idle"], (url, stats)


async def wait_until(check, timeout: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return False


async def collect(resp) -> tuple[list[bytes], str | None]:
    """The events of a stream and the reason it failed (None if it ended well)."""
    events = []
    try:
        async for data in resp.sse():
            events.append(data)
    except UpstreamError as error:
        return events, error.reason
    return events, None


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    length = 0
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return head, await reader.readexactly(length)


@contextlib.asynccontextmanager
async def raw_server(handle):
    """Serve ``handle(reader, writer, n)`` per connection (n counts from 1); yields
    (base_url, the list of connections' writers)."""
    writers: list[asyncio.StreamWriter] = []

    async def on_connect(reader, writer):
        writers.append(writer)
        try:
            await handle(reader, writer, len(writers))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", writers
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


def ok(body: bytes = b"ok", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
