"""Choosing a node for a call: policies, per-node circuit breakers,
per-node concurrency slots and a per-model priority queue.

Pure asyncio state in one process; no I/O. ``Router.acquire`` returns a
``Lease`` on a node (a slot taken); ``Lease.release(outcome)`` gives the slot
back, feeds the node's breaker and wakes the next waiter.

Policies (per model, default ``prefix_affinity``):

* ``prefix_affinity`` — weighted rendezvous (highest random weight) hashing
  of the prompt's start over the candidates, so calls that share a system
  prompt land on the node whose prefix cache holds it; with bounded load: the
  chosen node is skipped while its in-flight calls exceed ``load_factor`` x
  its weighted fair share of all in-flight calls (+1), and the next node in
  rendezvous order takes the call (consistent hashing with bounded loads,
  Mirrokni et al.). The key is a hash of the first ``prefix_chars``
  characters of the rendered prompt (system prompt first): long shared
  system prompts give every tenant one key.
* ``round_robin`` — smooth weighted round robin (as nginx does).
* ``least_outstanding`` — fewest in-flight calls per unit of weight, then the
  node's own reported queue, then id.

Priority tiers: a node carries a ``tier`` (0 primary, 1 backup, ...); a call
goes to the lowest tier that has a candidate (breaker closed or probing, not
excluded by an earlier try, ``usable`` — the key pool has a credential left),
and queues there when that tier's nodes are all busy: backups take failures,
not overflow.

Circuit breaker per node: a rolling window of one-second buckets; it opens
when errors / calls >= ``breaker_error_rate`` with at least
``breaker_min_calls`` calls in the window; after ``breaker_open_seconds`` it
is half-open and lets ``half_open_probes`` calls through at a time: a
success closes it (window cleared), a failure opens it again.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import heapq
import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

POLICIES = ("prefix_affinity", "round_robin", "least_outstanding")
PRIORITY_RANK = {"high": 0, "normal": 1, "low": 2}


class Outcome(enum.Enum):
    SUCCESS = "success"  # the node answered
    FAILURE = "failure"  # connect error, timeout, 5xx, 429: counts against the node
    NEUTRAL = "neutral"  # the caller's fault (4xx) or the client left: says nothing


class NoCandidates(Exception):
    """No node of the list can take a call now (all circuits open)."""


class QueueTimeout(Exception):
    """Every candidate stayed at its concurrency limit for the whole timeout."""


class QueueFull(Exception):
    """The model's queue is at its maximum depth."""


@dataclass(frozen=True)
class RouterConfig:
    default_policy: str = "prefix_affinity"
    policies: dict[str, str] = field(default_factory=dict)
    load_factor: float = 1.25
    prefix_chars: int = 256
    breaker_window: int = 60
    breaker_error_rate: float = 0.15
    breaker_min_calls: int = 100
    breaker_open_seconds: float = 30.0
    half_open_probes: int = 1
    queue_timeout: float = 10.0
    max_queue_depth: int = 1000

    def __post_init__(self):
        for policy in (self.default_policy, *self.policies.values()):
            if policy not in POLICIES:
                raise ValueError(f"unknown routing policy {policy!r}; use one of {POLICIES}")


