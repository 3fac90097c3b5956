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

Circuit breaker per node (``gateway_bridge.breaker``): it opens on a high
error rate and lets probes through once it has been open a while.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway_bridge.breaker import POLICIES, Breaker, Outcome, RouterConfig

if TYPE_CHECKING:
    from inference_node.facade import RoutableNode

__all__ = [
    "POLICIES",
    "Breaker",
    "Lease",
    "NoCandidates",
    "NodeSnapshot",
    "Outcome",
    "QueueFull",
    "QueueTimeout",
    "Router",
    "RouterConfig",
    "prefix_key",
    "rendezvous_score",
]

logger = logging.getLogger(__name__)

PRIORITY_RANK = {"high": 0, "normal": 1, "low": 2}


class NodeSnapshot(Protocol):
    """The healthy nodes by public model, as ``inference_node`` builds them
    (``build_routing_snapshot``): what the gateway routes over."""

    def for_model(
        self, public_model: str, organization_id: int | None
    ) -> tuple[RoutableNode, ...]: ...

    def models(self, organization_id: int | None) -> set[str]: ...


class NoCandidates(Exception):
    """No node of the list can take a call now (all circuits open)."""


class QueueTimeout(Exception):
    """Every candidate stayed at its concurrency limit for the whole timeout."""


class QueueFull(Exception):
    """The model's queue is at its maximum depth."""


class Lease:
    __slots__ = ("_released", "node", "policy", "probe", "queue_seconds", "router")

    def __init__(
        self, router: Router, node: RoutableNode, queue_seconds: float, probe: bool, policy: str
    ) -> None:
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

    def __init__(
        self,
        rank: int,
        seq: int,
        node_ids: frozenset[int],
        future: asyncio.Future[None],
        model: str,
    ) -> None:
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

    def __init__(self, prefix: str, chars: int) -> None:
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
    ) -> None:
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
        self.on_transition: Callable[[RoutableNode, Breaker], None] | None = None

    # --- public -------------------------------------------------------------

    def policy_for(self, model: str) -> str:
        return self.config.policies.get(model, self.config.default_policy)

    def breaker(self, node: RoutableNode) -> Breaker:
        b = self.breakers.get(node.node_id)
        if b is None:
            b = self.breakers[node.node_id] = Breaker(self.config)
            self.names[node.node_id] = node.name
        return b

    async def acquire(
        self,
        model: str,
        nodes: Sequence[RoutableNode],
        *,
        prefix: str = "",
        priority: str = "normal",
        exclude: frozenset[int] = frozenset(),
        timeout: float | None = None,
        usable: Callable[[RoutableNode], bool] | None = None,
    ) -> Lease:
        timeout = self.config.queue_timeout if timeout is None else timeout
        policy = self.policy_for(model)
        # The prefix hash is computed when a choice among several nodes needs it.
        key = _LazyKey(prefix, self.config.prefix_chars) if policy == "prefix_affinity" else b""
        started = now = self.now()
        loop_started = None
        waiter: _Waiter | None = None
        while True:
            candidates = self._candidates(model, nodes, exclude, usable, now)
            node = self._choose(model, policy, candidates, key)
            if node is not None:
                return self._take(node, now - started if waiter is None else self.now() - started,
                                  policy)  # fmt: skip
            if loop_started is None:
                loop_started = time.monotonic()
            waiter = self._queue(model, priority, candidates, waiter)
            await self._wait(model, waiter, timeout - (time.monotonic() - loop_started))
            now = self.now()

    def _candidates(
        self,
        model: str,
        nodes: Sequence[RoutableNode],
        exclude: frozenset[int],
        usable: Callable[[RoutableNode], bool] | None,
        now: float,
    ) -> list[RoutableNode]:
        """The nodes a call may go to now: closed circuits, a usable key, not
        excluded (unless every node is), of the lowest tier among them."""
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
                n for n in nodes if self.breaker(n).available(now) and (usable is None or usable(n))
            ]
        if not candidates:
            raise NoCandidates(model)
        if len(candidates) > 1:
            top = min(getattr(n, "tier", 0) for n in candidates)
            if any(getattr(n, "tier", 0) != top for n in candidates):
                candidates = [n for n in candidates if getattr(n, "tier", 0) == top]
        return candidates

    def _queue(
        self,
        model: str,
        priority: str,
        candidates: list[RoutableNode],
        waiter: _Waiter | None,
    ) -> _Waiter:
        """A place in the model's queue for a slot on one of ``candidates``
        (``waiter``'s place when it was woken but beaten to the slot)."""
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
        return waiter

    async def _wait(self, model: str, waiter: _Waiter, left: float) -> None:
        """Wait up to ``left`` seconds for ``waiter``'s wake-up (a freed slot)."""
        future = waiter.future
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

    def stats(self) -> dict[str, dict[str, dict[str, Any]]]:
        nodes: dict[str, dict[str, Any]] = {}
        for node_id, b in self.breakers.items():
            nodes[self.names.get(node_id, str(node_id))] = {
                "in_flight": self.in_flight.get(node_id, 0),
                "state": b.state,
                "openings": b.openings,
                "calls": b.calls,
                "errors": b.errors,
            }
        queues: dict[str, dict[str, Any]] = {}
        for model, queue in self._queues.items():
            depth = {"high": 0, "normal": 0, "low": 0}
            for w in queue:
                depth[("high", "normal", "low")[w.rank]] += 1
            queues[model] = depth
        return {"nodes": nodes, "queues": queues}

    # --- internals --------------------------------------------------------

    def _full(self, node: RoutableNode) -> bool:
        limit = node.max_concurrency
        return bool(limit) and self.in_flight.get(node.node_id, 0) >= limit

    def _choose(
        self, model: str, policy: str, candidates: list[RoutableNode], key: _LazyKey | bytes
    ) -> RoutableNode | None:
        free = [n for n in candidates if not self._full(n)]
        if not free:
            return None
        if len(free) == 1:
            return free[0]
        if policy == "round_robin":
            return self._round_robin(model, free)
        if policy == "least_outstanding":
            return self._least(free)
        hashed = key.value() if isinstance(key, _LazyKey) else key
        in_flight = self.in_flight
        total = sum(in_flight.get(n.node_id, 0) for n in candidates) + 1
        weights = sum(max(n.weight, 1) for n in candidates)
        ranked = sorted(
            candidates, key=lambda n: rendezvous_score(hashed, n.node_id, n.weight), reverse=True
        )
        for node in ranked:
            if self._full(node):
                continue
            share = self.config.load_factor * total * max(node.weight, 1) / weights
            if in_flight.get(node.node_id, 0) + 1 <= math.ceil(share):
                return node
        return self._least(free)

    def _least(self, nodes: list[RoutableNode]) -> RoutableNode:
        in_flight = self.in_flight
        return min(
            nodes,
            key=lambda n: (
                in_flight.get(n.node_id, 0) / max(n.weight, 1),
                n.waiting or 0,
                n.node_id,
            ),
        )

    def _round_robin(self, model: str, nodes: list[RoutableNode]) -> RoutableNode:
        current = self._rr.setdefault(model, {})
        total = 0
        best = nodes[0]
        for n in nodes:
            w = max(n.weight, 1)
            total += w
            current[n.node_id] = current.get(n.node_id, 0) + w
            if n is best or current[n.node_id] > current[best.node_id]:
                best = n
        current[best.node_id] -= total
        return best

    def _take(self, node: RoutableNode, queued: float, policy: str) -> Lease:
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
