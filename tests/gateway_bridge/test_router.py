"""Routing: policies, bounded load, circuit breakers, slots and the priority
queue, on a fake clock (no sleeping)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from types import MappingProxyType

import pytest

from gateway_bridge.routing import (
    NoCandidates,
    Outcome,
    QueueFull,
    QueueTimeout,
    Router,
    RouterConfig,
)
from inference_node.selectors import RoutableNode


def node(node_id: int, *, weight: int = 1, max_concurrency: int = 64, waiting=None):
    return RoutableNode(
        node_id=node_id,
        name=f"n{node_id}",
        base_url=f"http://127.0.0.1:{9000 + node_id}",
        token="",
        weight=weight,
        max_concurrency=max_concurrency,
        upstream_model="m",
        context_window=8192,
        running=None,
        waiting=waiting,
        kv_cache_usage=None,
        prefix_cache_hit_rate=None,
        labels=MappingProxyType({}),
        organization_id=None,
    )


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def router(**config) -> tuple[Router, Clock]:
    clock = Clock()
    return Router(RouterConfig(**config), now=clock), clock


def take(r, nodes, prefix="", **kw):
    return asyncio.run(r.acquire("m", nodes, prefix=prefix, **kw))


NODES = [node(i) for i in range(1, 5)]


def test_prefix_affinity_is_stable_and_moves_only_a_removed_nodes_keys():
    r, _ = router()
    prefixes = [f"system prompt of tenant {i} " * 20 for i in range(400)]
    first = {}
    for p in prefixes:
        lease = take(r, NODES, p)
        first[p] = lease.node.node_id
        lease.release(Outcome.SUCCESS)
    for p in prefixes[:50]:
        lease = take(r, NODES, p)
        assert lease.node.node_id == first[p]
        lease.release(Outcome.SUCCESS)
    r2, _ = router()
    survivors = [n for n in NODES if n.node_id != 4]
    for p in prefixes:
        lease = take(r2, survivors, p)
        if first[p] != 4:
            assert lease.node.node_id == first[p]
        lease.release(Outcome.SUCCESS)
    spread = Counter(first.values())
    assert all(60 <= spread[i] <= 140 for i in range(1, 5)), spread


def test_weights_are_proportional():
    r, _ = router()
    nodes = [node(1, weight=1), node(2, weight=3)]
    counts = Counter()
    for i in range(2000):
        lease = take(r, nodes, f"tenant-{i}")
        counts[lease.node.node_id] += 1
        lease.release(Outcome.SUCCESS)
    assert 0.68 < counts[2] / 2000 < 0.82


def test_bounded_load_spills_a_hot_prefix():
    r, _ = router(load_factor=1.25)

    async def run():
        leases = [await r.acquire("m", NODES, prefix="one hot tenant") for _ in range(40)]
        return Counter(lease.node.node_id for lease in leases)

    counts = asyncio.run(run())
    assert len(counts) == 4  # spilled to every node
    assert max(counts.values()) <= 13  # about 1.25 x the fair share of 10


def test_round_robin_is_even_and_weighted():
    r, _ = router(default_policy="round_robin")
    nodes = [node(1), node(2, weight=2), node(3)]
    picks = []
    for _ in range(40):
        lease = take(r, nodes)
        picks.append(lease.node.node_id)
        lease.release(Outcome.SUCCESS)
    assert Counter(picks) == {1: 10, 2: 20, 3: 10}
    assert all(a != b or a == 2 for a, b in itertools.pairwise(picks))


def test_least_outstanding():
    r, _ = router(default_policy="least_outstanding")

    async def run():
        a = await r.acquire("m", NODES[:2])
        b = await r.acquire("m", NODES[:2])
        assert {a.node.node_id, b.node.node_id} == {1, 2}
        a.release(Outcome.SUCCESS)
        c = await r.acquire("m", NODES[:2])
        assert c.node.node_id == a.node.node_id

    asyncio.run(run())


def fail(r, nodes, n, outcome):
    for _ in range(n):
        lease = take(r, nodes)
        lease.release(outcome)


@pytest.mark.parametrize(
    ("calls", "errors", "opens"), [(99, 20, False), (100, 15, True), (100, 14, False)]
)
def test_breaker_thresholds(calls, errors, opens):
    r, _ = router(breaker_min_calls=100, breaker_error_rate=0.15)
    one = [node(1)]
    fail(r, one, calls - errors, Outcome.SUCCESS)
    fail(r, one, errors, Outcome.FAILURE)
    state = r.stats()["nodes"]["n1"]["state"]
    assert (state == "open") is opens


def test_breaker_half_open_probe_and_window_expiry():
    r, clock = router(breaker_min_calls=10, breaker_open_seconds=30)
    one = [node(1)]
    fail(r, one, 10, Outcome.FAILURE)
    with pytest.raises(NoCandidates):
        take(r, one)
    clock.t += 30
    probe = take(r, one)
    assert r.stats()["nodes"]["n1"]["state"] == "half_open"
    with pytest.raises(NoCandidates):  # one probe at a time
        take(r, one)
    probe.release(Outcome.FAILURE)
    assert r.stats()["nodes"]["n1"]["state"] == "open"
    assert r.stats()["nodes"]["n1"]["openings"] == 2
    clock.t += 30
    take(r, one).release(Outcome.SUCCESS)
    assert r.stats()["nodes"]["n1"]["state"] == "closed"
    # Errors older than the window no longer count.
    fail(r, one, 9, Outcome.FAILURE)
    clock.t += 61
    fail(r, one, 1, Outcome.FAILURE)
    assert r.stats()["nodes"]["n1"]["state"] == "closed"


def test_a_failing_node_is_skipped_and_exclusion_falls_back():
    r, _ = router(breaker_min_calls=10)
    fail(r, [node(1)], 10, Outcome.FAILURE)
    assert take(r, NODES[:2]).node.node_id == 2
    # Excluding the only healthy node still gives it (a retry with one node).
    assert take(r, NODES[:2], exclude=frozenset({2})).node.node_id == 2


def test_priority_queue_order_timeout_and_full():
    r, _ = router(max_queue_depth=3)
    one = [node(1, max_concurrency=1)]

    async def run():
        held = await r.acquire("m", one)
        order = []

        async def wait(priority, tag):
            lease = await r.acquire("m", one, priority=priority, timeout=5)
            order.append(tag)
            await asyncio.sleep(0)
            lease.release(Outcome.SUCCESS)

        tasks = [
            asyncio.create_task(wait("low", "low")),
            asyncio.create_task(wait("normal", "normal-1")),
            asyncio.create_task(wait("high", "high")),
        ]
        await asyncio.sleep(0.01)
        assert r.stats()["queues"]["m"] == {"high": 1, "normal": 1, "low": 1}
        with pytest.raises(QueueFull):
            await r.acquire("m", one, timeout=1)
        held.release(Outcome.SUCCESS)
        await asyncio.gather(*tasks)
        assert order == ["high", "normal-1", "low"]
        held = await r.acquire("m", one)
        with pytest.raises(QueueTimeout):
            await r.acquire("m", one, timeout=0.05)
        held.release(Outcome.SUCCESS)
        assert r.in_flight == {}

    asyncio.run(run())


def test_slots_never_leak_under_cancellation():
    r, _ = router()
    nodes = [node(1, max_concurrency=2), node(2, max_concurrency=1)]
    rng = random.Random(3)

    async def run():
        async def client():
            for _ in range(30):
                try:
                    lease = await asyncio.wait_for(r.acquire("m", nodes, timeout=1), 0.002)
                except (TimeoutError, QueueTimeout):
                    continue
                await asyncio.sleep(rng.random() / 1000)
                lease.release(rng.choice(list(Outcome)))
                lease.release(Outcome.SUCCESS)  # a second release is a no-op

        await asyncio.gather(*(client() for _ in range(20)))

    asyncio.run(run())
    assert r.in_flight == {}
    assert r.stats()["queues"] == {}


def test_circuit_transitions_are_told_to_the_listener():
    r, clock = router(breaker_min_calls=10, breaker_error_rate=0.5, breaker_open_seconds=30)
    heard = []
    r.on_transition = lambda n, b: heard.append(
        (n.name, b.state, b.opened_reason, b.opened_calls, b.opened_errors)
    )
    one = [node(1)]
    fail(r, one, 4, Outcome.SUCCESS)
    fail(r, one, 6, Outcome.FAILURE)
    assert heard == [("n1", "open", "error_rate", 10, 6)]
    clock.t += 30
    take(r, one).release(Outcome.FAILURE)  # the half-open probe fails
    clock.t += 30
    take(r, one).release(Outcome.SUCCESS)  # and the next one closes it
    assert heard[1:] == [
        ("n1", "open", "probe_failed", 0, 0),
        ("n1", "closed", "probe_failed", 0, 0),
    ]
    # Open → half-open is not a transition worth telling: it only lets probes through.
    assert len(heard) == 3


def test_a_failing_listener_does_not_break_routing():
    r, _ = router(breaker_min_calls=2)

    def broken(n, b):
        raise RuntimeError("listener bug")

    r.on_transition = broken
    fail(r, [node(1)], 2, Outcome.FAILURE)
    assert r.stats()["nodes"]["n1"]["state"] == "open"
    assert r.in_flight == {}
