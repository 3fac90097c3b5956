"""The Redis limits store, shared by every gateway process: one Lua script per
operation (EVALSHA), so an admission is atomic across all its buckets and
rules, and two processes can never both take the last of a cap.

Keys (standalone Redis: scripts touch the ``:z`` sets and the buckets named
in a reservation record, which they derive rather than declare):

- cap bucket ``<key>`` HASH ``u`` used, ``r`` reserved total; ``<key>:z``
  ZSET of the live reservations, member ``"<amount>:<reservation id>"``,
  score the hold deadline (ms). Every admit on the bucket first purges the
  members past their deadline (a crashed process cannot hold a cap). Both
  keys carry the bucket's TTL (none for lifetime and prepaid).
- rate rule ``<key>`` HASH ``Q``/``T`` requests/tokens in the window, ``o``
  oldest kept slot, ``n`` newest slot, ``q<slot>``/``t<slot>`` per slot;
  PEXPIRE one window plus two slots after each admit.
- reservation ``lim:res:<id>`` STRING (JSON: member, amount, tokens, slot,
  cap keys, rule keys), PX hold + 5 min, so a late settle still charges.

Time is Redis's own clock (``TIME``), one clock for every process, unless the
store is given a ``clock`` (tests)."""

from __future__ import annotations

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
  local k = KEYS[1 + i]
  local v = redis.call('HMGET', k, 'u', 'r')
  if not v[1] then
    missing[#missing + 1] = k
  else
    local r = tonumber(v[2]) or 0
    local z = k .. ':z'
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
  local k = KEYS[1 + nc + j]
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
  local k = KEYS[1 + nc + j]
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
  local k = KEYS[1 + i]
  redis.call('HINCRBY', k, 'r', ARGV[2])
  redis.call('ZADD', k .. ':z', I(deadline), member)
  local pt = redis.call('PTTL', k)
  if pt > 0 then redis.call('PEXPIRE', k .. ':z', pt) end
  ckeys[i] = k
end
for j = 1, nr do
  local k = KEYS[1 + nc + j]
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
for _, k in ipairs(rec.c) do
  if redis.call('ZREM', k .. ':z', rec.m) == 1 and rec.a ~= '0' then
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
for _, k in ipairs(rec.q) do
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
local gone = redis.call('ZRANGEBYSCORE', k .. ':z', '-inf', now)
local r = tonumber(v[2]) or 0
if #gone > 0 then
  local freed = 0
  for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, '^(%-?%d+):')) end
  redis.call('ZREMRANGEBYSCORE', k .. ':z', '-inf', now)
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


class RedisLimitStore:
    """``client`` is a ``redis.asyncio.Redis`` or a ``limits.resp.RespClient``
    (anything with ``register_script(lua)`` -> ``await script(keys=, args=)``
    and ``aclose()``); ``close`` closes it."""

    def __init__(
        self,
        client,
        *,
        window_seconds: float = 60.0,
        slots: int = 60,
        clock: Callable[[], float] | None = None,
    ):
        self.window_ms = round(window_seconds * 1000)
        if slots < 1 or self.window_ms % slots:
            raise ValueError("the window must split into whole milliseconds per slot")
        self.slots = slots
        self.slot_ms = self.window_ms // slots
        self.client = client
        self._clock = clock
        self._admit = client.register_script(ADMIT)
        self._finish = client.register_script(FINISH)
        self._purge = client.register_script(PURGE)
        self._seed = client.register_script(SEED)
        self._credit = client.register_script(CREDIT)

    @classmethod
    def from_url(
        cls, url: str, *, client: str = "resp", timeout: float | None = None, **kwargs
    ) -> RedisLimitStore:
        """A store with its own connection. ``client="resp"`` (the default for
        ``redis://``): one pipelined connection (``limits.resp``), several times
        cheaper per call than redis-py; ``"redis-py"``: redis.asyncio with a
        blocking pool of 64 (TLS, sockets), where callers wait up to 5 s for a
        free connection rather than fail. ``timeout`` (seconds): the deadline of
        each command (and of the connect, and of the wait for a pooled
        connection); past it the call raises (``resp.RedisTimeout``, redis-py's
        ``TimeoutError``), which the gateway answers with 503 ``limits_unavailable``."""
        if client == "resp" and url.startswith("redis://"):
            from gateway_bridge.limits.resp import RespClient

            return cls(RespClient.from_url(url, timeout=timeout), **kwargs)
        import redis.asyncio as aioredis

        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=64,
            timeout=5 if timeout is None else timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        return cls(aioredis.Redis(connection_pool=pool), **kwargs)

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
        keys = [RECORD_PREFIX + reservation_id, *(c.key for c in caps), *(r.key for r in rates)]
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
        out = await self._admit(keys=keys, args=args)
        status = int(out[0])
        if status == 2:
            raise BucketsMissing([_text(k) for k in out[1:]])
        if status == 3:
            raise DuplicateReservation(reservation_id)
        kind, index, a, b, now_ms = (int(x) for x in out[1:6])
        flat = [int(x) for x in out[6:]]
        states = [RuleState(*flat[i : i + 3]) for i in range(0, len(flat), 3)]
        if status == 1:
            return Admission(reservation_id, rate_headers(rates, states))
        if kind == REFUSED_CAP:
            cap = caps[index - 1]
            headers = rate_headers(rates, states)
            raise cap_refusal(cap, a, b, amount, now_ms / 1000, headers)
        dim = "requests" if kind == 2 else "tokens"
        headers = rate_headers(rates, states, forced=(dim, index - 1))
        rule = rates[index - 1]
        raise rate_refusal(kind, rule, states[index - 1], tokens, a, self.window_ms, headers)

    async def settle(self, reservation_id: str, cost: int, tokens: int) -> None:
        if cost < 0 or tokens < 0:
            raise ValueError("cost and tokens cannot be negative")
        await self._finish(
            keys=[RECORD_PREFIX + reservation_id],
            args=[1, int(cost), int(tokens), self._now_arg(), self.slots, self.slot_ms],
        )

    async def release(self, reservation_id: str) -> None:
        await self._finish(keys=[RECORD_PREFIX + reservation_id], args=[0, 0, 0, "", 0, 1])

    async def seed(self, key: str, used: int, ttl_seconds: int | None) -> bool:
        return bool(await self._seed(keys=[key], args=[int(used), int(ttl_seconds or 0)]))

    async def credit(self, key: str, amount: int) -> None:
        # An absent bucket is seeded from the database later, credit included.
        await self._credit(keys=[key], args=[-int(amount)])

    async def snapshot(self, key: str) -> tuple[int, int]:
        used, reserved, _ = await self._purge(keys=[key], args=[self._now_arg()])
        return int(used), int(reserved)

    async def peek(self, key: str) -> tuple[int, int] | None:
        used, reserved, present = await self._purge(keys=[key], args=[self._now_arg()])
        return (int(used), int(reserved)) if int(present) else None

    async def close(self) -> None:
        await self.client.aclose()
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:
            await pool.disconnect()
