"""The soak's faults, at fixed shares of the run (the timeline in
``tooling.soak.command``'s docstring), and the revocation it measures: each
fault noted in ``out["timeline"]`` with the time it happened, what it found
in ``out``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from accounts.facade import api_key_revoke
from tooling.soak import partitions as call_partitions
from tooling.soak.cluster import Cluster, restart_postgres
from tooling.soak.scenario import KeySpec, Scenario
from tooling.soak.traffic import Traffic

PROBE_MODEL = "soak-probe-no-such-model"  # answered without a node: a fast probe


def db_call(fn, *args, **kwargs):
    """Run ORM work in a worker thread on a fresh connection (PostgreSQL may
    have been restarted under a cached one)."""

    def run():
        connections.close_all()
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return asyncio.to_thread(run)


@dataclass
class Faults:
    cluster: Cluster
    traffic: Traffic
    scenario: Scenario
    seconds: float
    pg: tuple[str, str] | None  # the local PostgreSQL cluster to restart, if any
    out: dict[str, Any]
    t0: float
    log: Callable[[str], None]
    partition_plan: dict

    async def until(self, share: float) -> None:
        """Sleep until this share of the run."""
        await asyncio.sleep(max(0.0, self.t0 + share * self.seconds - time.time()))

    def note(self, event: str, **data: Any) -> None:
        self.out["timeline"].append({"t": round(time.time() - self.t0, 1), "event": event, **data})
        self.log(event)

    async def run(self) -> None:
        """Every fault in turn, each at its share of the run."""
        await self.failing_nodes()
        await self.broker_outage()
        if self.cluster.redis is not None:
            await self.redis_failover()
        await self.partition_maintenance()
        await self.worker_kill()
        await self.postgres_restart()
        await self.gateway_kill()
        await self.until(0.75)
        await revoke(self.cluster, self.traffic, self.scenario, self.out)
        self.note("key revoked", seconds=self.out.get("revocation_seconds"))
        await self.burst()

    async def failing_nodes(self) -> None:
        cluster = self.cluster
        await self.until(0.10)
        await asyncio.to_thread(cluster.node_faults, 1, fault_500_rate=1.0)
        self.note("node-2 answers 500")
        await self.until(0.20)
        await asyncio.to_thread(cluster.kill_node, 2)
        self.note("node-3 killed (SIGKILL)")
        await self.until(0.30)
        await asyncio.to_thread(cluster.restart_node, 2)
        self.note("node-3 restarted")
        await self.until(0.35)
        openings = await asyncio.to_thread(cluster.circuit_openings)
        self.out["circuit_openings_by_gateway"] = openings
        await asyncio.to_thread(cluster.node_faults, 1, fault_500_rate=0.0)
        self.note("node-2 healthy again", circuit_openings=openings)

    async def broker_outage(self) -> None:
        outage = 30.0 if self.seconds >= 120 else 15.0
        await self.until(0.40)
        await asyncio.to_thread(self.cluster.stop_broker)
        self.note(f"broker stopped for {outage:.0f} s")
        await asyncio.sleep(min(5.0, outage / 2))
        spooled = await asyncio.to_thread(self.cluster.spooled_batches)
        self.out["spooled_batches_during_outage"] = spooled
        await asyncio.sleep(max(0.0, outage - min(5.0, outage / 2)))
        await asyncio.to_thread(self.cluster.start_broker)
        self.note("broker started", spooled=spooled)

    async def redis_failover(self) -> None:
        await self.until(0.45)
        killed = time.time()
        self.note("Redis primary killed (SIGKILL)")
        failover = await asyncio.to_thread(self.cluster.kill_redis_primary)
        self.out["redis_failover"] = failover
        # Calls admitted against the store while it fails over are refused
        # (503 limits_unavailable, recorded): refused, not lost, not errors.
        # (From a second before the kill: a call under way then meets it.)
        self.out["excused"] = [[killed - 1.0, time.time() + 5.0, "limits_unavailable"]]
        self.note("Redis failed over; the old primary is a replica", **failover)

    async def partition_maintenance(self) -> None:
        await self.until(0.50)
        try:
            done = await db_call(call_partitions.maintain, self.partition_plan)
        except Exception as exc:  # the check reports it; the run goes on
            done = {"error": repr(exc)}
        self.out["partitions"] = done
        self.note("call partitions maintained under load", **done)

    async def worker_kill(self) -> None:
        await self.until(0.55)
        await asyncio.to_thread(self.cluster.kill_worker, 0)
        self.note("worker-1 killed (SIGKILL)")
        await asyncio.sleep(2.0)
        await asyncio.to_thread(self.cluster.restart_worker, 0)
        self.note("worker-1 restarted")

    async def postgres_restart(self) -> None:
        await self.until(0.60)
        if self.pg is None:
            self.out["postgres_restart"] = "skipped (not a local Debian cluster, or disabled)"
            self.note("PostgreSQL restart skipped")
        else:
            took = await asyncio.to_thread(restart_postgres, self.pg)
            self.out["postgres_restart_seconds"] = round(took, 2)
            self.note(f"PostgreSQL restarted in {took:.1f} s")

    async def gateway_kill(self) -> None:
        # After the PostgreSQL restart, not during it: a restarted gateway knows no
        # key yet, and while the database is down it could only answer 503.
        await self.until(0.65)
        last = len(self.cluster.gateways) - 1
        await asyncio.to_thread(self.cluster.kill_gateway, last)
        self.out["gateway_killed"] = {"gateway": last, "at": time.time()}  # once it is dead
        self.note(f"gateway-{last + 1} killed (SIGKILL)")
        await asyncio.sleep(2.0)
        await asyncio.to_thread(self.cluster.restart_gateway, last)
        self.note(f"gateway-{last + 1} restarted")

    async def burst(self) -> None:
        await self.until(0.85)
        key = self.scenario.keys["c-burst"]
        results = await self.traffic.burst(key, 100)
        self.note(
            "burst against a nearly exhausted cap",
            admitted=sum(1 for r in results if r.status == 200),
            refused=sum(1 for r in results if r.status == 429),
        )


async def revoke(cluster: Cluster, traffic: Traffic, scenario: Scenario, out: dict) -> None:
    """Revoke a key that is in use, then measure, per gateway process, when
    it heard the change (its own clock, from /metrics: what the check
    judges) and when a client first saw a refusal (an upper bound that
    also holds the queueing of a loaded machine)."""

    key = scenario.keys["a-revoked"]
    probe = KeySpec(key.label, key.org, key.raw, key.key_id, model=PROBE_MODEL)
    n = len(traffic.gateway_urls)
    before = await asyncio.to_thread(lambda: [cluster.key_invalidation(i) for i in range(n)])
    committed: list[float] = []

    def revoke_now() -> None:
        with transaction.atomic():
            # Registered first, so it runs first after the commit: the instant
            # the revocation is the truth, before anyone has been told.
            transaction.on_commit(lambda: committed.append(time.time()))
            api_key_revoke(actor=scenario.actors["a"], key_id=key.key_id)

    called = time.time()
    await db_call(revoke_now)
    revoked_at = committed[0]
    out["revoked_at"] = revoked_at
    out["revoke_commit_seconds"] = round(revoked_at - called, 3)

    async def refused(gw: int) -> float | None:
        while time.time() - revoked_at < 15:
            r = await traffic.call(probe, "openai", False, gateway=gw)
            if r.status == 401:
                return round(max(0.0, r.t1 - revoked_at), 3)
            await asyncio.sleep(0.01)
        return None

    async def heard(gw: int) -> float | None:
        while time.time() - revoked_at < 15:
            count, ts = await asyncio.to_thread(cluster.key_invalidation, gw)
            if count > before[gw][0]:
                return round(max(0.0, ts - revoked_at), 3)
            await asyncio.sleep(0.05)
        return None

    seen = await asyncio.gather(*(heard(gw) for gw in range(n)))
    first = await asyncio.gather(*(refused(gw) for gw in range(n)))
    names = [f"gateway-{i + 1}" for i in range(n)]
    out["revocation_seconds"] = {
        name: (s if s is not None else 999.0) for name, s in zip(names, seen, strict=True)
    }
    out["first_refusal_seconds"] = dict(zip(names, first, strict=True))
