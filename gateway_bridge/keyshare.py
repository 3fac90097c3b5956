"""A vendor credential's limits and rests, shared by every gateway process
through Redis (``GATEWAY_LIMITS_STORE=redis``).

``keypool.KeyPool`` keeps each process's own view of a pooled credential: its
in-flight calls, its requests and tokens of the last minute, its breaker, its
cooling. With N processes, that view alone would let each of them use the
whole of a vendor key's RPM, TPM and concurrency: N times what the vendor
allows, and the vendor answers 429. With the Redis limits store, each try on
a pooled credential first asks Redis, in one script on the credential's own
hash slot (``{k:<id>}``):

* **rests** — a vendor's 429 (for its ``retry-after``) and an opening of the
  credential's circuit (for the breaker's open time) rest it in every
  process, not only in the one that saw them;
* **concurrency** — a lease per try, held until the try ends or, for a
  process killed meanwhile, until the lease's deadline;
* **RPM** — the tries that went out in the last minute, a sliding window
  (a sorted set of their start times);
* **TPM** — their estimated tokens, by second of the last minute.

A refusal gives how long to wait: the forward stage rests the credential in
this process for that long (so the next calls skip it without asking Redis)
and tries the pool's next credential, another channel or a fallback model,
and when none is left answers 429 with that ``retry-after``. The clock is
Redis's own (``TIME``), so processes on hosts whose clocks differ count in
one window.

A self-hosted node's own token (no credential id) never reaches Redis. When
Redis fails, the call is not held up: this process's own view decides alone
(logged once a minute), as without the shared store.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inference_node.facade import RoutableCredential

logger = logging.getLogger(__name__)

WINDOW_MS = 60_000
# How long a concurrency lease outlives its try's deadline (a killed process's).
LEASE_GRACE_MS = 5_000
# A concurrency refusal's wait: a lease frees when a try ends, soon.
BUSY_WAIT_MS = 250

# KEYS: rest, requests (sorted set: start ms), tokens (hash: second -> tokens),
# leases (sorted set: deadline ms). ARGV: rpm, tpm, concurrency, tokens, lease
# id, lease ms (0 or less: none held). Returns 0 (admitted) or the ms to wait.
ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rest = redis.call('PTTL', KEYS[1])
if rest > 0 then return rest end
local rpm, tpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, lease, lease_ms = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZCARD', KEYS[4]) >= conc then return tonumber(ARGV[7]) end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return math.max(1, tonumber(oldest[2]) + 60000 - now)
  end
end
local second = math.floor(now / 1000)
if tpm > 0 then
  local from = second - 59
  local slots = redis.call('HGETALL', KEYS[3])
  local sum, oldest = 0, nil
  for i = 1, #slots, 2 do
    local s = tonumber(slots[i])
    if s < from then
      redis.call('HDEL', KEYS[3], slots[i])
    else
      sum = sum + tonumber(slots[i + 1])
      if oldest == nil or s < oldest then oldest = s end
    end
  end
  if sum + tokens > tpm then
    if oldest == nil then return 60000 end
    return math.max(1, (oldest + 60) * 1000 - now)
  end
end
if rpm > 0 then
  redis.call('ZADD', KEYS[2], now, lease)
  redis.call('PEXPIRE', KEYS[2], 61000)
end
if tpm > 0 then
  redis.call('HINCRBY', KEYS[3], second, tokens)
  redis.call('PEXPIRE', KEYS[3], 61000)
end
if conc > 0 then
  redis.call('ZADD', KEYS[4], now + lease_ms, lease)
  if redis.call('PTTL', KEYS[4]) < lease_ms then redis.call('PEXPIRE', KEYS[4], lease_ms) end
end
return 0
"""

# KEYS: leases. ARGV: lease id.
RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
return 0
"""

# KEYS: rest. ARGV: ms. A longer rest already set is kept.
REST = """
local ms = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < ms then redis.call('SET', KEYS[1], '1', 'PX', ms) end
return 0
"""


def _keys(credential_id: int) -> list[str]:
    tag = f"{{k:{credential_id}}}"
    return [f"{tag}rest", f"{tag}rpm", f"{tag}tpm", f"{tag}conc"]


class SharedCredentials:
    """The credentials' shared limits and rests on ``client`` (anything with
    ``register_script``, as ``limits.RedisLimitStore`` takes: the pipelined
    clients of ``limits.resp`` / ``resp_ha`` or redis-py's)."""

    def __init__(self, client: Any, *, lease_seconds: float) -> None:
        self.client = client
        self.lease_ms = int(lease_seconds * 1000) + LEASE_GRACE_MS
        self._acquire = client.register_script(ACQUIRE)
        self._release = client.register_script(RELEASE)
        self._rest = client.register_script(REST)
        self._failed_at = 0.0  # when a failure was last logged
        self.refusals = 0
        self.failures = 0

    async def acquire(self, cred: RoutableCredential, tokens: int, lease: str) -> float:
        """0.0 when a try with ``cred`` (about ``tokens`` tokens, lease id
        ``lease``) may go out now, and it is counted; else the seconds to wait."""
        if cred.credential_id is None:
            return 0.0
        args = [
            cred.rpm_limit or 0,
            cred.tpm_limit or 0,
            cred.max_concurrency or 0,
            max(0, int(tokens)),
            lease,
            self.lease_ms if cred.max_concurrency else 0,
            BUSY_WAIT_MS,
        ]
        try:
            wait_ms = await self._acquire(keys=_keys(cred.credential_id), args=args)
        except Exception:
            self._failed("acquire")
            return 0.0
        if not wait_ms:
            return 0.0
        self.refusals += 1
        return int(wait_ms) / 1000.0

    async def release(self, cred: RoutableCredential, lease: str) -> None:
        """The try with lease ``lease`` ended: its concurrency slot is free."""
        if cred.credential_id is None or not cred.max_concurrency:
            return
        try:
            await self._release(keys=_keys(cred.credential_id)[3:], args=[lease])
        except Exception:
            self._failed("release")  # the lease ends at its deadline

    async def rest(self, cred: RoutableCredential, seconds: float) -> None:
        """Rest ``cred`` in every process for ``seconds`` (a vendor's 429, an
        opened circuit)."""
        if cred.credential_id is None or seconds <= 0:
            return
        try:
            await self._rest(keys=_keys(cred.credential_id)[:1], args=[int(seconds * 1000)])
        except Exception:
            self._failed("rest")

    def _failed(self, what: str) -> None:
        self.failures += 1
        now = time.monotonic()
        if now - self._failed_at >= 60:
            self._failed_at = now
            logger.warning(
                "gateway: the shared credential limits failed (%s); this process's own "
                "view decides meanwhile",
                what,
                exc_info=True,
            )
