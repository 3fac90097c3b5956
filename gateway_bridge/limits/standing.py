"""A key's standing: each of its spend caps (and its sub-account's) with what
was spent against it, and the organization's prepaid balance, as the next
call's admission would see them. Read by the balance and usage endpoints
(``pipeline.account``), never on the hot path.

Where the numbers come from, and why:

* A period **with a cap** reads the cap's counter in the limits store
  (``Limits.counters``: seeded from the database first when missing, exactly
  as an admission would). The counter is what the cap enforces, and it holds
  every call already settled, including those the worker has not ingested
  yet; ``held`` is what calls in flight have reserved against it.
* A period **without a cap** has no counter: it reads the ingested calls
  (``usage.facade.spend_by_period``, the same query that seeds the counters)
  plus the scope's *pending* spend, the part of one of its counters that the
  database does not hold yet (settled, not yet ingested: the narrowest
  counter's ``used`` minus the database's figure for that period). Without
  any counter in the scope, pending spend is unknown and the figure is the
  ingested one (``source`` says which).
* The prepaid balance reads the organization's balance counter (limit 0,
  ``used = -balance``), seeded from the ledger through
  ``console.kernel.hooks.PREPAID_BALANCE``; ``held`` is reserved by calls in flight.

Periods are the caps' own: the day and month in the organization's timezone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from gateway_bridge.limits import in_db_thread
from gateway_bridge.limits.base import PREPAID_CODE
from gateway_bridge.limits.plan import bare_key, periods, plan
from usage.facade import SPEND_BY_KEY, SPEND_BY_SUB_ACCOUNT, spend_by_period

if TYPE_CHECKING:
    from accounts.facade import AuthenticatedKey
    from gateway_bridge.limits import Limits

KEY, SUB_ACCOUNT = "key", "sub_account"
# (store letter, period name) in the counters' keys ("cap:k:42:d:2026-12-02").
_PERIODS = (("d", "daily"), ("m", "monthly"), ("life", "lifetime"))
_LETTER = {KEY: "k", SUB_ACCOUNT: "s"}
LIMITS, USAGE = "limits", "usage"


@dataclass(frozen=True, slots=True)
class CapStanding:
    scope: str  # "key" | "sub_account"
    period: str  # "daily" | "monthly" | "lifetime"
    limit: int | None  # micro-units; None: no cap
    spent: int  # settled spend in the period (micro-units)
    held: int  # reserved by calls in flight (a capped period only)
    resets_at: datetime | None  # the period's end (None: lifetime)
    source: str  # LIMITS (the cap's counter) or USAGE (ingested calls)

    @property
    def remaining(self) -> int | None:
        """What calls may still reserve under this cap (None: no cap)."""
        if self.limit is None:
            return None
        return max(0, self.limit - self.spent - self.held)


@dataclass(frozen=True, slots=True)
class Standing:
    caps: tuple[CapStanding, ...]
    balance: int | None  # the prepaid balance, settled calls included (None: not prepaid)
    balance_held: int
    # The key's settled spend the database does not hold yet (0 when the key
    # has no counter to tell it by).
    key_pending: int

    def cap(self, scope: str, period: str) -> CapStanding | None:
        for c in self.caps:
            if c.scope == scope and c.period == period:
                return c
        return None

    def key_cap(self, period: str) -> CapStanding:
        """The key's own standing for ``period`` (a standing has each of the
        key's periods, capped or not)."""
        found = self.cap(KEY, period)
        if found is None:  # pragma: no cover - ``standing`` builds all three
            raise LookupError(f"no standing of the key for {period!r}")
        return found

    @property
    def room(self) -> int | None:
        """The least a call may still spend under any cap or the balance
        (None: nothing limits the key's spend)."""
        rooms = [c.remaining for c in self.caps if c.remaining is not None]
        if self.balance is not None:
            rooms.append(max(0, self.balance - self.balance_held))
        return min(rooms) if rooms else None


def _ingested(
    auth: AuthenticatedKey, bounds: dict[str, tuple[datetime, datetime]]
) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for scope, grain, ident in (
        (KEY, SPEND_BY_KEY, auth.key_id),
        (SUB_ACCOUNT, SPEND_BY_SUB_ACCOUNT, auth.sub_account_id),
    ):
        if ident is not None:
            out[scope] = spend_by_period(
                organization_id=auth.organization_id, grain=grain, ident=ident, periods=bounds
            )
    return out


def key_spend_between(auth: AuthenticatedKey, start: datetime, end: datetime) -> int:
    """The key's ingested spend in [start, end) (sync ORM: run it in a thread)."""
    spent = spend_by_period(
        organization_id=auth.organization_id,
        grain=SPEND_BY_KEY,
        ident=auth.key_id,
        periods={"r": (start, end)},
    )
    return spent["r"]


async def standing(limits: Limits, auth: AuthenticatedKey, now: datetime) -> Standing:
    """The standing of ``auth`` (an ``AuthenticatedKey``) at ``now``; reads the
    limits store and, in a thread, the database."""
    caps, _ = plan(auth, now)
    counters = await limits.counters(auth, now, caps)
    per = periods(auth.timezone, now)
    bounds = {p: (start, end) for p, (start, end, _) in per.items()}
    ingested = await asyncio.to_thread(in_db_thread, _ingested, auth, bounds)

    # The counters by (scope letter, period): "cap:k:42:d:2026-12-02" -> ("k", "d").
    by_period: dict[tuple[str, str], tuple[int, int]] = {}
    for cap in caps:
        if cap.code != PREPAID_CODE:
            _, letter, _, period = bare_key(cap.key).split(":", 4)[:4]
            by_period[letter, period] = counters[cap.key]

    out: list[CapStanding] = []
    pending_of: dict[str, int] = {}
    for scope, limits_of in ((KEY, auth.key_caps), (SUB_ACCOUNT, auth.sub_account_caps)):
        db = ingested.get(scope)
        if db is None:
            continue
        letter = _LETTER[scope]
        pending = None
        for p, _ in _PERIODS:  # the narrowest counter: its pending calls are the newest
            counter = by_period.get((letter, p))
            if counter is not None:
                pending = max(0, counter[0] - db[p])
                break
        pending_of[scope] = pending or 0
        for (p, name), limit in zip(_PERIODS, limits_of, strict=True):
            counter = by_period.get((letter, p))
            if counter is not None:
                spent, held, source = counter[0], counter[1], LIMITS
            else:
                spent, held, source = db[p] + (pending or 0), 0, USAGE
            out.append(
                CapStanding(
                    scope=scope,
                    period=name,
                    limit=None if limit is None else int(limit),
                    spent=spent,
                    held=held,
                    resets_at=per[p][1] if p in per else None,
                    source=source,
                )
            )
    balance, balance_held = None, 0
    for cap in caps:
        if cap.code == PREPAID_CODE:
            used, balance_held = counters[cap.key]
            balance = -used
    return Standing(
        caps=tuple(out),
        balance=balance,
        balance_held=balance_held,
        key_pending=pending_of.get(KEY, 0),
    )
