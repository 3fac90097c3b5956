"""Reading server-sent events: what is already in, comments, multi-line data,
CRLF, odd splits, and a [DONE] still waiting for the body's end."""

from __future__ import annotations

import asyncio

from gateway_bridge.upstreams import UpstreamPool
from tests.gateway_bridge.upstreams.helpers import (
    CHAT,
    SSE_HEAD,
    assert_nothing_in_use,
    chunk,
    raw_server,
    read_request,
    run,
)


def test_sse_says_when_the_next_event_is_already_in():
    pieces = [
        b"data: 1\n\ndata: 2\n\n: ping\n\n",  # 1 is followed by 2; 2 only by a comment
        b"data: 3\n\nid: 9\ndata: 4\n\n",  # an event whose data is not its first line
        b"data: [DONE]\n\n",
    ]

    async def handle(reader, writer, n):
        await read_request(reader)
        writer.write(SSE_HEAD)
        for piece in pieces:
            writer.write(chunk(piece))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def scenario():
        pool = UpstreamPool()
        async with raw_server(handle) as (url, _):
            resp = await pool.request("POST", url, CHAT, b"{}")
            seen = [(data, resp.event_buffered) async for data in resp.sse()]
        await pool.close()
        return seen, resp.event_buffered

    seen, after = run(scenario())
    assert seen == [(b"1", True), (b"2", False), (b"3", True), (b"4", False), (b"[DONE]", False)]
    assert after is False


def test_sse_comments_multiline_data_crlf_and_odd_splits():
    pieces = [
        b": keep-alive\n\n",
        b"data: a\ndata: b\n\nevent: x\r\n",
        b"data: c\r",
        b"\n\r\nid: 7\nretry: 10\n\n",  # an event without data
        b"da",
        b'ta:{"k": 1}\n',
        b"\n",
        b"data: [DONE]\n\n",
    ]

    async def handle(reader, writer, n):
        await read_request(reader)
        writer.write(SSE_HEAD)
        for piece in pieces:
            writer.write(chunk(piece))
            await writer.drain()
            await asyncio.sleep(0.005)
        writer.write(b"0\r\n\r\n")
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(chunk(b"plain ") + chunk(b"chunked") + b"0\r\n\r\n")
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
        await writer.drain()

    async def scenario():
        pool = UpstreamPool()
        async with raw_server(handle) as (url, writers):
            resp = await pool.request("POST", url, CHAT, b"{}")
            events = [data async for data in resp.sse()]
            chunked = await (await pool.request("POST", url, CHAT, b"{}")).read()
            until_close = await (await pool.request("POST", url, CHAT, b"{}")).read()
            connections = len(writers)
        assert_nothing_in_use(pool)
        await pool.close()
        return events, chunked, until_close, connections

    events, chunked, until_close, connections = run(scenario())
    assert events == [b"a\nb", b"c", b'{"k": 1}', b"[DONE]"]
    assert chunked == b"plain chunked"
    assert until_close == b"until the end"
    assert connections == 1


def test_a_done_still_waiting_for_the_body_end_is_not_counted_as_in():
    """[DONE] is followed by a wait for the end of the body (``_settle``): an
    event before it is not reported as followed by one already in unless the
    body has ended, so a relay never holds it across that wait."""

    async def handle(reader, writer, n):
        await read_request(reader)
        writer.write(SSE_HEAD)
        late = n == 1  # the first connection ends its body a moment later
        writer.write(chunk(b"data: 1\n\ndata: [DONE]\n\n") + (b"" if late else b"0\r\n\r\n"))
        await writer.drain()
        if late:
            await asyncio.sleep(0.05)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async def scenario():
        pool = UpstreamPool()
        seen = []
        async with raw_server(handle) as (url, _):
            for _ in range(2):
                resp = await pool.request("POST", url, CHAT, b"{}")
                seen.append([(data, resp.event_buffered) async for data in resp.sse()])
        await pool.close()
        return seen

    late_end, ended = run(scenario())
    assert late_end == [(b"1", False), (b"[DONE]", False)]
    assert ended == [(b"1", True), (b"[DONE]", False)]
