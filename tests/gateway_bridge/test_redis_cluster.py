"""The gateway on a real Redis Cluster (three primaries, a replica each,
started from ``redis-server`` here; skipped without the binary, required
under CI): a primary SIGKILLed while calls spend against a cap."""

from __future__ import annotations

import asyncio

import pytest
from redis.crc import key_slot

from console.kernel import redis_url
from gateway_bridge import notify
from gateway_bridge.limits import CapBucket, RedisLimitStore
from gateway_bridge.limits.resp import RespError
from tests.gateway_bridge.redis_servers import (
    Heard,
    cli,
    primary_for,
    redis_cluster,
    replicas_synced,
    spend_through_failover,
    wait_for,
)
from tests.services import use_redis

# Its own Redis servers: the same whatever the suite is given (CI runs it once).
pytestmark = pytest.mark.engine_independent

WORST = 1_000
UNAVAILABLE = (ConnectionError, TimeoutError, OSError, RespError)


def _use(url, settings, monkeypatch):
    use_redis(settings, url)
    monkeypatch.setattr(notify, "_redis", None)  # the publisher's client, for this URL


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """One cluster for the tests that leave it whole."""
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as (servers, ports):
        yield servers, ports, "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)


@pytest.fixture
def cluster(shared_cluster, settings, monkeypatch):
    _use(shared_cluster[2], settings, monkeypatch)
    yield shared_cluster
    if notify._redis is not None:
        notify._redis.close()


@pytest.fixture
def own_cluster(tmp_path, settings, monkeypatch):
    """A cluster of the test's own, to kill a primary of."""
    with redis_cluster(tmp_path) as (servers, ports):
        url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
        _use(url, settings, monkeypatch)
        yield servers, ports, url
        if notify._redis is not None:
            notify._redis.close()


def test_caps_never_overrun_when_a_primary_is_killed_mid_run(own_cluster):
    servers, ports, url = own_cluster
    cap = CapBucket("key_daily_cap_exceeded", "{o:41}cap:k:7:d:2026-12-04", 500 * WORST, 3600)
    victim = primary_for(ports[0], cap.key)
    watcher = next(p for p in ports if p != victim)
    heard = Heard()
    try:
        assert heard.published("key:1")  # invalidations reach a listening gateway

        def recover():
            servers.restart(victim)  # it rejoins as the replica of the promoted one
            wait_for("the old primary back as a replica", lambda: replicas_synced(ports))

        out = asyncio.run(
            spend_through_failover(
                url,
                cap,
                WORST,
                kill=lambda: servers.kill(victim),
                failed_over=lambda: primary_for(watcher, cap.key) != victim,
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
    assert primary_for(watcher, cap.key) != victim


def test_one_calls_keys_share_a_slot_and_other_orgs_land_elsewhere(cluster):
    """Every key a script touches is declared and hash-tagged: the cluster runs
    admissions for many organizations, spread over its three primaries."""
    _, ports, url = cluster

    async def scenario():
        store = RedisLimitStore.from_url(url, timeout=2.0)
        try:
            nodes = set()
            for org in range(12):
                cap = CapBucket("key_daily_cap_exceeded", f"{{o:{org}}}cap:k:1:life", 10, None)
                await store.seed(cap.key, 0, None)
                await store.admit(f"r{org}", 4, [cap], [], 0, hold_seconds=30)
                await store.settle(f"r{org}", 3, 0)
                assert await store.snapshot(cap.key) == (3, 0)
                nodes.add(primary_for(ports[0], cap.key))
            return nodes
        finally:
            await store.close()

    assert len(asyncio.run(scenario())) == 3


def test_a_prepaid_top_up_credits_the_balance_bucket_on_the_cluster(cluster, settings):
    """Billing's credit (sync, redis-py's RedisCluster) reaches the same slot
    the gateway's admissions use."""
    from gateway_bridge.limits import balance_key, credit_balance

    _, _, url = cluster
    settings.GATEWAY_LIMITS_STORE = "redis"
    key = balance_key(12)

    async def seed():
        store = RedisLimitStore.from_url(url, timeout=2.0)
        try:
            await store.seed(key, -500, None)
        finally:
            await store.close()

    async def balance():
        store = RedisLimitStore.from_url(url, timeout=2.0)
        try:
            return await store.snapshot(key)
        finally:
            await store.close()

    asyncio.run(seed())
    credit_balance(12, 300)
    assert asyncio.run(balance()) == (-800, 0)
    assert key_slot(b"{o:5}cap:k:1:life") == key_slot(b"{o:5}cap:k:1:life:z")


def test_the_django_cache_works_on_the_cluster(cluster):
    from console.kernel.redis_cache import RedisCache

    _, ports, url = cluster
    cache = RedisCache(url, {"KEY_PREFIX": "t"})
    cache.set_many({f"k{i}": i for i in range(20)}, 60)  # keys on every node
    assert cache.get_many([f"k{i}" for i in range(20)]) == {f"k{i}": i for i in range(20)}
    cache.delete_many([f"k{i}" for i in range(10)])
    assert cache.get("k3") is None
    assert cache.get("k13") == 13
    assert int(cli(ports[0], "DBSIZE")) >= 0


def test_the_broker_refuses_a_cluster_url_with_a_clear_message():
    from django.core.exceptions import ImproperlyConfigured

    from console.kernel import config

    with pytest.raises(ImproperlyConfigured, match=r"CELERY_BROKER_URL.*Sentinel"):
        config.broker_url("redis+cluster://127.0.0.1:7000,127.0.0.1:7001")
    assert redis_url.parse("redis+cluster://h:7000,h:7001").hosts == (("h", 7000), ("h", 7001))


def test_an_admission_spanning_two_organizations_is_refused_before_reaching_redis():
    """No Cluster slot holds two organizations' keys; ``plan`` never builds
    such a call, and the store refuses one rather than run a script Redis
    Cluster would reject (CROSSSLOT) or, on one Redis, one that could never
    move to a cluster."""
    from gateway_bridge.limits.redis_store import MixedTags
    from gateway_bridge.limits.resp import RespClient

    store = RedisLimitStore(RespClient("127.0.0.1", 1))  # never connected
    a = CapBucket("key_daily_cap_exceeded", "{o:1}cap:k:1:life", 10, None)
    b = CapBucket("key_daily_cap_exceeded", "{o:2}cap:k:2:life", 10, None)
    with pytest.raises(MixedTags, match=r"\{o:1\}.*\{o:2\}"):
        asyncio.run(store.admit("r", 1, [a, b], [], 0, hold_seconds=30))
