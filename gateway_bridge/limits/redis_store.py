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

from gateway_bridge.limits.base import (
    REFUSED_CAP,
    Admission,
    BucketsMissing,
    CapBucket,
    DuplicateReservation,
    RateRule,
    RuleState,
    cap_refusal,
    check_args,
    rate_headers,
    rate_refusal,
)
from gateway_bridge.limits.memory import RECORD_GRACE_MS

logger = logging.getLogger(__name__)

RECORD_PREFIX = "lim:res:"

_NOW = """
local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function I(x) return string.format('%d', x) end
"""

ADMIT = (
    _NOW
    + r"""
local now = now_ms(ARGV[5])
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 1 then return {3} end
local rid, amount, tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local hold, nc, nr = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
local N, S, grace = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local cur = math.floor(now / S)

-- caps: purge reservations past their deadline, read used and reserved
local used, res, missing = {}, {}, {}
for i = 1, nc do
  local k, z = KEYS[2 * i], KEYS[2 * i + 1]
  local v = redis.call('HMGET', k, 'u', 'r')
  if not v[1] then
    missing[#missing + 1] = k
  else
    local r = tonumber(v[2]) or 0
    local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
    if #gone > 0 then
      local freed = 0
      for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, '^(%-?%d+):')) end
      redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
      if freed ~= 0 then r = redis.call('HINCRBY', k, 'r', I(-freed)) end
    end
    used[i], res[i] = tonumber(v[1]), r
  end
end
if #missing > 0 then return {2, unpack(missing)} end

-- rules: drop the slots that left the window
local Q, T, O, NW = {}, {}, {}, {}
for j = 1, nr do
  local k = KEYS[1 + 2 * nc + j]
  local h = redis.call('HMGET', k, 'Q', 'T', 'o', 'n')
  local q, t, o, n = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]), tonumber(h[4])
  local cutoff = cur - N
  if o and n < cutoff then
    redis.call('DEL', k); q, t, o, n = 0, 0, nil, nil
  elseif o and o < cutoff then
    local f = {}
    for s = o, cutoff - 1 do f[#f + 1] = 'q' .. I(s); f[#f + 1] = 't' .. I(s) end
    local vals = redis.call('HMGET', k, unpack(f))
    for x = 1, #vals, 2 do
      q = q - (tonumber(vals[x]) or 0); t = t - (tonumber(vals[x + 1]) or 0)
    end
    redis.call('HDEL', k, unpack(f))
    o = cutoff
    redis.call('HSET', k, 'Q', I(q), 'T', I(t), 'o', I(o))
  end
  Q[j], T[j], O[j], NW[j] = q, t, o, n
end

local function states(out)
  for j = 1, nr do
    local reset = 0
    if NW[j] and (Q[j] > 0 or T[j] > 0) then reset = (NW[j] + N + 1) * S - now end
    out[#out + 1] = Q[j]; out[#out + 1] = T[j]; out[#out + 1] = reset
  end
  return out
end

local function wait(k, j, field, total, need, limit)
  if not O[j] then return N * S end
  local freed = 0
  for s = O[j], NW[j] do
    freed = freed + (tonumber(redis.call('HGET', k, field .. I(s))) or 0)
    if total - freed + need <= limit then return (s + N + 1) * S - now end
  end
  return (NW[j] + N + 1) * S - now
end

for i = 1, nc do
  if used[i] + res[i] + amount > tonumber(ARGV[10 + i]) then
    return states({0, 1, i, used[i], res[i], now})
  end
end
for j = 1, nr do
  local k = KEYS[1 + 2 * nc + j]
  local rpm, tpm = tonumber(ARGV[10 + nc + 2 * j - 1]), tonumber(ARGV[10 + nc + 2 * j])
  if rpm >= 0 and Q[j] + 1 > rpm then
    return states({0, 2, j, wait(k, j, 'q', Q[j], 1, rpm), 0, now})
  elseif tpm >= 0 and tokens > tpm then
    return states({0, 4, j, 0, 0, now})
  elseif tpm >= 0 and T[j] + tokens > tpm then
    return states({0, 3, j, wait(k, j, 't', T[j], tokens, tpm), 0, now})
  end
end

-- admitted: reserve on every bucket, count on every rule, keep the record
local deadline = now + hold
local member = ARGV[2] .. ':' .. rid
local ckeys, rkeys = {}, {}
for i = 1, nc do
  local k, z = KEYS[2 * i], KEYS[2 * i + 1]
  redis.call('HINCRBY', k, 'r', ARGV[2])
  redis.call('ZADD', z, I(deadline), member)
  local pt = redis.call('PTTL', k)
  if pt > 0 then redis.call('PEXPIRE', z, pt) end
  ckeys[i] = k
end
for j = 1, nr do
  local k = KEYS[1 + 2 * nc + j]
  if not O[j] then redis.call('HSET', k, 'o', I(cur)); O[j] = cur end
  redis.call('HINCRBY', k, 'q' .. I(cur), 1)
  redis.call('HINCRBY', k, 't' .. I(cur), ARGV[3])
  Q[j] = redis.call('HINCRBY', k, 'Q', 1)
  T[j] = redis.call('HINCRBY', k, 'T', ARGV[3])
  redis.call('HSET', k, 'n', I(cur))
  NW[j] = cur
  redis.call('PEXPIRE', k, I((N + 2) * S))
  rkeys[j] = k
end
redis.call('SET', rec, cjson.encode({m = member, a = ARGV[2], t = ARGV[3], s = cur,
  c = ckeys, q = rkeys}), 'PX', I(hold + grace))
return states({1, 0, 0, 0, 0, now})
"""
)

