"""The in-process limits store: the embedded mode's (one gateway process).

Every operation runs start to end under one ``threading.Lock`` with no
``await`` inside, so an admission is atomic across all its buckets and rules
for the event loop and for any other thread. The algorithm is the Redis
Lua script's, line for line (see ``redis_store``); the tests run both."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from gateway_bridge.limits.base import (
    RECORD_GRACE_MS,
    REFUSED_CAP,
    REFUSED_RPM,
    REFUSED_TPM,
    REFUSED_TPM_NEVER,
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

_SWEEP_EVERY = 1024


@dataclass(slots=True)
class _Bucket:
    used: int
    expires_ms: int | None
    reserved: int = 0
    live: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (amount, deadline)
    heap: list[tuple[int, str]] = field(default_factory=list)  # (deadline, id)

    def purge(self, now_ms: int) -> None:
        while self.heap and self.heap[0][0] <= now_ms:
            deadline, rid = heapq.heappop(self.heap)
            held = self.live.get(rid)
            if held is not None and held[1] == deadline:
                del self.live[rid]
                self.reserved -= held[0]


@dataclass(slots=True)
class _Window:
    oldest: int  # oldest slot still kept
    newest: int  # newest slot with counts
    requests: int = 0
    tokens: int = 0
    slots: dict[int, list[int]] = field(default_factory=dict)  # slot -> [requests, tokens]


@dataclass(slots=True)
class _Record:
    amount: int
    tokens: int
    slot: int
    caps: tuple[str, ...]
    rules: tuple[str, ...]
    expires_ms: int


class MemoryLimitStore(StoreBase):
    def __init__(
        self,
        *,
        window_seconds: float = 60.0,
        slots: int = 60,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(window_seconds, slots)
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._windows: dict[str, _Window] = {}
        self._records: dict[str, _Record] = {}
        self._ops = 0

    # --- internals (called under the lock) --------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _bucket(self, key: str, now_ms: int) -> _Bucket | None:
        b = self._buckets.get(key)
        if b is not None and b.expires_ms is not None and b.expires_ms <= now_ms:
            del self._buckets[key]
            return None
        if b is not None:
            b.purge(now_ms)
        return b

    def _window(self, key: str, cur: int) -> _Window | None:
        w = self._windows.get(key)
        if w is None:
            return None
        cutoff = cur - self.slots  # slots before this one no longer count
        if w.newest < cutoff:
            del self._windows[key]
            return None
        for s in range(w.oldest, cutoff):
            counts = w.slots.pop(s, None)
            if counts:
                w.requests -= counts[0]
                w.tokens -= counts[1]
        w.oldest = max(w.oldest, cutoff)
        return w

    def _wait_ms(self, w: _Window | None, now_ms: int, index: int, need: int, limit: int) -> int:
        if w is None:  # a limit of 0: nothing ever passes
            return self.window_ms
        total = w.requests if index == 0 else w.tokens
        freed = 0
        for s in range(w.oldest, w.newest + 1):
            counts = w.slots.get(s)
            freed += counts[index] if counts else 0
            if total - freed + need <= limit:
                return (s + self.slots + 1) * self.slot_ms - now_ms
        return (w.newest + self.slots + 1) * self.slot_ms - now_ms

    def _state(self, w: _Window | None, now_ms: int) -> RuleState:
        if w is None or (w.requests == 0 and w.tokens == 0):
            return RuleState(0, 0, 0)
        reset = (w.newest + self.slots + 1) * self.slot_ms - now_ms
        return RuleState(w.requests, w.tokens, reset)

    def _sweep(self, now_ms: int) -> None:
        for key in [k for k, b in self._buckets.items() if b.expires_ms and b.expires_ms <= now_ms]:
            del self._buckets[key]
        for rid in [r for r, rec in self._records.items() if rec.expires_ms <= now_ms]:
            del self._records[rid]
        cur = now_ms // self.slot_ms
        for key in list(self._windows):
            self._window(key, cur)

    # --- the interface ------------------------------------------------------------

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
        with self._lock:
            now_ms = self._now_ms()
            self._ops += 1
            if self._ops % _SWEEP_EVERY == 0:
                self._sweep(now_ms)
            if reservation_id in self._records:
                raise DuplicateReservation(reservation_id)
            found = [self._bucket(c.key, now_ms) for c in caps]
            if None in found:
                raise BucketsMissing([c.key for c, b in zip(caps, found, strict=True) if not b])
            buckets = cast(list[_Bucket], found)  # none is None (checked above)
            cur = now_ms // self.slot_ms
            windows = [self._window(r.key, cur) for r in rates]
            self._check(caps, buckets, rates, windows, amount, tokens, now_ms)
            # Admitted: reserve on every bucket, count on every rule.
            deadline = now_ms + hold_ms(hold_seconds)
            held = (amount, deadline)
            entry = (deadline, reservation_id)
            for b in buckets:
                b.reserved += amount
                b.live[reservation_id] = held
                heapq.heappush(b.heap, entry)
            after = self._count(rates, windows, cur, tokens, now_ms)
            self._records[reservation_id] = _Record(
                amount,
                tokens,
                cur,
                tuple([c.key for c in caps]),
                tuple([r.key for r in rates]),
                deadline + RECORD_GRACE_MS,
            )
            return Admission(reservation_id, rate_headers(rates, after))

    def _check(
        self,
        caps: list[CapBucket],
        buckets: list[_Bucket],
        rates: list[RateRule],
        windows: list[_Window | None],
        amount: int,
        tokens: int,
        now_ms: int,
    ) -> None:
        """Raise the refusal of the first cap, then the first rule, that the
        admission would overrun."""
        for i, (cap, b) in enumerate(zip(caps, buckets, strict=True)):
            if b.used + b.reserved + amount > cap.limit:
                states = self._states(windows, now_ms)
                raise refusal(
                    REFUSED_CAP, i, caps, rates, states, amount, tokens,
                    (b.used, b.reserved), now_ms, self.window_ms,
                )  # fmt: skip
        for i, rule in enumerate(rates):
            w = windows[i]
            reqs, toks = (w.requests, w.tokens) if w else (0, 0)
            kind = wait = 0
            if rule.rpm is not None and reqs + 1 > rule.rpm:
                kind, wait = REFUSED_RPM, self._wait_ms(w, now_ms, 0, 1, rule.rpm)
            elif rule.tpm is not None and tokens > rule.tpm:
                kind = REFUSED_TPM_NEVER
            elif rule.tpm is not None and toks + tokens > rule.tpm:
                kind, wait = REFUSED_TPM, self._wait_ms(w, now_ms, 1, tokens, rule.tpm)
            if kind:
                states = self._states(windows, now_ms)
                raise refusal(
                    kind, i, caps, rates, states, amount, tokens, (wait, 0), now_ms, self.window_ms
                )

    def _count(
        self,
        rates: list[RateRule],
        windows: list[_Window | None],
        cur: int,
        tokens: int,
        now_ms: int,
    ) -> list[RuleState]:
        """Count an admitted request (and its tokens) on every rule, in slot
        ``cur``: the rules' states after it."""
        after = []
        # Every window now counts this request, so each rule's window resets one
        # full window after the current slot.
        reset = (cur + self.slots + 1) * self.slot_ms - now_ms
        for i, rule in enumerate(rates):
            w = windows[i]
            if w is None:
                w = self._windows[rule.key] = _Window(oldest=cur, newest=cur)
            counts = w.slots.get(cur)
            if counts is None:
                counts = w.slots[cur] = [0, 0]
            counts[0] += 1
            counts[1] += tokens
            w.requests += 1
            w.tokens += tokens
            w.newest = cur
            after.append(RuleState(w.requests, w.tokens, reset))
        return after

    def _states(self, windows: list[_Window | None], now_ms: int) -> list[RuleState]:
        return [self._state(w, now_ms) for w in windows]

    def _finish(self, reservation_id: str, cost: int | None, tokens: int) -> None:
        with self._lock:
            now_ms = self._now_ms()
            rec = self._records.pop(reservation_id, None)
            if rec is None or rec.expires_ms <= now_ms:
                return
            for key in rec.caps:
                b = self._bucket(key, now_ms)
                if b is None:  # its period is over and gone: nothing to correct
                    continue
                held = b.live.pop(reservation_id, None)
                if held is not None:
                    b.reserved -= held[0]
                    if len(b.heap) > 2 * len(b.live) + 64:  # drop settled entries
                        b.heap = [(d, r) for r, (_, d) in b.live.items()]
                        heapq.heapify(b.heap)
                if cost:
                    b.used += cost
            delta = tokens - rec.tokens
            if cost is None or not delta:
                return
            cur = now_ms // self.slot_ms
            for key in rec.rules:
                w = self._window(key, cur)
                counts = w.slots.get(rec.slot) if w else None
                if w is not None and counts is not None:
                    counts[1] += delta
                    w.tokens += delta

    async def settle(self, reservation_id: str, cost: int, tokens: int) -> None:
        check_settle(cost, tokens)
        self._finish(reservation_id, cost, tokens)

    async def release(self, reservation_id: str) -> None:
        self._finish(reservation_id, None, 0)

    async def seed(self, key: str, used: int, ttl_seconds: int | None) -> bool:
        with self._lock:
            now_ms = self._now_ms()
            if self._bucket(key, now_ms) is not None:
                return False
            expires = now_ms + ttl_seconds * 1000 if ttl_seconds else None
            self._buckets[key] = _Bucket(used=int(used), expires_ms=expires)
            return True

    async def credit(self, key: str, amount: int) -> None:
        with self._lock:
            b = self._bucket(key, self._now_ms())
            # An absent bucket is seeded from the database later, credit included.
            if b is not None:
                b.used -= amount

    async def peek(self, key: str) -> tuple[int, int] | None:
        with self._lock:
            b = self._bucket(key, self._now_ms())
            return (b.used, b.reserved) if b is not None else None

    async def close(self) -> None:
        return None
