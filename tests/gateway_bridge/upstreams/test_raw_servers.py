"""The pooled upstream client against small raw servers: the request head,
garbage, timeouts, closes, refused connections and the one retry of a stale one."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway_bridge.upstreams import UpstreamError, UpstreamPool
from tests.gateway_bridge.upstreams.helpers import (
    CHAT,
    SSE_HEAD,
    assert_nothing_in_use,
    chunk,
    collect,
    ok,
    raw_server,
    read_request,
    run,
    wait_until,
)


def test_request_head_host_length_and_caller_headers():
    seen = []

    async def handle(reader, writer, n):
        while True:
            seen.append(await read_request(reader))
            writer.write(ok())

    async def scenario():
        pool = UpstreamPool()
        async with raw_server(handle) as (url, _):
            headers = {"Authorization": "Bearer node-token", "Host": "evil", "X-Trace": "t1"}
            resp = await pool.request("POST", url + "/prefix/", CHAT, b'{"a":1}', headers)
            await resp.read()
            resp = await pool.request("GET", url, "/v1/models", b"", [("accept", "*/*")])
            await resp.read()
            with pytest.raises(ValueError, match="CR or LF"):
                await pool.request("GET", url, "/", b"", {"x-bad": "a\r\nx-injected: 1"})
            await pool.close()
        return url

    url = run(scenario())
    (head1, body1), (head2, body2) = seen
    lines = head1.split("\r\n")
    assert lines[0] == "POST /prefix/v1/chat/completions HTTP/1.1"
    assert f"host: {url.removeprefix('http://')}" in lines
    assert "host: evil" not in head1.lower()
    assert "authorization: Bearer node-token".lower() in head1.lower()
    assert "X-Trace: t1" in lines
    assert "content-length: 7" in lines
    assert body1 == b'{"a":1}'
    assert head2.startswith("GET /v1/models HTTP/1.1\r\n")
    assert "content-length: 0" in head2.split("\r\n")
    assert body2 == b""


def test_garbage_from_the_server_is_a_protocol_error():
    async def garbage(reader, writer, n):
        await read_request(reader)
        writer.write(b"SPDY/9 what is this\r\n\r\n")
        await reader.read()

    async def bad_chunk(reader, writer, n):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n")
        await reader.read()

    async def scenario():
        pool = UpstreamPool()
        reasons = []
        async with raw_server(garbage) as (url, _):
            with pytest.raises(UpstreamError) as caught:
                await pool.request("POST", url, CHAT, b"{}")
            reasons.append(caught.value.reason)
        async with raw_server(bad_chunk) as (url, _):
            resp = await pool.request("POST", url, CHAT, b"{}")
            assert resp.status == 200
            with pytest.raises(UpstreamError) as caught:
                await resp.read()
            reasons.append(caught.value.reason)
        assert_nothing_in_use(pool)
        await pool.close()
        return reasons

    assert run(scenario()) == ["protocol", "protocol"]


def test_first_byte_timeout_drops_the_connection():
    gone = []

    async def silent(reader, writer, n):
        await read_request(reader)
        gone.append(await reader.read())  # b"" once the client closes

    async def scenario():
        pool = UpstreamPool()
        async with raw_server(silent) as (url, _):
            with pytest.raises(UpstreamError) as caught:
                await pool.request("POST", url, CHAT, b"{}", first_byte_timeout=0.2)
            assert await wait_until(lambda: _true(gone))
        assert_nothing_in_use(pool)
        await pool.close()
        return caught.value.reason

    assert run(scenario()) == "first_byte_timeout"
    assert gone == [b""]


async def _true(items) -> bool:
    return bool(items)


def test_idle_timeout_between_events_and_total_timeout():
    async def one_event_then_hang(reader, writer, n):
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: first\n\n"))
        await reader.read()

    async def keepalives_forever(reader, writer, n):
        await read_request(reader)
        writer.write(SSE_HEAD)
        while True:
            writer.write(chunk(b": keep-alive\n\n"))
            await writer.drain()
            await asyncio.sleep(0.02)

    async def stream(pool, url, **timeouts):
        resp = await pool.request("POST", url, CHAT, b"{}", **timeouts)
        return await collect(resp)

    async def scenario():
        pool = UpstreamPool()
        results = []
        async with raw_server(one_event_then_hang) as (url, _):
            results.append(await stream(pool, url, idle_timeout=0.2, total_timeout=10))
        async with raw_server(keepalives_forever) as (url, _):
            loop = asyncio.get_running_loop()
            started = loop.time()
            results.append(await stream(pool, url, idle_timeout=0.3, total_timeout=0.5))
            results.append(loop.time() - started >= 0.49)
        assert_nothing_in_use(pool)
        await pool.close()
        return results

    assert run(scenario()) == [([b"first"], "idle_timeout"), ([], "total_timeout"), True]


def test_the_server_closing_mid_stream_or_mid_body_is_closed():
    async def close_mid_stream(reader, writer, n):
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: one\n\ndata: tw"))
        await writer.drain()

    async def close_mid_body(reader, writer, n):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
        await writer.drain()

    async def scenario():
        pool = UpstreamPool()
        async with raw_server(close_mid_stream) as (url, _):
            resp = await pool.request("POST", url, CHAT, b"{}")
            events, stream_reason = await collect(resp)
        async with raw_server(close_mid_body) as (url, _):
            resp = await pool.request("POST", url, CHAT, b"{}")
            with pytest.raises(UpstreamError) as body_error:
                await resp.read()
        assert_nothing_in_use(pool)
        await pool.close()
        return events, stream_reason, body_error.value.reason

    assert run(scenario()) == ([b"one"], "closed", "closed")


def test_connect_refused_and_waiting_for_a_connection_timing_out():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused_url = f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed below: refused

    async def slow(reader, writer, n):
        await read_request(reader)
        await asyncio.sleep(0.5)
        writer.write(ok())

    async def scenario():
        pool = UpstreamPool(max_connections_per_host=1)
        reasons = []
        with pytest.raises(UpstreamError) as caught:
            await pool.request("GET", refused_url, "/", b"")
        reasons.append(caught.value.reason)
        async with raw_server(slow) as (url, _):
            busy = asyncio.ensure_future(pool.request("GET", url, "/", b""))
            await asyncio.sleep(0.05)
            with pytest.raises(UpstreamError) as caught:
                await pool.request("GET", url, "/", b"", connect_timeout=0.1)
            reasons.append(caught.value.reason)
            resp = await busy
            assert await resp.read() == b"ok"
        assert_nothing_in_use(pool)
        await pool.close()
        return reasons

    assert run(scenario()) == ["connect", "connect_timeout"]


def test_a_stale_pooled_connection_is_retried_once_on_a_fresh_one():
    async def close_reused(reader, writer, n):
        # Answers the first request on a connection, then closes it when the
        # next one comes, without a byte of answer (the keep-alive race).
        await read_request(reader)
        writer.write(ok(b"conn %d" % n))
        await read_request(reader)

    async def close_after_answer(reader, writer, n):
        await read_request(reader)
        writer.write(ok(b"conn %d" % n))  # keep-alive in words, closed in deeds

    async def scenario():
        pool = UpstreamPool()
        results = []
        for handle in (close_reused, close_after_answer):
            async with raw_server(handle) as (url, writers):
                first = await pool.request("POST", url, CHAT, b"{}")
                results.append(await first.read())
                await asyncio.sleep(0.05)
                second = await pool.request("POST", url, CHAT, b"{}")
                results.append(await second.read())
                results.append(len(writers))
        assert_nothing_in_use(pool)
        await pool.close()
        return results

    assert run(scenario()) == [b"conn 1", b"conn 2", 2, b"conn 1", b"conn 2", 2]


def test_no_retry_on_a_fresh_connection_or_after_response_bytes():
    async def close_without_answer(reader, writer, n):
        await read_request(reader)

    async def half_a_head_on_reuse(reader, writer, n):
        await read_request(reader)
        writer.write(ok())
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-")
        await writer.drain()

    async def scenario():
        pool = UpstreamPool()
        results = []
        async with raw_server(close_without_answer) as (url, writers):
            with pytest.raises(UpstreamError) as caught:
                await pool.request("POST", url, CHAT, b"{}")
            results.append((caught.value.reason, len(writers)))
        async with raw_server(half_a_head_on_reuse) as (url, writers):
            await (await pool.request("POST", url, CHAT, b"{}")).read()
            with pytest.raises(UpstreamError) as caught:
                await pool.request("POST", url, CHAT, b"{}")
            results.append((caught.value.reason, len(writers)))
        assert_nothing_in_use(pool)
        await pool.close()
        return results

    assert run(scenario()) == [("closed", 1), ("closed", 1)]