class Breaker:
    __slots__ = (
        "buckets",
        "calls",
        "errors",
        "max_probes",
        "min_calls",
        "open_seconds",
        "opened_at",
        "opened_calls",
        "opened_errors",
        "opened_reason",
        "openings",
        "probes",
        "rate",
        "state",
        "window",
    )

    def __init__(self, config: RouterConfig):
        self.window = config.breaker_window
        self.rate = config.breaker_error_rate
        self.min_calls = config.breaker_min_calls
        self.open_seconds = config.breaker_open_seconds
        self.max_probes = config.half_open_probes
        self.state = "closed"
        self.buckets: deque[list[int]] = deque()  # [second, calls, errors]
        self.calls = 0
        self.errors = 0
        self.opened_at = 0.0
        self.probes = 0
        self.openings = 0
        # What the window held when the circuit last opened (for the audit trail).
        self.opened_calls = 0
        self.opened_errors = 0
        self.opened_reason = ""

    def _expire(self, now: float) -> None:
        horizon = int(now) - self.window
        buckets = self.buckets
        while buckets and buckets[0][0] <= horizon:
            _, calls, errors = buckets.popleft()
            self.calls -= calls
            self.errors -= errors

    def available(self, now: float) -> bool:
        """Whether a call may go to this node now (moves open → half-open)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if now - self.opened_at < self.open_seconds:
                return False
            self.state = "half_open"
            self.probes = 0
        return self.probes < self.max_probes

    def taken(self) -> bool:
        """A call was routed here; True when it is a half-open probe."""
        if self.state == "half_open":
            self.probes += 1
            return True
        return False

    def record(self, outcome: Outcome, now: float, probe: bool) -> None:
        if probe:
            self.probes = max(0, self.probes - 1)
            if outcome is Outcome.SUCCESS:
                self.state = "closed"
                self.buckets.clear()
                self.calls = self.errors = 0
            elif outcome is Outcome.FAILURE:
                self._open(now, "probe_failed")
            return
        if self.state != "closed" or outcome is Outcome.NEUTRAL:
            return
        second = int(now)
        buckets = self.buckets
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0, 0])
        bucket = buckets[-1]
        bucket[1] += 1
        self.calls += 1
        if outcome is Outcome.FAILURE:
            bucket[2] += 1
            self.errors += 1
        self._expire(now)
        if self.calls >= self.min_calls and self.errors >= self.rate * self.calls:
            self._open(now, "error_rate")

    def _open(self, now: float, reason: str) -> None:
        self.state = "open"
        self.opened_at = now
        self.openings += 1
        self.opened_calls, self.opened_errors, self.opened_reason = self.calls, self.errors, reason
        self.buckets.clear()
        self.calls = self.errors = 0


class Lease:
    __slots__ = ("_released", "node", "policy", "probe", "queue_seconds", "router")

    def __init__(self, router, node, queue_seconds: float, probe: bool, policy: str):
        self.router = router
        self.node = node
        self.queue_seconds = queue_seconds
        self.probe = probe
        self.policy = policy
        self._released = False

    def release(self, outcome: Outcome = Outcome.NEUTRAL) -> None:
        if self._released:
            return
        self._released = True
        self.router._release(self, outcome)


class _Waiter:
    __slots__ = ("future", "model", "node_ids", "rank", "seq")

    def __init__(self, rank: int, seq: int, node_ids: frozenset[int], future, model: str):
        self.rank = rank
        self.seq = seq
        self.node_ids = node_ids
        self.future = future
        self.model = model

    def __lt__(self, other: _Waiter) -> bool:
        return (self.rank, self.seq) < (other.rank, other.seq)


def prefix_key(prefix: str, chars: int) -> bytes:
    return hashlib.blake2b(prefix[:chars].encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _LazyKey:
    """A prefix's affinity key, hashed on first use (a single free node needs none)."""

    __slots__ = ("_chars", "_key", "_prefix")

    def __init__(self, prefix: str, chars: int):
        self._prefix = prefix
        self._chars = chars
        self._key: bytes | None = None

    def value(self) -> bytes:
        if self._key is None:
            self._key = prefix_key(self._prefix, self._chars)
        return self._key


def rendezvous_score(key: bytes, node_id: int, weight: int) -> float:
    digest = hashlib.blake2b(key + node_id.to_bytes(8, "little", signed=True), digest_size=8)
    u = (int.from_bytes(digest.digest(), "little") + 1) / (2**64 + 2)  # in (0, 1)
    return -max(weight, 1) / math.log(u)


