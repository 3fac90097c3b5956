"""Both limits stores behind one fixture: every behaviour test runs against
the in-process store and against Redis (db 11, flushed before and after)."""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urlsplit, urlunsplit

import pytest

from gateway_bridge.limits import MemoryLimitStore, RedisLimitStore
from tests.services import require

REDIS_DB = 11


def redis_url() -> str:
    """The configured Redis (127.0.0.1 by default), always database 11."""
    parts = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379")
    return urlunsplit((parts.scheme, parts.netloc, f"/{REDIS_DB}", "", ""))


def require_redis() -> None:
    import redis

    try:
        ok = redis.Redis.from_url(redis_url(), socket_timeout=0.5).ping()
    except redis.RedisError:
        ok = False
    require(ok, f"Redis is not reachable at {redis_url()}")


def flush_redis() -> None:
    import redis

    redis.Redis.from_url(redis_url()).flushdb()


class FakeClock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture(params=["memory", "redis", "redis-py"])
def make_store(request):
    """``make_store(**kwargs)`` builds a store of the parametrized kind (call
    it inside the event loop that uses it): in process, Redis through the
    store's own pipelined client, Redis through redis-py's asyncio client."""
    kind = request.param
    if kind != "memory":
        require_redis()
        flush_redis()

    def make(**kwargs):
        if kind == "memory":
            return MemoryLimitStore(**kwargs)
        client = "resp" if kind == "redis" else "redis-py"
        return RedisLimitStore.from_url(redis_url(), client=client, **kwargs)

    make.kind = kind
    yield make
    if kind != "memory":
        flush_redis()


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def run(make_store):
    """``run(scenario, **store_kwargs)``: ``await scenario(store)`` in a fresh
    loop with a fresh store, closed afterwards."""

    def go(scenario, **kwargs):
        async def main():
            store = make_store(**kwargs)
            try:
                return await scenario(store)
            finally:
                await store.close()

        return asyncio.run(main())

    return go
