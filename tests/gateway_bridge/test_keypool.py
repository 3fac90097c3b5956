"""The key pool on its own: which credential a call gets, and what a vendor's
429 and 401 do to it (no I/O: a fake clock and seeded draws)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from gateway_bridge.keypool import (
    DEFAULT_COOL_SECONDS,
    MAX_COOL_SECONDS,
    KeyPool,
    retry_after_seconds,
)
from gateway_bridge.routing import Outcome, Router
from inference_node.selectors import RoutableCredential, RoutableNode


def node(*creds, node_id=1, tier=0) -> RoutableNode:
    return RoutableNode(
        node_id=node_id,
        name=f"channel-{node_id}",
        base_url="http://127.0.0.1:9",
        token="",
        weight=1,
        max_concurrency=0,
        upstream_model="m",
        context_window=None,
        running=None,
        waiting=None,
        kv_cache_usage=None,
        prefix_cache_hit_rate=None,
        labels={},
        organization_id=None,
        kind="openai",
        tier=tier,
        credentials=tuple(creds),
    )


def cred(cid, **kw) -> RoutableCredential:
    return RoutableCredential(cid, f"sk-secret-{cid}", hint=f"…{cid:04d}", **kw)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def pool() -> tuple[KeyPool, Clock]:
    clock = Clock()
    return KeyPool(now=clock, rng=random.Random(7)), clock


def test_calls_spread_over_the_pool_by_weight():
    keys, _ = pool()
    channel = node(cred(1, weight=3), cred(2, weight=1))
    picks = Counter(keys.pick(channel).credential_id for _ in range(4000))
    assert 2800 < picks[1] < 3200 and picks[1] + picks[2] == 4000


def test_a_rate_limited_key_cools_for_the_vendors_retry_after_then_returns():
    keys, clock = pool()
    a, b = cred(1), cred(2)
    channel = node(a, b)
    keys.cool(a, retry_after_seconds({"retry-after": "30"}))
    assert {keys.pick(channel).credential_id for _ in range(50)} == {2}
    clock.now += 29
    assert {keys.pick(channel).credential_id for _ in range(50)} == {2}
    clock.now += 2
    assert {keys.pick(channel).credential_id for _ in range(200)} == {1, 2}


def test_retry_after_is_read_bounded_and_defaulted():
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"retry-after": "99999"}) == MAX_COOL_SECONDS
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == (
        DEFAULT_COOL_SECONDS
    )
    assert retry_after_seconds({}) == DEFAULT_COOL_SECONDS


def test_a_refused_key_leaves_the_pool_and_is_reported_once():
    keys, _ = pool()
    reports = []
    keys.on_refused = lambda cid, status, message: reports.append((cid, status, message))
    a, b = cred(1), cred(2)
    channel = node(a, b)
    keys.refuse(a, 401, "invalid x-api-key")
    keys.refuse(a, 401, "invalid x-api-key")
    assert reports == [(1, 401, "invalid x-api-key")]
    assert {keys.pick(channel).credential_id for _ in range(50)} == {2}
    keys.refuse(b, 403, "forbidden")
    assert keys.pick(channel) is None and not keys.usable(channel)


def test_a_key_already_tried_by_this_call_is_not_picked_again():
    keys, _ = pool()
    channel = node(cred(1), cred(2))
    assert keys.pick(channel, {1}).credential_id == 2
    assert keys.pick(channel, {1, 2}) is None
    assert not keys.usable(channel, {1, 2}) and keys.usable(channel, {1})


def test_a_keys_own_limits_hold_calls_back():
    keys, clock = pool()
    limited = cred(1, rpm_limit=2, max_concurrency=5)
    channel = node(limited)
    for _ in range(2):
        assert keys.taken(keys.pick(channel), 10) is False
    assert keys.pick(channel) is None  # two requests in the last minute
    clock.now += 61
    assert keys.pick(channel) is limited
    tpm = node(cred(2, tpm_limit=100), node_id=2)
    keys.taken(keys.pick(tpm, tokens=80), 80)
    assert keys.pick(tpm, tokens=30) is None and keys.pick(tpm, tokens=20) is not None


def test_a_failing_key_opens_its_own_circuit():
    keys, _ = pool()
    a, b = cred(1), cred(2)
    channel = node(a, b)
    config = keys.config
    for _ in range(config.breaker_min_calls):
        probe = keys.taken(a, 1)
        keys.release(a, Outcome.FAILURE, probe)
    assert keys.stats()[1]["state"] == "open"
    assert {keys.pick(channel).credential_id for _ in range(50)} == {2}


def test_a_node_without_a_pool_costs_nothing_and_is_never_cooled():
    keys, _ = pool()
    own = RoutableCredential(None, "node-token")
    channel = node(own)
    keys.cool(own, 60)
    keys.refuse(own, 401, "no")
    assert keys.pick(channel) is own and keys.usable(channel)
    assert keys.stats() == {}


def test_the_router_takes_the_lowest_tier_that_can_serve_and_fails_over():
    asyncio.run(_tiers())


async def _tiers():
    router = Router()
    keys, _ = pool()
    primary = node(cred(1), node_id=1, tier=0)
    backup = node(cred(2), node_id=2, tier=1)
    nodes = (backup, primary)
    for _ in range(20):
        lease = await router.acquire("m", nodes, usable=keys.usable)
        assert lease.node is primary
        lease.release(Outcome.SUCCESS)
    keys.cool(primary.credentials[0], 30)  # every key of the primary channel is resting
    lease = await router.acquire("m", nodes, usable=keys.usable)
    assert lease.node is backup
    lease.release(Outcome.SUCCESS)
    # Excluded by an earlier try of the same call: the backup tier takes it too.
    keys, _ = pool()
    lease = await router.acquire("m", nodes, exclude=frozenset({1}), usable=keys.usable)
    assert lease.node is backup
