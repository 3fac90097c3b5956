"""Each of Redis's roles can have its own server (limits apart from caches):
``REDIS_URL`` alone sets them all, a role's own URL moves only that role, and
the stored responses are bounded in bytes as well as in entries."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from gateway_bridge.cache import TtlStore
from tests.gateway_bridge.limits.conftest import require_redis

ROLES = (
    "CACHE_REDIS_URL",
    "PUBSUB_REDIS_URL",
    "GATEWAY_LIMITS_REDIS_URL",
    "GATEWAY_RESPONSES_REDIS_URL",
)
PRINT_ROLES = (
    "import json; from django.conf import settings as s; from gateway_bridge.config import "
    "GatewayConfig; c = GatewayConfig.from_settings(); print(json.dumps({"
    "'cache': s.CACHES['default'].get('LOCATION'), 'pubsub': s.PUBSUB_REDIS_URL, "
    "'limits': c.limits.redis_url, 'store': c.limits.store, 'responses': c.responses_redis_url, "
    "'response_cache': c.cache_redis_url}))"
)


def roles(tmp_path, **env) -> dict:
    child = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", *ROLES)}
    child.update(env, CONSOLE_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="console.settings")
    code = f"import django; django.setup(); {PRINT_ROLES}"
    out = subprocess.run(
        [sys.executable, "-c", code], env=child, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_redis_url_alone_is_every_roles_redis(tmp_path):
    url = "redis://127.0.0.1:6379/3"
    got = roles(tmp_path, REDIS_URL=url)
    assert got == {
        "cache": url,
        "pubsub": url,
        "limits": url,
        "store": "redis",
        "responses": url,
        "response_cache": url,
    }


def test_a_roles_own_redis_moves_that_role_only(tmp_path):
    base, limits, cache = (f"redis://127.0.0.1:6379/{n}" for n in (3, 4, 5))
    got = roles(tmp_path, REDIS_URL=base, GATEWAY_LIMITS_REDIS_URL=limits, CACHE_REDIS_URL=cache)
    assert (got["limits"], got["store"]) == (limits, "redis")
    assert got["cache"] == got["response_cache"] == cache
    assert got["pubsub"] == got["responses"] == base


def test_the_limits_may_have_a_redis_when_nothing_else_does(tmp_path):
    limits = "redis://127.0.0.1:6379/4"
    got = roles(tmp_path, GATEWAY_LIMITS_REDIS_URL=limits)
    assert (got["limits"], got["store"]) == (limits, "redis")
    assert got["cache"] is None and got["pubsub"] == got["responses"] == ""


def test_stored_responses_are_bounded_in_bytes():
    store = TtlStore("resp", max_entries=100, max_ttl=60, max_bytes=300, max_entry_bytes=200)
    value = {"text": "x" * 80}  # 93 bytes as stored

    async def scenario():
        for i in range(5):
            assert await store.put(f"r{i}", value, 60)
        kept = [i for i in range(5) if await store.get(f"r{i}") is not None]
        too_big = await store.put("big", {"text": "y" * 250}, 60)
        return kept, too_big

    kept, too_big = asyncio.run(scenario())
    assert kept == [2, 3, 4]  # the oldest went first
    assert store.local_bytes <= 300
    assert too_big is False and store.too_large == 1


def test_a_value_larger_than_the_whole_store_leaves_nothing_stale():
    store = TtlStore("resp", max_entries=10, max_ttl=60, max_bytes=50)

    async def scenario():
        await store.put("r", {"v": 1}, 60)
        kept = await store.put("r", {"v": "z" * 100}, 60)
        return kept, await store.get("r")

    assert asyncio.run(scenario()) == (False, None)
    assert store.local_bytes == 0


def test_a_value_over_the_entry_bound_replaces_nothing_stale():
    store = TtlStore("resp", max_entries=10, max_ttl=60, max_entry_bytes=50)

    async def scenario():
        await store.put("r", {"v": 1}, 60)
        await store.put("r", {"v": "z" * 100}, 60)  # refused: the old value goes too
        return await store.get("r")

    assert asyncio.run(scenario()) is None
    assert store.local_bytes == 0


def test_a_store_uses_its_own_roles_redis():
    require_redis()
    import redis

    from tests.gateway_bridge.limits.conftest import flush_redis, redis_url

    flush_redis()
    store = TtlStore("resp", max_entries=10, max_ttl=60, url=redis_url())

    async def scenario():
        try:
            await store.put("r1", {"v": 1}, 60)
        finally:
            await store.close()

    asyncio.run(scenario())
    names = [n.decode() for n in redis.Redis.from_url(redis_url()).keys("*gateway:resp:*")]
    assert [n.rsplit(":", 1)[-1] for n in names] == ["r1"]
    flush_redis()
