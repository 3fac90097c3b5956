"""Choosing a credential of a channel's key pool for one call, and what each
answer teaches about it.

A channel (a ``RoutableNode``) carries its pool: the active credentials with
their weight and optional RPM / TPM / concurrency limits. Per process, this
module keeps what the database does not need to know:

* **cooling** — a vendor's 429 cools that credential for its ``retry-after``
  (bounded by ``MAX_COOL_SECONDS``; ``DEFAULT_COOL_SECONDS`` without one), and
  calls go to the pool's other credentials meanwhile;
* **refused** — a 401 / 403 takes the credential out of this process's pool
  at once and reports it (``on_refused``, run off the event loop) so the
  registry disables it with an audit event and every process drops it; it is
  never tried again in a loop;
* **breakers** — a circuit per credential (``breaker.Breaker``, the same rule
  as the channel's), fed by each call's outcome;
* **limits** — in-flight calls per credential and its requests and tokens of
  the last 60 s, checked against the credential's own limits. This view is
  the process's own; with the Redis limits store, ``shared``
  (``gateway_bridge.keyshare``) counts every process's tries against the
  same limits and shares rests (a 429's cooling, an opened circuit), so N
  processes together keep to one vendor key's limits.

``pick`` chooses among the usable credentials by weight (a seeded random
draw, so a pool of equal weights spreads calls evenly). ``usable`` tells the
router whether a channel has any credential left, so a channel whose keys
are all cooling or refused is skipped and the next channel, tier or fallback
model takes the call: the router's prefix affinity only ranks channels that
can take it, so it never blocks failover.

A node without a pool (a self-hosted server: its one entry is its own token)
costs nothing here: it is always usable and never cooled (a 429 from it
feeds its breaker, as before).
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway_bridge.breaker import Breaker, Outcome, RouterConfig

if TYPE_CHECKING:
    from gateway_bridge.keyshare import SharedCredentials
    from inference_node.facade import RoutableCredential, RoutableNode

logger = logging.getLogger(__name__)

DEFAULT_COOL_SECONDS = 5.0
MAX_COOL_SECONDS = 600.0
WINDOW_SECONDS = 60.0


def retry_after_seconds(headers: dict[str, str]) -> float:
    """The vendor's ``retry-after`` (seconds; an HTTP date is not worth a
    parser here) or Anthropic's/OpenAI's reset headers, bounded."""
    for name in ("retry-after", "retry-after-ms"):
        value = headers.get(name)
        if not value:
            continue
        try:
            seconds = float(value) / (1000.0 if name.endswith("-ms") else 1.0)
        except ValueError:
            continue
        if seconds == seconds and seconds >= 0:  # not NaN
            return min(max(seconds, 0.1), MAX_COOL_SECONDS)
    return DEFAULT_COOL_SECONDS


class _Use:
    """What this process knows of one pooled credential."""

    __slots__ = ("breaker", "cool_until", "in_flight", "refused", "requests", "tokens")

    def __init__(self, config: RouterConfig):
        self.breaker = Breaker(config)
        self.cool_until = 0.0
        self.in_flight = 0
        self.refused = False
        self.requests: deque[float] = deque()  # start times, last WINDOW_SECONDS
        self.tokens: deque[tuple[float, int]] = deque()


class KeyPool:
    def __init__(
        self,
        config: RouterConfig | None = None,
        *,
        now: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ):
        self.config = config or RouterConfig()
        self.now = now or time.monotonic
        self.rng = rng or random.Random()  # noqa: S311 - load spreading, not security
        self._uses: dict[int, _Use] = {}
        # Called as on_refused(credential_id, status, message) once per refused credential.
        self.on_refused: Callable[[int, int, str], None] | None = None
        self.coolings = 0
        self.refusals = 0
        # Every process's counts and rests (the Redis limits store), else None.
        self.shared: SharedCredentials | None = None

    # --- state of one credential -------------------------------------------------

    def _use(self, credential_id: int) -> _Use:
        use = self._uses.get(credential_id)
        if use is None:
            use = self._uses[credential_id] = _Use(self.config)
        return use

    def _available(self, cred: RoutableCredential, now: float, tokens: int = 0) -> bool:
        if cred.credential_id is None:
            return True
        use = self._uses.get(cred.credential_id)
        if use is None:
            return True
        if use.refused or use.cool_until > now or not use.breaker.available(now):
            return False
        if cred.max_concurrency and use.in_flight >= cred.max_concurrency:
            return False
        if cred.rpm_limit or cred.tpm_limit:
            horizon = now - WINDOW_SECONDS
            while use.requests and use.requests[0] <= horizon:
                use.requests.popleft()
            while use.tokens and use.tokens[0][0] <= horizon:
                use.tokens.popleft()
            if cred.rpm_limit and len(use.requests) >= cred.rpm_limit:
                return False
            if cred.tpm_limit and sum(t for _, t in use.tokens) + tokens > cred.tpm_limit:
                return False
        return True

    def resting(self, node: RoutableNode) -> float | None:
        """Seconds until a credential of the channel's pool stops resting, when
        every credential it has left is resting (a vendor's 429, every
        process's limits reached); else None."""
        creds = node.credentials
        if not creds or creds[0].credential_id is None:
            return None
        now = self.now()
        waits = []
        for cred in creds:
            use = self._uses.get(cred.credential_id or 0)
            if use is None or (not use.refused and use.cool_until <= now):
                return None  # one is not resting
            if not use.refused:
                waits.append(use.cool_until - now)
        return min(waits) if waits else None

    # --- for the router and the forward stage ------------------------------------

    def usable(self, node: RoutableNode, exclude: frozenset[int] | set[int] = frozenset()) -> bool:
        """Whether any credential of the channel (but those in ``exclude``,
        which failed this call already) can take a call now."""
        creds = node.credentials
        if not creds or (len(creds) == 1 and creds[0].credential_id is None):
            return True
        now = self.now()
        return any(c.credential_id not in exclude and self._available(c, now) for c in creds)

    def pick(
        self, node: RoutableNode, exclude: frozenset[int] | set[int] = frozenset(), tokens: int = 0
    ) -> RoutableCredential | None:
        """A credential for a call of about ``tokens`` tokens (weighted among
        the usable ones not in ``exclude``), or None when none is left."""
        creds = node.credentials
        if not creds:
            return None
        if len(creds) == 1 and creds[0].credential_id is None:
            return creds[0]
        now = self.now()
        usable = [
            c for c in creds if c.credential_id not in exclude and self._available(c, now, tokens)
        ]
        if not usable:
            return None
        if len(usable) == 1:
            return usable[0]
        total = sum(max(c.weight, 1) for c in usable)
        point = self.rng.random() * total
        for cred in usable:
            point -= max(cred.weight, 1)
            if point < 0:
                return cred
        return usable[-1]

    def taken(self, cred: RoutableCredential, tokens: int) -> bool:
        """A call goes out with ``cred``; True when it is a half-open probe."""
        if cred.credential_id is None:
            return False
        use = self._use(cred.credential_id)
        use.in_flight += 1
        if cred.rpm_limit or cred.tpm_limit:
            now = self.now()
            use.requests.append(now)
            use.tokens.append((now, tokens))
        return use.breaker.taken()

    def release(self, cred: RoutableCredential, outcome: Outcome, probe: bool) -> bool:
        """The try with ``cred`` ended with ``outcome``; True when that opened
        the credential's circuit."""
        if cred.credential_id is None:
            return False
        use = self._use(cred.credential_id)
        use.in_flight = max(0, use.in_flight - 1)
        breaker = use.breaker
        was_open = breaker.state == "open"
        breaker.record(outcome, self.now(), probe)
        return not was_open and breaker.state == "open"

    # --- shared by every process (the Redis limits store) --------------------------

    async def acquire(self, cred: RoutableCredential, tokens: int, lease: str) -> float:
        """0.0 when every process together leaves room for a try with ``cred``
        now (counted); else the seconds to wait, for which ``cred`` rests in
        this process too. Always 0.0 without the shared store."""
        shared = self.shared
        if shared is None or cred.credential_id is None:
            return 0.0
        wait = await shared.acquire(cred, tokens, lease)
        if wait:
            use = self._use(cred.credential_id)
            use.cool_until = max(use.cool_until, self.now() + wait)
        return wait

    async def finished(self, cred: RoutableCredential, lease: str, opened: bool) -> None:
        """The try's lease is free; an opened circuit rests ``cred`` everywhere."""
        shared = self.shared
        if shared is None or cred.credential_id is None:
            return
        await shared.release(cred, lease)
        if opened:
            await shared.rest(cred, self.config.breaker_open_seconds)

    async def cool_everywhere(self, cred: RoutableCredential, seconds: float) -> None:
        """``cool`` in this process, and in every other one."""
        self.cool(cred, seconds)
        if self.shared is not None:
            await self.shared.rest(cred, seconds)

    def cool(self, cred: RoutableCredential, seconds: float) -> None:
        """The vendor said 429 for this credential: rest it ``seconds``."""
        if cred.credential_id is None:
            return
        use = self._use(cred.credential_id)
        use.cool_until = max(use.cool_until, self.now() + seconds)
        self.coolings += 1

    def refuse(self, cred: RoutableCredential, status: int, message: str) -> None:
        """The vendor refused this credential (401 / 403): out of the pool now,
        reported once to be disabled for good."""
        if cred.credential_id is None:
            return
        use = self._use(cred.credential_id)
        if use.refused:
            return
        use.refused = True
        self.refusals += 1
        logger.warning(
            "gateway: the vendor refused credential %s (%s) with HTTP %s; taking it out",
            cred.credential_id,
            cred.hint,
            status,
        )
        if self.on_refused is not None:
            try:
                self.on_refused(cred.credential_id, status, message)
            except Exception:  # reporting must never break a call
                logger.exception("gateway: reporting a refused credential failed")

    def stats(self) -> dict[int, dict[str, Any]]:
        now = self.now()
        return {
            cid: {
                "in_flight": use.in_flight,
                "cooling": use.cool_until > now,
                "refused": use.refused,
                "state": use.breaker.state,
            }
            for cid, use in self._uses.items()
        }
