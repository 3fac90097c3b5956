"""The pooled upstream client: against a real simulator node, and against small raw
servers that answer garbage, hang, or close at the wrong moment."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import ipaddress
import json
import socket
import ssl

import pytest

from gateway_bridge.upstreams import UpstreamError, UpstreamPool
from tests.inference_node.server_helpers import metric_value, node_process

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


@pytest.fixture(scope="module")
def node():
    with node_process("--profile", "instant", via="module") as running:
        yield running


@pytest.fixture(scope="module")
def hanging_node():
    with node_process("--profile", "instant", "--hang-after-tokens", "3", via="module") as running:
        yield running


@pytest.fixture(scope="module")
def dropping_node():
    with node_process("--profile", "instant", "--drop-after-tokens", "2", via="module") as running:
        yield running


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


# ----------------------------------------------------------------- raw test servers


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


# ----------------------------------------------------------------- the real node


def test_a_plain_completion_and_its_connection_back_in_the_pool(node):
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", node.base_url, CHAT, chat_body(7), JSON)
        body = json.loads(await resp.read())
        resp.release()
        stats = pool.stats()[node.base_url]
        await pool.close()
        return resp, body, stats

    resp, body, stats = run(scenario())
    assert resp.status == 200
    assert resp.headers["content-type"] == "application/json"
    assert int(resp.headers["content-length"]) > 0
    assert body["usage"]["completion_tokens"] == 7
    assert stats == {"open": 1, "idle": 1, "in_use": 0, "waiting": 0, "opened": 1}


def test_a_stream_yields_each_event_then_done(node):
    async def scenario():
        pool = UpstreamPool()
        body = chat_body(5, stream=True, stream_options={"include_usage": True})
        resp = await pool.request("POST", node.base_url, CHAT, body, JSON)
        events = [data async for data in resp.sse()]
        stats = pool.stats()[node.base_url]
        await pool.close()
        return resp, events, stats

    resp, events, stats = run(scenario())
    assert resp.status == 200
    assert resp.headers["transfer-encoding"] == "chunked"
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert (stats["idle"], stats["in_use"]) == (1, 0)  # read to the end: reusable


def test_keep_alive_reuses_the_same_connection(node):
    async def scenario():
        pool = UpstreamPool()
        reused = []
        for _ in range(5):
            resp = await pool.request("POST", node.base_url, CHAT, chat_body(2), JSON)
            await resp.read()
            reused.append(resp.reused)
        stats = pool.stats()[node.base_url]
        await pool.close()
        return reused, stats

    reused, stats = run(scenario())
    assert reused == [False, True, True, True, True]
    assert stats["opened"] == 1


def test_concurrent_requests_wait_for_the_per_host_limit(node):
    async def scenario():
        pool = UpstreamPool(max_connections_per_host=3)

        async def one():
            resp = await pool.request("POST", node.base_url, CHAT, chat_body(3), JSON)
            return resp.status, json.loads(await resp.read())["usage"]["completion_tokens"]

        results = await asyncio.gather(*(one() for _ in range(12)))
        stats = pool.stats()[node.base_url]
        await pool.close()
        return results, stats

    results, stats = run(scenario())
    assert results == [(200, 3)] * 12
    assert stats["opened"] <= 3
    assert stats["in_use"] == 0


def test_abort_mid_stream_makes_the_node_stop(hanging_node):
    base = hanging_node.base_url

    async def aborted_count(pool) -> float:
        resp = await pool.request("GET", base, "/metrics", b"")
        text = (await resp.read()).decode()
        return metric_value(text, "vllm:request_success_total", finished_reason="abort")

    async def running(pool) -> float:
        resp = await pool.request("GET", base, "/metrics", b"")
        return metric_value((await resp.read()).decode(), "vllm:num_requests_running")

    async def scenario():
        pool = UpstreamPool()
        before = await aborted_count(pool)
        resp = await pool.request("POST", base, CHAT, chat_body(20, stream=True), JSON)
        events = []
        async for data in resp.sse():
            events.append(json.loads(data))
            if len(events) == 4:  # the role chunk and the 3 tokens before the hang
                break
        resp.abort()
        assert_nothing_in_use(pool)
        stopped = await wait_until(lambda: _both(aborted_count(pool), before, running(pool)))
        await pool.close()
        return events, stopped

    events, stopped = run(scenario())
    assert len(events) == 4
    assert stopped, "the node did not see the disconnect"


async def _both(aborted, before, running) -> bool:
    return await aborted > before and await running == 0


def test_the_node_dropping_a_stream_is_closed(dropping_node):
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", dropping_node.base_url, CHAT, chat_body(20, stream=True))
        events, reason = await collect(resp)
        assert_nothing_in_use(pool)
        await pool.close()
        return events, reason

    events, reason = run(scenario())
    assert reason == "closed"
    assert len(events) == 3  # role chunk + 2 tokens
    assert b"[DONE]" not in events


# ----------------------------------------------------------------- raw servers


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


def test_no_connection_leaks_after_aborts_errors_and_cancellations(node, hanging_node):
    async def garbage(reader, writer, n):
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloEXTRA")

    async def scenario():
        pool = UpstreamPool(max_connections_per_host=8)
        outcomes = {"ok": 0, "error": 0, "cancelled": 0}

        async def one(i: int, junk_url: str):
            kind = i % 6
            try:
                if kind == 0:
                    await (await pool.request("POST", node.base_url, CHAT, chat_body(2))).read()
                elif kind == 1:  # abort right after the head
                    (await pool.request("POST", node.base_url, CHAT, chat_body(50))).abort()
                elif kind == 2:  # stop iterating a stream early, then release
                    resp = await pool.request(
                        "POST", node.base_url, CHAT, chat_body(9, stream=True)
                    )
                    async for _ in resp.sse():
                        break
                    resp.release()
                elif kind == 3:  # a stream that hangs: idle timeout
                    resp = await pool.request(
                        "POST",
                        hanging_node.base_url,
                        CHAT,
                        chat_body(9, stream=True),
                        idle_timeout=0.05,
                    )
                    async for _ in resp.sse():
                        pass
                elif kind == 4:  # junk after the response: answered, then not reused
                    await (await pool.request("POST", junk_url, CHAT, b"{}")).read()
                else:  # cancelled while a hanging node streams
                    resp = await pool.request(
                        "POST", hanging_node.base_url, CHAT, chat_body(9, stream=True)
                    )
                    task = asyncio.ensure_future(_drain(resp))
                    await asyncio.sleep(0.01)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    outcomes["cancelled"] += 1
                    return
                outcomes["ok"] += 1
            except UpstreamError:
                outcomes["error"] += 1

        async with raw_server(garbage) as (junk_url, _):
            await asyncio.gather(*(one(i, junk_url) for i in range(120)))
            stats = pool.stats()
        await pool.close()
        return outcomes, stats

    outcomes, stats = run(scenario())
    assert outcomes == {"ok": 80, "error": 20, "cancelled": 20}
    for url, host in stats.items():
        assert host["in_use"] == 0, (url, host)
        assert host["open"] == host["idle"] <= 8


def test_a_response_dropped_without_release_frees_its_connection(node):
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", node.base_url, CHAT, chat_body(2))
        in_use = pool.stats()[node.base_url]["in_use"]
        del resp
        gc.collect()
        stats = pool.stats()[node.base_url]
        await pool.close()
        return in_use, stats

    in_use, stats = run(scenario())
    assert in_use == 1
    assert (stats["in_use"], stats["open"]) == (0, 0)


def test_abort_from_another_task_wakes_the_reader(hanging_node):
    # The gateway's pattern: one task relays the stream, a watcher aborts when the
    # client goes away.
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", hanging_node.base_url, CHAT, chat_body(9, stream=True))
        relay = asyncio.ensure_future(collect(resp))
        await asyncio.sleep(0.05)  # the relay now waits on the hung stream
        resp.abort()
        events, reason = await asyncio.wait_for(relay, 2)
        assert_nothing_in_use(pool)
        await pool.close()
        return len(events), reason

    assert run(scenario()) == (4, "closed")


def test_released_right_after_done_the_connection_is_kept():
    async def handle(reader, writer, n):
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(b"data: {}\n\n") + chunk(b"data: [DONE]\n\n"))
            await writer.drain()
            await asyncio.sleep(0.05)  # the end of the chunked body comes a bit later
            writer.write(b"0\r\n\r\n")

    async def scenario():
        pool = UpstreamPool()
        reused = []
        async with raw_server(handle) as (url, writers):
            for _ in range(2):
                resp = await pool.request("POST", url, CHAT, b"{}")
                async for data in resp.sse():
                    if data == b"[DONE]":
                        break
                resp.release()
                reused.append(resp.reused)
            connections = len(writers)
        await pool.close()
        return reused, connections

    assert run(scenario()) == ([False, True], 1)


async def _drain(resp) -> None:
    async for _ in resp.sse():
        pass


def test_a_closed_pool_refuses_requests_and_fails_the_ones_in_flight(hanging_node):
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", hanging_node.base_url, CHAT, chat_body(9, stream=True))
        reader = asyncio.ensure_future(_drain(resp))
        await asyncio.sleep(0.05)
        await pool.close()
        with pytest.raises(UpstreamError) as in_flight:
            await reader
        with pytest.raises(UpstreamError) as after:
            await pool.request("GET", hanging_node.base_url, "/health", b"")
        return in_flight.value.reason, after.value.reason, pool.stats()

    in_flight, after, stats = run(scenario())
    assert (in_flight, after) == ("closed", "closed")
    assert stats[hanging_node.base_url]["open"] == 0


def self_signed_cert(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files: (cert path, key path)."""
    # cryptography comes with the dev dependencies (google-auth needs it), not on its own.
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test node")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_https_with_the_pools_ssl_context_and_keep_alive(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    seen = []

    async def handle(reader, writer, n):
        while True:
            head, _ = await read_request(reader)
            seen.append(head.split("\r\n")[1])
            writer.write(ok(b"secure %d" % n))

    async def scenario():
        pool = UpstreamPool(ssl_context=ssl.create_default_context(cafile=cert))
        strict = UpstreamPool()  # the system's CAs: the self-signed node is refused
        writers = []

        async def on_connect(reader, writer):
            writers.append(writer)
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await handle(reader, writer, len(writers))

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=server_context)
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        bodies = [await (await pool.request("GET", url, "/", b"")).read() for _ in range(2)]
        with pytest.raises(UpstreamError) as refused:
            await strict.request("GET", url, "/", b"")
        await pool.close()
        await strict.close()
        server.close()
        for writer in writers:
            writer.close()
        return url, bodies, refused.value.reason

    url, bodies, refused = run(scenario())
    assert bodies == [b"secure 1", b"secure 1"]  # one TLS connection, kept alive
    assert seen[0] == f"host: {url.removeprefix('https://')}"
    assert refused == "connect"


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