FINISH = (
    _NOW
    + r"""
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
redis.call('DEL', KEYS[1])
local rec = cjson.decode(raw)
local settle = ARGV[1] == '1'
local nc = tonumber(ARGV[7])
for i = 1, nc do
  local k, z = KEYS[2 * i], KEYS[2 * i + 1]
  if redis.call('ZREM', z, rec.m) == 1 and rec.a ~= '0' then
    redis.call('HINCRBY', k, 'r', '-' .. rec.a)
  end
  if settle and ARGV[2] ~= '0' and redis.call('EXISTS', k) == 1 then
    redis.call('HINCRBY', k, 'u', ARGV[2])
  end
end
if not settle then return 1 end
local delta = tonumber(ARGV[3]) - tonumber(rec.t)
if delta == 0 then return 1 end
local now = now_ms(ARGV[4])
local N, S = tonumber(ARGV[5]), tonumber(ARGV[6])
local cutoff = math.floor(now / S) - N
if rec.s < cutoff then return 1 end
for j = 2 + 2 * nc, #KEYS do
  local k = KEYS[j]
  local f = 't' .. I(rec.s)
  if redis.call('HEXISTS', k, f) == 1 then
    redis.call('HINCRBY', k, f, I(delta))
    redis.call('HINCRBY', k, 'T', I(delta))
  end
end
return 1
"""
)

PURGE = (
    _NOW
    + r"""
local now = now_ms(ARGV[1])
local k = KEYS[1]
local v = redis.call('HMGET', k, 'u', 'r')
if not v[1] then return {0, 0, 0} end
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
local r = tonumber(v[2]) or 0
if #gone > 0 then
  local freed = 0
  for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, '^(%-?%d+):')) end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if freed ~= 0 then r = redis.call('HINCRBY', k, 'r', I(-freed)) end
end
return {tonumber(v[1]), r, 1}
"""
)

SEED = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'r', 0)
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
"""

CREDIT = r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'u', ARGV[1])
return 1
"""


def _text(value) -> str:
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


class RedisLimitStore:
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
        client,
        *,
        window_seconds: float = 60.0,
        slots: int = 60,
        clock: Callable[[], float] | None = None,
        replicas: int = 0,
    ):
        self.window_ms = round(window_seconds * 1000)
        if slots < 1 or self.window_ms % slots:
            raise ValueError("the window must split into whole milliseconds per slot")
        self.slots = slots
        self.slot_ms = self.window_ms // slots
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
        **kwargs,
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
        from console.kernel import redis_url

        target = redis_url.parse(url)
        if client == "resp" and target.highly_available:
            from gateway_bridge.limits import resp

            auth = {"username": target.username, "password": target.password}
            if target.kind == redis_url.SENTINEL:
                conn = resp.SentinelClient(
                    target.hosts, target.service, db=target.db, timeout=timeout, **auth
                )
            else:
                conn = resp.ClusterClient(target.hosts, timeout=timeout, **auth)
            return cls(conn, replicas=1 if replicas is None else replicas, **kwargs)
        if client == "resp" and url.startswith("redis://"):
            from gateway_bridge.limits.resp import RespClient

            conn = RespClient.from_url(url, timeout=timeout)
            return cls(conn, **kwargs)  # one Redis: no replica to wait for
        if target.highly_available:
            conn = redis_url.async_client(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
            return cls(conn, **kwargs)
        import redis.asyncio as aioredis

        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=64,
            timeout=5 if timeout is None else timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        return cls(aioredis.Redis(connection_pool=pool), **kwargs)

    async def _run(self, script, keys: list[str], args: list, durable: bool = False):
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
        bucket_keys = []
        for c in caps:
            bucket_keys += [c.key, z_key(c.key)]
        bucket_keys += [r.key for r in rates]
        tags = {hash_tag(k) for k in bucket_keys}
        if len(tags) > 1:
            raise MixedTags(f"one admission's keys span hash tags {sorted(tags)}")
        record = (tags.pop() if tags else "") + RECORD_PREFIX + reservation_id
        keys = [record, *bucket_keys]
        args: list = [
            reservation_id,
            int(amount),
            int(tokens),
            max(1, round(hold_seconds * 1000)),
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
        if kind == REFUSED_CAP:
            cap = caps[index - 1]
            headers = rate_headers(rates, states)
            raise cap_refusal(cap, a, b, amount, now_ms / 1000, headers)
        dim = "requests" if kind == 2 else "tokens"
        headers = rate_headers(rates, states, forced=(dim, index - 1))
        rule = rates[index - 1]
        raise rate_refusal(kind, rule, states[index - 1], tokens, a, self.window_ms, headers)

    def _hold(self, rid: str, record: str, keys: list[str], nc: int, hold_s: float) -> None:
        held = self._held
        now = time.monotonic()
        held[rid] = (record, keys, nc, now + hold_s + RECORD_GRACE_MS / 1000)
        if len(held) > self._sweep_at:  # calls never settled: their records expired too
            for k in [k for k, v in held.items() if v[3] < now]:
                del held[k]
            self._sweep_at = 2 * len(held) + 1024

    async def settle(self, reservation_id: str, cost: int, tokens: int) -> None:
        if cost < 0 or tokens < 0:
            raise ValueError("cost and tokens cannot be negative")
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

    async def snapshot(self, key: str) -> tuple[int, int]:
        used, reserved, _ = await self._purge(keys=[key, z_key(key)], args=[self._now_arg()])
        return int(used), int(reserved)

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
