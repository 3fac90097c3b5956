"""The Redis limits store, shared by every gateway process: one Lua script per
operation (EVALSHA), so an admission is atomic across all its buckets and
rules, and two processes can never both take the last of a cap.

Every key a script touches is passed in ``KEYS`` (a cap bucket with its
``:z`` set), and a call's keys share the organization's hash tag
(``{o:<id>}``, ``limits.plan``) and with it a Redis Cluster slot; the
reservation record takes the tag of the keys it reserved on. Keys:

- cap bucket ``<key>`` HASH ``u`` used, ``r`` reserved total; ``<key>:z``
  ZSET of the live reservations, member ``"<amount>:<reservation id>"``,
  score the hold deadline (ms). Every admit on the bucket first purges the
  members past their deadline (a crashed process cannot hold a cap). Both
  keys carry the bucket's TTL (none for lifetime and prepaid).
- rate rule ``<key>`` HASH ``Q``/``T`` requests/tokens in the window, ``o``
  oldest kept slot, ``n`` newest slot, ``q<slot>``/``t<slot>`` per slot;
  PEXPIRE one window plus two slots after each admit.
- reservation ``<tag>lim:res:<id>`` STRING (JSON: member, amount, tokens, slot,
  cap keys, rule keys), PX hold + 5 min, so a late settle still charges.

On Sentinel and Cluster (``replicas`` > 0) an admission and a settle wait
(``WAIT``) for a replica to hold them before they count, so a failover
cannot lose a reservation and let a cap overrun; when none acknowledges, the
call fails (503 ``limits_unavailable``).

Time is Redis's own clock (``TIME``), one clock for every process, unless the
store is given a ``clock`` (tests)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from console.kernel import redis_url
from gateway_bridge.limits import resp, resp_ha
from gateway_bridge.limits.base import (
    RECORD_GRACE_MS,
    Admission,
    BucketsMissing,
    CapBucket,
    DuplicateReservation,
    RateRule,
    RuleState,
    StoreBase,
    check_args,
    check_settle,
    hold_ms,
    rate_headers,
    refusal,
)
from gateway_bridge.limits.scripts import ADMIT, CREDIT, FINISH, PURGE, SEED

logger = logging.getLogger(__name__)

RECORD_PREFIX = "lim:res:"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def hash_tag(key: str) -> str:
    """The ``{...}`` part of ``key`` Redis Cluster hashes (``""`` if none)."""
    start = key.find("{")
    if start < 0:
        return ""
    end = key.find("}", start + 1)
    return key[start : end + 1] if end > start + 1 else ""


def z_key(key: str) -> str:
    """A cap bucket's set of live reservations."""
    return key + ":z"


class MixedTags(ValueError):
    """One admission's keys with different hash tags (organizations): no
    single Redis Cluster slot holds them, so no script can reserve on all of
    them atomically. ``limits.plan`` never builds one."""


