"""Seed values of the cap buckets, from the database (the truth).

Sync Django ORM: the gateway calls ``seed_values`` in a thread when a store
reports a bucket missing (``BucketsMissing``), then ``store.seed`` each key
(which keeps a value another process seeded first).

Spend comes from the hourly rollups (KEY and SUB_ACCOUNT grains), so a
lifetime is one indexed sum, not a scan of every call. Rollup hours are UTC
hours; when the organization's timezone is not a whole number of hours from
UTC (India, Nepal, ...), the hour cut by the period's start is partial and is
summed from the call records instead."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import Q, Sum

from gateway_bridge.limits.base import PREPAID_CODE
from gateway_bridge.limits.plan import periods, plan

_HOUR = timedelta(hours=1)


def _floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil_hour(t: datetime) -> datetime:
    f = _floor_hour(t)
    return f if f == t else f + _HOUR


def _spent(auth, grain, ident: int, bounds: dict[str, tuple[datetime, datetime]]) -> dict:
    """Cost per period (``bounds`` name -> [start, end)) plus ``"life"``."""
    from usage.models import CallRecord, Rollup

    rollups = Rollup.objects.filter(organization_id=auth.organization_id, grain=grain)
    calls = CallRecord.objects.filter(organization_id=auth.organization_id)
    if grain == "key":
        rollups, calls = rollups.filter(api_key_id=ident), calls.filter(api_key_id=ident)
    else:
        rollups = rollups.filter(sub_account_id=ident)
        calls = calls.filter(sub_account_id=ident)
    sums = {"life": Sum("cost")}
    partial: dict[str, Q] = {}
    for name, (start, end) in bounds.items():
        whole_from, whole_to = _ceil_hour(start), _floor_hour(end)
        sums[name] = Sum("cost", filter=Q(hour__gte=whole_from, hour__lt=whole_to))
        edges = []
        if whole_from > start:
            edges.append(Q(started_at__gte=start, started_at__lt=min(whole_from, end)))
        if whole_to < end and whole_to >= whole_from:
            edges.append(Q(started_at__gte=whole_to, started_at__lt=end))
        if edges:
            partial[name] = edges[0] if len(edges) == 1 else edges[0] | edges[1]
    out = {k: int(v or 0) for k, v in rollups.aggregate(**sums).items()}
    if partial:
        extra = calls.aggregate(**{n: Sum("cost", filter=q) for n, q in partial.items()})
        for name, value in extra.items():
            out[name] += int(value or 0)
    return out


def prepaid_balance(organization_id: int) -> int:
    try:
        from invoicing.selectors import prepaid_balance as ledger_balance
    except ImportError:
        # No prepaid ledger in this build (the invoicing app is not there):
        # a prepaid organization then has no balance to spend.
        return 0
    return int(ledger_balance(organization_id))


def seed_values(auth, now: datetime, keys=None) -> dict[str, int]:
    from usage.models import Grain

    """``{bucket key: used}`` for the cap buckets ``plan(auth, now)`` gives
    (only ``keys`` when given): spent today, this month and in total by the key
    and its sub-account, and ``-balance`` for the prepaid bucket."""
    caps, _ = plan(auth, now)
    wanted = {c.key: c for c in caps if keys is None or c.key in keys}
    per = periods(auth.timezone, now)
    bounds = {p: (start, end) for p, (start, end, _) in per.items()}
    out: dict[str, int] = {}
    for grain, letter, ident in (
        (Grain.KEY, "k", auth.key_id),
        (Grain.SUB_ACCOUNT, "s", auth.sub_account_id),
    ):
        prefix = f"cap:{letter}:{ident}:"
        mine = [k for k in wanted if k.startswith(prefix)]
        if ident is None or not mine:
            continue
        spent = _spent(auth, grain, ident, bounds)
        for key in mine:
            period = key[len(prefix) :].split(":", 1)[0]
            out[key] = spent["life" if period == "life" else period]
    for key, cap in wanted.items():
        if cap.code == PREPAID_CODE:
            out[key] = -prepaid_balance(auth.organization_id)
    return out
