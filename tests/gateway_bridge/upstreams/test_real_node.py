"""The pooled upstream client against a real simulator node: answers, streams,
keep-alive, the per-host limit, aborts and dropped streams."""

from __future__ import annotations

import asyncio
import json

from gateway_bridge.upstreams import UpstreamPool
from tests.gateway_bridge.upstreams.helpers import (
    CHAT,
    JSON,
    assert_nothing_in_use,
    chat_body,
    collect,
    run,
    wait_until,
)
from tests.inference_node.server_helpers import metric_value


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
