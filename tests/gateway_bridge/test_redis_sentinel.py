"""The gateway on a real Sentinel set (a primary, a replica and three
sentinels, started from ``redis-server`` here; skipped without the binary,
required under CI): the primary SIGKILLed while calls spend against a cap;
the Celery broker through kombu's sentinel transport; the Django cache."""

from __future__ import annotations

import asyncio

import pytest

from console.kernel import config, redis_url
from gateway_bridge import notify
from gateway_bridge.limits import CapBucket
from gateway_bridge.limits.resp import RespError
from tests.gateway_bridge.redis_servers import (
    SERVICE,
    Heard,
    cli,
    redis_sentinel,
    sentinel_primary,
    spend_through_failover,
    wait_for,
)
from tests.services import use_redis

# Its own Redis servers: the same whatever the suite is given (CI runs it once).
pytestmark = pytest.mark.engine_independent

WORST = 1_000
UNAVAILABLE = (ConnectionError, TimeoutError, OSError, RespError)


def _url(sentinels) -> str:
    return "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in sentinels) + f"/{SERVICE}/2"


@pytest.fixture(scope="module")
def shared_sentinel_set(tmp_path_factory):
    """One set for the tests that leave it whole."""
    with redis_sentinel(tmp_path_factory.mktemp("sentinel")) as (servers, primary, replica, s):
        yield servers, primary, replica, s, _url(s)


@pytest.fixture
def sentinel_set(shared_sentinel_set):
    return shared_sentinel_set


@pytest.fixture
def own_sentinel_set(tmp_path, settings, monkeypatch):
    """A set of the test's own, to kill a server of."""
    with redis_sentinel(tmp_path) as (servers, primary, replica, sentinels):
        url = _url(sentinels)
        use_redis(settings, url)
        monkeypatch.setattr(notify, "_redis", None)  # the publisher's client, for this URL
        yield servers, primary, replica, sentinels, url
        if notify._redis is not None:
            notify._redis.close()


def test_caps_never_overrun_when_the_primary_is_killed_mid_run(own_sentinel_set):
    servers, primary, replica, sentinels, url = own_sentinel_set
    cap = CapBucket("key_daily_cap_exceeded", "{o:8}cap:k:3:d:2026-12-04", 400 * WORST, 3600)
    heard = Heard()
    try:
        assert heard.published("key:1")  # invalidations reach a listening gateway

        def recover():
            servers.restart(primary)  # the sentinels make it the new primary's replica
            wait_for(
                "the old primary back as a replica",
                lambda: "master_link_status:up" in cli(primary, "INFO", "replication"),
                30.0,
            )

        out = asyncio.run(
            spend_through_failover(
                url,
                cap,
                WORST,
                kill=lambda: servers.kill(primary),
                failed_over=lambda: sentinel_primary(sentinels[0]) == replica,
                recover=recover,
            )
        )
        assert heard.published("key:2")  # and still do after the failover
    finally:
        heard.close()

    assert sum(out["admitted"]) <= cap.limit  # the cap held through the failover
    used, reserved = out["final"]
    assert used + reserved <= cap.limit
    assert out["after"] > 0  # the store recovered: calls were admitted again
    assert out["after_refused"] > 0  # ... up to the cap, which then refused
    assert out["errors"]  # the kill was felt: those calls got 503 limits_unavailable
    assert all(isinstance(e, UNAVAILABLE) for e in out["errors"]), out["errors"][:3]
    # The data lives in the database the URL names, on the promoted replica.
    assert cli(replica, "-n", "2", "EXISTS", cap.key) == "1"


def test_the_broker_and_the_cache_run_through_the_sentinels(sentinel_set):
    import kombu

    from console.kernel.redis_cache import RedisCache

    _, primary, _, _, url = sentinel_set
    broker, options = config.broker_url(url)
    assert broker.startswith("sentinel://") and options == {"master_name": SERVICE}
    with kombu.Connection(broker, transport_options=options) as conn:
        queue = conn.SimpleQueue("redis-sentinel-test")
        queue.put({"n": 1})
        assert queue.get(timeout=5).payload == {"n": 1}
        queue.close()

    cache = RedisCache(url, {"KEY_PREFIX": "t"})
    cache.set("a", {"x": 1}, 60)
    assert cache.get("a") == {"x": 1}
    assert cli(primary, "-n", "2", "EXISTS", "t:1:a") == "1"  # on the primary, database 2


