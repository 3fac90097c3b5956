"""Spend caps and the prepaid balance by reservation, and RPM/TPM: one
interface (``LimitStore``), two stores (``MemoryLimitStore`` in process,
``RedisLimitStore`` shared), ``plan`` to know a key's buckets and rules,
``rebuild.seed_values`` to seed buckets from the database, and ``Limits``
tying them together for the hot path.

    limits = Limits(store)
    admission = await limits.admit(auth, now, request_id, worst_case, tokens,
                                   hold_seconds=total_timeout + 30)   # GatewayError on refusal
    ... forward ...
    await limits.store.settle(request_id, actual_cost, actual_tokens)  # or .release(request_id)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from console.kernel import redis_url
from gateway_bridge.config import LimitsConfig
from gateway_bridge.limits.base import (
    Admission,
    BucketsMissing,
    CapBucket,
    DuplicateReservation,
    RateRule,
    format_duration,
)
from gateway_bridge.limits.memory import MemoryLimitStore
from gateway_bridge.limits.plan import org_tag, plan
from gateway_bridge.limits.redis_store import RedisLimitStore
from gateway_bridge.limits.scripts import CREDIT

if TYPE_CHECKING:
    from accounts.facade import AuthenticatedKey

T = TypeVar("T")
# ``seed_values(auth, now, keys)``: ``{bucket key: used}`` from the database.
Seeder = Callable[["AuthenticatedKey", datetime, Collection[str]], dict[str, int]]


def balance_key(organization_id: int) -> str:
    return f"{org_tag(organization_id)}bal:o:{organization_id}"


def build_store(config: LimitsConfig) -> LimitStore:
    """The store ``config`` asks for: Redis (shared by every gateway process)
    or in-process memory."""
    if config.shared:
        return RedisLimitStore.from_url(
            config.redis_url, timeout=config.redis_timeout, replicas=config.redis_replicas
        )
    return MemoryLimitStore()


def credit_balance(organization_id: int, delta: int) -> None:
    """A prepaid balance moved for a reason other than usage (sync; the
    gateway's ``console.kernel.hooks.BALANCE_CHANGED`` receiver, after the ledger
    entry committed). With Redis the shared bucket
    is credited once, here; with the in-process store, every gateway in this
    process credits its own (``apply_local_credit``). A bucket not seeded yet
    is left alone: its seed reads the ledger, this entry included."""
    if not delta:
        return
    config = LimitsConfig.from_settings()
    if config.shared:
        client = redis_url.sync_client(config.redis_url, socket_timeout=2)
        try:
            client.eval(CREDIT, 1, balance_key(organization_id), -int(delta))
        finally:
            client.close()
        return
    # deferred: the stores run without Django (a contender process in the
    # limits tests), and notify reads the apps' models
    from gateway_bridge import notify

    notify.deliver(f"balance:{organization_id}:{int(delta)}")


def apply_local_credit(store: LimitStore, organization_id: int, delta: int) -> None:
    """``balance:`` messages on a gateway with an in-process store."""
    if isinstance(store, MemoryLimitStore):
        task = asyncio.ensure_future(store.credit(balance_key(organization_id), delta))
        _pending.add(task)
        task.add_done_callback(_pending.discard)


_pending: set[asyncio.Future[None]] = set()


__all__ = [
    "Admission",
    "BucketsMissing",
    "CapBucket",
    "DuplicateReservation",
    "LimitStore",
    "Limits",
    "MemoryLimitStore",
    "RateRule",
    "RedisLimitStore",
    "apply_local_credit",
    "balance_key",
    "build_store",
    "credit_balance",
    "format_duration",
    "plan",
]


class LimitStore(Protocol):
    async def admit(
        self,
        reservation_id: str,
        amount: int,
        caps: list[CapBucket],
        rates: list[RateRule],
        tokens: int,
        *,
        hold_seconds: float,
    ) -> Admission: ...
    async def settle(self, reservation_id: str, cost: int, tokens: int) -> None: ...
    async def release(self, reservation_id: str) -> None: ...
    async def seed(self, key: str, used: int, ttl_seconds: int | None) -> bool: ...
    async def credit(self, key: str, amount: int) -> None: ...
    async def snapshot(self, key: str) -> tuple[int, int]: ...
    async def peek(self, key: str) -> tuple[int, int] | None: ...
    async def close(self) -> None: ...


class Limits:
    """``plan`` + ``store.admit``, seeding missing buckets from the database
    (in a thread, once per key at a time in this process) and trying again."""

    def __init__(self, store: LimitStore, *, seeder: Seeder | None = None) -> None:
        self.store = store
        self._seeder = seeder
        self._seeding: dict[str, asyncio.Future[None]] = {}

    async def admit(
        self,
        auth: AuthenticatedKey,
        now: datetime,
        reservation_id: str,
        amount: int,
        tokens: int,
        *,
        hold_seconds: float,
        planned: tuple[list[CapBucket], list[RateRule]] | None = None,
    ) -> Admission:
        caps, rates = planned if planned is not None else plan(auth, now)
        for _ in range(3):
            try:
                return await self.store.admit(
                    reservation_id, amount, caps, rates, tokens, hold_seconds=hold_seconds
                )
            except BucketsMissing as missing:
                await self._seed(auth, now, caps, missing.keys)
        raise RuntimeError("limit buckets vanished while seeding them")  # pragma: no cover

    async def counters(
        self, auth: AuthenticatedKey, now: datetime, caps: list[CapBucket]
    ) -> dict[str, tuple[int, int]]:
        """``{bucket key: (used, reserved)}`` of ``caps`` (from ``plan(auth,
        now)``), as the next admission would see them: a bucket not in the store
        yet is seeded from the database first, exactly as ``admit`` would. For
        reading a key's standing (``limits.standing``), never on the hot path."""
        out: dict[str, tuple[int, int]] = {}
        for _ in range(3):
            missing = []
            for cap in caps:
                if cap.key in out:
                    continue
                got = await self.store.peek(cap.key)
                if got is None:
                    missing.append(cap.key)
                else:
                    out[cap.key] = got
            if not missing:
                return out
            await self._seed(auth, now, caps, missing)
        raise RuntimeError("limit buckets vanished while seeding them")  # pragma: no cover

    async def _seed(
        self, auth: AuthenticatedKey, now: datetime, caps: list[CapBucket], keys: list[str]
    ) -> None:
        mine = [k for k in keys if k not in self._seeding]
        waits = [self._seeding[k] for k in keys if k in self._seeding]
        if mine:
            future = asyncio.get_running_loop().create_future()
            for k in mine:
                self._seeding[k] = future
            try:
                seeder = self._seeder or _database_seeder()
                values = await asyncio.to_thread(in_db_thread, seeder, auth, now, set(mine))
                ttl = {c.key: c.ttl_seconds for c in caps}
                for k in mine:
                    await self.store.seed(k, values.get(k, 0), ttl.get(k))
                future.set_result(None)
            except BaseException as exc:
                future.set_exception(exc)
                raise
            finally:
                for k in mine:
                    self._seeding.pop(k, None)
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved: no "never retrieved" warning
        for w in waits:
            await asyncio.shield(w)


def _database_seeder() -> Seeder:
    """``rebuild.seed_values``: the buckets' values from the database."""
    # deferred: it reads the apps' models; the stores run without Django
    from gateway_bridge.limits.rebuild import seed_values

    return seed_values


def in_db_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a worker thread (run it with ``asyncio.to_thread``),
    giving the thread's database connection back when done (a thread that
    kept one would hold a pooled connection for good)."""
    # deferred: the stores run without Django (a contender process in the limits tests)
    from django.db import connections

    try:
        return fn(*args)
    finally:
        connections.close_all()