class RedisLimitStore(StoreBase):
    """``client`` is a ``redis.asyncio.Redis`` (or RedisCluster) or one of
    ``limits.resp``'s pipelined clients (``RespClient``, ``SentinelClient``,
    ``ClusterClient``): anything with ``register_script(lua)`` -> ``await
    script(keys=, args=)`` and ``aclose()``; ``close`` closes it. ``replicas``
    (pipelined clients only): ``WAIT`` for that many replicas after each
    admission and settle. Settle and release find the keys a reservation
    touched in this process's record of its admissions (the gateway settles
    where it admitted); an id this store never admitted is ignored."""

    def __init__(
        self,
        client: Any,
        *,
        window_seconds: float = 60.0,
        slots: int = 60,
        clock: Callable[[], float] | None = None,
        replicas: int = 0,
    ) -> None:
        super().__init__(window_seconds, slots)
        self.client = client
        self._clock = clock
        # Replicas that must acknowledge an admission or a settle (WAIT) before
        # it counts: 0 on one Redis, 1 by default on Sentinel and Cluster.
        self.replicas = replicas
        # reservation id -> (record key, keys of its buckets and rules, expiry in
        # monotonic seconds): settle and release declare the keys they touch.
        self._held: dict[str, tuple[str, list[str], int, float]] = {}
        self._sweep_at = 1024
        self._admit = client.register_script(ADMIT)
        self._finish = client.register_script(FINISH)
        self._purge = client.register_script(PURGE)
        self._seed = client.register_script(SEED)
        self._credit = client.register_script(CREDIT)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        client: str = "resp",
        timeout: float | None = None,
        replicas: int | None = None,
        **kwargs: Any,
    ) -> RedisLimitStore:
        """A store with its own connection. ``url``: any ``console.kernel.redis_url``
        form. ``client="resp"`` (the default): the pipelined client
        (``limits.resp``), several times cheaper per call than redis-py, on one
        Redis (``redis://``), on the Sentinel-managed primary
        (``SentinelClient``) or on the Cluster's primaries (``ClusterClient``);
        ``"redis-py"`` (and any ``rediss://`` or ``unix://`` URL): redis.asyncio
        with a blocking pool of 64 (TLS, sockets), where callers wait up to 5 s
        for a free connection rather than fail. ``timeout`` (seconds): the
        deadline of each command (and of the connect, and of the wait for a
        pooled connection); past it the call raises (``resp.RedisTimeout``,
        redis-py's ``TimeoutError``), which the gateway answers with 503
        ``limits_unavailable``. ``replicas``: how many replicas must hold an
        admission or settle before it counts on Sentinel and Cluster (default
        1; the pipelined clients only); ignored on one Redis."""
        target = redis_url.parse(url)
        if client == "resp" and target.highly_available:
            auth = {"username": target.username, "password": target.password}
            conn: resp_ha.SentinelClient | resp_ha.ClusterClient
            if target.kind == redis_url.SENTINEL:
                conn = resp_ha.SentinelClient(
                    target.hosts, target.service, db=target.db, timeout=timeout, **auth
                )
            else:
                conn = resp_ha.ClusterClient(target.hosts, timeout=timeout, **auth)
            return cls(conn, replicas=1 if replicas is None else replicas, **kwargs)
        if client == "resp" and url.startswith("redis://"):
            # One Redis: no replica to wait for.
            return cls(resp.RespClient.from_url(url, timeout=timeout), **kwargs)
        if target.highly_available:
            ha = redis_url.async_client(url, socket_timeout=timeout, socket_connect_timeout=timeout)
            return cls(ha, **kwargs)
        # deferred: redis-py is costly to import, and only this client needs it
        import redis.asyncio as aioredis

        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=64,
            timeout=5 if timeout is None else timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        return cls(aioredis.Redis(connection_pool=pool), **kwargs)

    async def _run(
        self, script: Any, keys: list[str], args: list[Any], durable: bool = False
    ) -> Any:
        if durable and self.replicas:
            return await script(keys=keys, args=args, replicas=self.replicas)
        return await script(keys=keys, args=args)

    def _now_arg(self) -> str:
        return str(int(self._clock() * 1000)) if self._clock else ""

    async def admit(
        self,
        reservation_id: str,
        amount: int,
        caps: list[CapBucket],
        rates: list[RateRule],
        tokens: int,
        *,
        hold_seconds: float,
    ) -> Admission:
        check_args(amount, tokens, hold_seconds)
        bucket_keys: list[str] = []
        for c in caps:
            bucket_keys += [c.key, z_key(c.key)]
        bucket_keys += [r.key for r in rates]
        tags = {hash_tag(k) for k in bucket_keys}
        if len(tags) > 1:
            raise MixedTags(f"one admission's keys span hash tags {sorted(tags)}")
        record = (tags.pop() if tags else "") + RECORD_PREFIX + reservation_id
        keys = [record, *bucket_keys]
        args: list[Any] = [
            reservation_id,
            int(amount),
            int(tokens),
            hold_ms(hold_seconds),
            self._now_arg(),
            len(caps),
            len(rates),
            self.slots,
            self.slot_ms,
            RECORD_GRACE_MS,
            *(int(c.limit) for c in caps),
        ]
        for r in rates:
            args += [-1 if r.rpm is None else r.rpm, -1 if r.tpm is None else r.tpm]
        out = await self._run(self._admit, keys, args, durable=True)
        status = int(out[0])
        if status == 2:
            raise BucketsMissing([_text(k) for k in out[1:]])
        if status == 3:
            raise DuplicateReservation(reservation_id)
        kind, index, a, b, now_ms = (int(x) for x in out[1:6])
        flat = [int(x) for x in out[6:]]
        states = [RuleState(*flat[i : i + 3]) for i in range(0, len(flat), 3)]
        if status == 1:
            self._hold(reservation_id, record, bucket_keys, len(caps), hold_seconds)
            return Admission(reservation_id, rate_headers(rates, states))
        raise refusal(
            kind, index - 1, caps, rates, states, amount, tokens, (a, b), now_ms, self.window_ms
        )

    def _hold(self, rid: str, record: str, keys: list[str], nc: int, hold_s: float) -> None:
        held = self._held
        now = time.monotonic()
        held[rid] = (record, keys, nc, now + hold_s + RECORD_GRACE_MS / 1000)
        if len(held) > self._sweep_at:  # calls never settled: their records expired too
            for k in [k for k, v in held.items() if v[3] < now]:
                del held[k]
            self._sweep_at = 2 * len(held) + 1024

    async def settle(self, reservation_id: str, cost: int, tokens: int) -> None:
        check_settle(cost, tokens)
        held = self._held.pop(reservation_id, None)
        if held is None:  # unknown, or settled / released already
            return
        record, keys, nc, _ = held
        args = [1, int(cost), int(tokens), self._now_arg(), self.slots, self.slot_ms, nc]
        await self._run(self._finish, [record, *keys], args, durable=True)

    async def release(self, reservation_id: str) -> None:
        held = self._held.pop(reservation_id, None)
        if held is None:
            return
        record, keys, nc, _ = held
        await self._run(self._finish, [record, *keys], [0, 0, 0, "", 0, 1, nc])

    async def seed(self, key: str, used: int, ttl_seconds: int | None) -> bool:
        return bool(await self._seed(keys=[key], args=[int(used), int(ttl_seconds or 0)]))

    async def credit(self, key: str, amount: int) -> None:
        # An absent bucket is seeded from the database later, credit included.
        await self._credit(keys=[key], args=[-int(amount)])

    async def peek(self, key: str) -> tuple[int, int] | None:
        used, reserved, present = await self._purge(keys=[key, z_key(key)], args=[self._now_arg()])
        return (int(used), int(reserved)) if int(present) else None

    async def warm(self, *, attempts: int = 10, pause: float = 0.2) -> bool:
        """Connect before the first call needs it (the gateway's start-up): on
        Sentinel that also asks the sentinels for the primary. A fresh process
        under load may miss the per-command deadline a few times, so this tries
        ``attempts`` times; it never raises (the calls answer 503 then, as they
        would anyway). True once Redis answered."""
        ping = getattr(self.client, "execute", None)
        for attempt in range(attempts):
            try:
                if ping is not None:
                    await ping("PING")
                else:
                    await self.client.ping()
                return True
            except Exception as exc:  # reported once, below
                if attempt == attempts - 1:
                    logger.warning("limits store: Redis did not answer at start-up: %s", exc)
                    return False
                await asyncio.sleep(pause)
        return False

    async def close(self) -> None:
        await self.client.aclose()
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:
            await pool.disconnect()