def test_kombus_sentinel_form_names_the_same_primary(sentinel_set):
    _, primary, _, sentinels, _ = sentinel_set
    kombu_form = ";".join(f"sentinel://127.0.0.1:{p}/3" for p in sentinels)
    client = redis_url.sync_client(kombu_form + f"?master_name={SERVICE}")
    try:
        client.set("k", "v")
    finally:
        client.close()
    assert cli(primary, "-n", "3", "GET", "k") == "v"


def test_an_admission_no_replica_holds_is_refused_as_unavailable(own_sentinel_set):
    """With the replica gone, a failover could lose any write: admitting then
    would let a cap overrun, so the call fails (the gateway's 503) instead."""
    from gateway_bridge.limits import RedisLimitStore
    from gateway_bridge.limits.resp import NotReplicated

    servers, _, replica, _, url = own_sentinel_set
    cap = CapBucket("key_daily_cap_exceeded", "{o:8}cap:k:4:life", 10 * WORST, None)

    async def admit(rid):
        store = RedisLimitStore.from_url(url, timeout=0.5)
        try:
            await store.seed(cap.key, 0, None)
            await store.admit(rid, WORST, [cap], [], 0, hold_seconds=30)
            await store.settle(rid, WORST, 0)
            return await store.snapshot(cap.key)
        finally:
            await store.close()

    assert asyncio.run(admit("a")) == (WORST, 0)
    servers.kill(replica)
    with pytest.raises(NotReplicated):
        asyncio.run(admit("b"))


def test_a_cold_store_finds_the_primary_once_and_warms_before_the_first_call(sentinel_set):
    """A restarted gateway meets its first calls all at once: they wait for one
    search of the sentinels (not one each), and the gateway's start-up has
    already connected (``warm``), so no first call spends its 0.25 s deadline
    finding the primary."""
    from gateway_bridge.limits import RedisLimitStore
    from gateway_bridge.limits.resp_ha import SentinelClient

    *_, url = sentinel_set
    searches = 0
    find = SentinelClient._find_primary

    async def counted(self):
        nonlocal searches
        searches += 1
        return await find(self)

    async def cold_burst():
        store = RedisLimitStore.from_url(url, timeout=0.5)
        try:
            SentinelClient._find_primary = counted
            answers = await asyncio.gather(*(store.client.execute("PING") for _ in range(50)))
        finally:
            SentinelClient._find_primary = find
            await store.close()
        return answers

    assert asyncio.run(cold_burst()) == ["PONG"] * 50
    assert searches == 1

    async def warmed():
        store = RedisLimitStore.from_url(url, timeout=0.5)
        try:
            assert store.client._client is None
            assert await store.warm() is True
            return store.client._client is not None
        finally:
            await store.close()

    assert asyncio.run(warmed())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://127.0.0.1:26379", "names no Sentinel service"),
        ("redis+sentinel://127.0.0.1:26379/svc/zero", "a database is a number"),
        ("redis+sentinel://127.0.0.1:port/svc", "invalid host:port"),
        ("sentinel://127.0.0.1:26379/0", "needs \\?master_name="),
        ("redis+cluster://127.0.0.1:7000/3", "database 0 only"),
        ("http://127.0.0.1:6379", "unsupported scheme 'http'"),
        ("127.0.0.1:6379", "not a URL"),
    ],
)
def test_a_malformed_redis_url_is_refused_with_what_is_wrong(url, message):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=message):
        config.parse_redis_url(url)


def test_the_accepted_forms_parse():
    t = redis_url.parse("redis+sentinel://u:p%40ss@a:1,b:2/mymaster/4")
    assert (t.kind, t.hosts, t.service, t.db, t.username, t.password) == (
        redis_url.SENTINEL, (("a", 1), ("b", 2)), "mymaster", 4, "u", "p@ss"
    )  # fmt: skip
    t = redis_url.parse("sentinel://:pw@a:1;sentinel://b:2/5?master_name=m")
    assert (t.kind, t.hosts, t.service, t.db, t.password) == (
        redis_url.SENTINEL, (("a", 1), ("b", 2)), "m", 5, "pw"
    )  # fmt: skip
    assert redis_url.parse("rediss://h:6380/1").kind == redis_url.PLAIN
    assert config.broker_url("redis+sentinel://:pw@a:1,b:2/m/1") == (
        "sentinel://:pw@a:1/1;sentinel://:pw@b:2/1",
        {"master_name": "m"},
    )