class Router:
    def __init__(
        self, config: RouterConfig | None = None, *, now: Callable[[], float] | None = None
    ):
        self.config = config or RouterConfig()
        self.now = now or time.monotonic
        self.in_flight: dict[int, int] = {}
        self.breakers: dict[int, Breaker] = {}
        self.names: dict[int, str] = {}
        self._rr: dict[str, dict[int, int]] = {}
        self._queues: dict[str, list[_Waiter]] = {}
        self._seq = itertools.count()
        # Called as ``on_transition(node, breaker)`` when a circuit opens or closes
        # (not on open → half-open, which only lets probes through).
        self.on_transition: Callable[[object, Breaker], None] | None = None

    # --- public -------------------------------------------------------------

    def policy_for(self, model: str) -> str:
        return self.config.policies.get(model, self.config.default_policy)

    def breaker(self, node) -> Breaker:
        b = self.breakers.get(node.node_id)
        if b is None:
            b = self.breakers[node.node_id] = Breaker(self.config)
            self.names[node.node_id] = node.name
        return b

    async def acquire(
        self,
        model: str,
        nodes: Sequence,
        *,
        prefix: str = "",
        priority: str = "normal",
        exclude: frozenset[int] = frozenset(),
        timeout: float | None = None,
        usable: Callable[[object], bool] | None = None,
    ) -> Lease:
        timeout = self.config.queue_timeout if timeout is None else timeout
        policy = self.policy_for(model)
        # The prefix hash is computed when a choice among several nodes needs it.
        key = _LazyKey(prefix, self.config.prefix_chars) if policy == "prefix_affinity" else b""
        started = now = self.now()
        loop_started = None
        waiter: _Waiter | None = None
        while True:
            candidates = [
                n
                for n in nodes
                if n.node_id not in exclude
                and self.breaker(n).available(now)
                and (usable is None or usable(n))
            ]
            if not candidates:
                # A retry that excluded every node still retries one of them.
                candidates = [
                    n
                    for n in nodes
                    if self.breaker(n).available(now) and (usable is None or usable(n))
                ]
            if not candidates:
                raise NoCandidates(model)
            if len(candidates) > 1:
                top = min(getattr(n, "tier", 0) for n in candidates)
                if any(getattr(n, "tier", 0) != top for n in candidates):
                    candidates = [n for n in candidates if getattr(n, "tier", 0) == top]
            node = self._choose(model, policy, candidates, key)
            if node is not None:
                return self._take(node, now - started if waiter is None else self.now() - started,
                                  policy)  # fmt: skip
            if loop_started is None:
                loop_started = time.monotonic()
            queue = self._queues.setdefault(model, [])
            if waiter is None:
                if len(queue) >= self.config.max_queue_depth:
                    raise QueueFull(model)
                seq = next(self._seq)
            else:
                seq = waiter.seq  # woken but beaten to the slot: keep the place in line
            future = asyncio.get_running_loop().create_future()
            waiter = _Waiter(
                PRIORITY_RANK.get(priority, 1),
                seq,
                frozenset(n.node_id for n in candidates),
                future,
                model,
            )
            heapq.heappush(queue, waiter)
            left = timeout - (time.monotonic() - loop_started)
            try:
                if left <= 0:
                    raise TimeoutError
                await asyncio.wait_for(asyncio.shield(future), left)
            except TimeoutError:
                self._remove(waiter)
                raise QueueTimeout(model) from None
            except BaseException:
                self._remove(waiter)
                if future.done() and not future.cancelled():
                    # We were woken for a slot we will not take: pass it on.
                    self._wake_for(waiter.node_ids)
                raise
            now = self.now()

    def stats(self) -> dict:
        nodes = {}
        for node_id, b in self.breakers.items():
            nodes[self.names.get(node_id, str(node_id))] = {
                "in_flight": self.in_flight.get(node_id, 0),
                "state": b.state,
                "openings": b.openings,
                "calls": b.calls,
                "errors": b.errors,
            }
        queues = {}
        for model, queue in self._queues.items():
            depth = {"high": 0, "normal": 0, "low": 0}
            for w in queue:
                depth[("high", "normal", "low")[w.rank]] += 1
            queues[model] = depth
        return {"nodes": nodes, "queues": queues}

    # --- internals --------------------------------------------------------

    def _full(self, node) -> bool:
        limit = node.max_concurrency
        return bool(limit) and self.in_flight.get(node.node_id, 0) >= limit

    def _choose(self, model: str, policy: str, candidates: list, key: bytes):
        free = [n for n in candidates if not self._full(n)]
        if not free:
            return None
        if len(free) == 1:
            return free[0]
        if policy == "round_robin":
            return self._round_robin(model, free)
        if policy == "least_outstanding":
            return self._least(free)
        if isinstance(key, _LazyKey):
            key = key.value()
        in_flight = self.in_flight
        total = sum(in_flight.get(n.node_id, 0) for n in candidates) + 1
        weights = sum(max(n.weight, 1) for n in candidates)
        ranked = sorted(
            candidates, key=lambda n: rendezvous_score(key, n.node_id, n.weight), reverse=True
        )
        for node in ranked:
            if self._full(node):
                continue
            share = self.config.load_factor * total * max(node.weight, 1) / weights
            if in_flight.get(node.node_id, 0) + 1 <= math.ceil(share):
                return node
        return self._least(free)

    def _least(self, nodes: list):
        in_flight = self.in_flight
        return min(
            nodes,
            key=lambda n: (
                in_flight.get(n.node_id, 0) / max(n.weight, 1),
                n.waiting or 0,
                n.node_id,
            ),
        )

    def _round_robin(self, model: str, nodes: list):
        current = self._rr.setdefault(model, {})
        total = 0
        best = None
        for n in nodes:
            w = max(n.weight, 1)
            total += w
            current[n.node_id] = current.get(n.node_id, 0) + w
            if best is None or current[n.node_id] > current[best.node_id]:
                best = n
        current[best.node_id] -= total
        return best

    def _take(self, node, queued: float, policy: str) -> Lease:
        probe = self.breaker(node).taken()
        self.in_flight[node.node_id] = self.in_flight.get(node.node_id, 0) + 1
        return Lease(self, node, max(0.0, queued), probe, policy)

    def _release(self, lease: Lease, outcome: Outcome) -> None:
        node = lease.node
        left = self.in_flight.get(node.node_id, 0) - 1
        if left > 0:
            self.in_flight[node.node_id] = left
        else:
            self.in_flight.pop(node.node_id, None)
        breaker = self.breaker(node)
        before = breaker.state
        breaker.record(outcome, self.now(), lease.probe)
        if breaker.state != before and self.on_transition is not None:
            try:
                self.on_transition(node, breaker)
            except Exception:  # reporting must never break routing
                logger.exception("circuit transition listener failed")
        if self._queues:
            self._wake_for(frozenset((node.node_id,)))

    def _wake_for(self, node_ids: frozenset[int]) -> None:
        """Wake the first waiter (priority, then arrival) a freed node can serve."""
        best = None
        for queue in self._queues.values():
            for w in queue:
                if w.future.done() or not (w.node_ids & node_ids):
                    continue
                if best is None or w < best:
                    best = w
        if best is not None:
            self._remove(best)
            best.future.set_result(None)

    def _remove(self, waiter: _Waiter) -> None:
        queue = self._queues.get(waiter.model)
        if not queue:
            return
        try:
            queue.remove(waiter)
        except ValueError:
            return
        heapq.heapify(queue)
        if not queue:
            self._queues.pop(waiter.model, None)
