"""What only the Redis store faces: a flushed or restarted Redis, lost
script cache, a dropped connection; and the pipelined client's parser."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from gateway_bridge.limits import BucketsMissing, CapBucket, RedisLimitStore, format_duration
from gateway_bridge.limits.resp import RespClient, RespError, _Incomplete, encode, parse
from tests.gateway_bridge.limits.conftest import flush_redis, redis_url, require_redis

CAP = CapBucket("key_daily_cap_exceeded", "cap:k:5:d:2026-12-02", 1_000, 3600)


@pytest.fixture
def redis_db():
    require_redis()
    flush_redis()
    yield redis.Redis.from_url(redis_url())
    flush_redis()


@pytest.mark.parametrize("client", ["resp", "redis-py"])
def test_a_flushed_redis_asks_for_seeding_instead_of_starting_from_zero(redis_db, client):
    async def scenario():
        store = RedisLimitStore.from_url(redis_url(), client=client)
        try:
            await store.seed(CAP.key, 900, 3600)
            await store.admit("a", 100, [CAP], [], 0, hold_seconds=60)
            redis_db.flushdb()
            with pytest.raises(BucketsMissing):
                await store.admit("b", 100, [CAP], [], 0, hold_seconds=60)
            await store.seed(CAP.key, 950, 3600)
            await store.admit("b", 50, [CAP], [], 0, hold_seconds=60)
            return await store.snapshot(CAP.key)
        finally:
            await store.close()

    assert asyncio.run(scenario()) == (950, 50)


def test_the_pipelined_client_reconnects_after_losing_its_connection(redis_db):
    async def scenario():
        client = RespClient.from_url(redis_url())
        store = RedisLimitStore(client)
        try:
            await store.seed(CAP.key, 0, 3600)
            own_id = await client.execute("CLIENT", "ID")
            redis_db.client_kill_filter(_id=own_id)
            with pytest.raises(ConnectionError):
                await store.admit("a", 10, [CAP], [], 0, hold_seconds=60)
            await store.admit("a", 10, [CAP], [], 0, hold_seconds=60)  # on a new connection
            return await store.snapshot(CAP.key)
        finally:
            await store.close()

    assert asyncio.run(scenario()) == (0, 10)


def test_the_pipelined_client_answers_concurrent_callers_in_order(redis_db):
    async def scenario():
        client = RespClient.from_url(redis_url())
        try:
            # A script Redis has never seen (as after a restart): loaded on NOSCRIPT.
            fresh = client.register_script(f"return {{7, '{uuid.uuid4()}'}}")
            assert (await fresh())[0] == 7
            await asyncio.gather(*(client.execute("SET", f"k{i}", i) for i in range(300)))
            got = await asyncio.gather(*(client.execute("GET", f"k{i}") for i in range(300)))
            with pytest.raises(RespError, match="WRONGTYPE"):
                await client.execute("HGET", "k1", "f")
            return got
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == [str(i).encode() for i in range(300)]
    assert redis_db.get("k299") == b"299"  # database 11 from the URL


def test_reply_parsing_waits_for_whole_replies():
    whole = b"*3\r\n:1\r\n$5\r\nhello\r\n*2\r\n$-1\r\n-ERR no\r\n"
    value, end = parse(bytearray(whole), 0)
    assert value[:2] == [1, b"hello"] and value[2][0] is None
    assert isinstance(value[2][1], RespError) and end == len(whole)
    for cut in range(1, len(whole)):
        with pytest.raises(_Incomplete):
            parse(bytearray(whole[:cut]), 0)
    assert (
        encode(["EVALSHA", "ab", 1, b"k"])
        == b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n"
    )


def test_reset_durations_in_openai_format():
    assert [format_duration(ms) for ms in (0, 20, 999, 1000, 1500, 60_000, 360_000, 61_250)] == [
        "0ms",
        "20ms",
        "999ms",
        "1s",
        "1.5s",
        "1m0s",
        "6m0s",
        "1m1.25s",
    ]
    assert format_duration(3_723_000) == "1h2m3s"
