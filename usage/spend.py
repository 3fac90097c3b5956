"""What was spent by one key or sub-account over given periods: a selector
for the gateway's spend caps, which it seeds from the database (the truth)
after a restart (``gateway_bridge.limits.rebuild``).

Spend comes from the hourly rollups (KEY and SUB_ACCOUNT grains), so a
lifetime is one indexed sum, not a scan of every call. Rollup hours are UTC
hours; when a period's start or end is not on a UTC hour (an organization
whose timezone is not a whole number of hours from UTC: India, Nepal, ...),
the partial hour at that edge is summed from the billed call records instead.

Spend is billed spend: load-test calls marked "not billed" (``is_test``) are
in no rollup (``usage.ingest``) and left out of the edges too, so a
sub-account's spend, and an ordinary key's, is what its invoice bills. A
load-test key's own calls are all test calls (``ApiKey.test_traffic`` is set
at issue); its lifetime cap is the load test's budget, which must hold after
the gateway re-seeds its caps, so a key with no billed calls at all has its
test calls summed from the call records (that key's few rows, by the
organization-key-time index; a key with billed calls costs nothing more).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import Q, Sum

from usage.models import CallRecord, Grain, Rollup

_HOUR = timedelta(hours=1)
# Whose spend: an API key's or a sub-account's.
KEY = Grain.KEY.value
SUB_ACCOUNT = Grain.SUB_ACCOUNT.value


def _floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil_hour(t: datetime) -> datetime:
    f = _floor_hour(t)
    return f if f == t else f + _HOUR


def spend_by_period(
    *,
    organization_id: int,
    grain: str,
    ident: int,
    periods: dict[str, tuple[datetime, datetime]],
) -> dict[str, int]:
    """Cost (micro-units) of the calls of key ``ident`` (``grain`` ``KEY``) or
    sub-account ``ident`` (``SUB_ACCOUNT``) of the organization, per period
    (``periods``: name -> [start, end)), plus ``"life"``, all of it. One
    query, two when a period edge cuts an hour, one more for a key without
    a billed call (a load test's key: its test calls, see above)."""
    return spend_by_period_many(
        organization_id=organization_id, grain=grain, idents=[ident], periods=periods
    )[ident]


def spend_by_period_many(
    *,
    organization_id: int,
    grain: str,
    idents: list[int],
    periods: dict[str, tuple[datetime, datetime]],
) -> dict[int, dict[str, int]]:
    """``spend_by_period`` for several keys (or sub-accounts) at once, in the
    same grouped queries: ``{ident: {period: cost, "life": cost}}``, zeros
    for an ident without calls."""
    if grain not in (KEY, SUB_ACCOUNT):
        raise ValueError(f"spend is kept per key or per sub-account, not per {grain!r}")
    field = "api_key_id" if grain == KEY else "sub_account_id"
    idents = list(dict.fromkeys(idents))
    out = {i: {"life": 0, **dict.fromkeys(periods, 0)} for i in idents}
    if not idents:
        return out
    rollups = Rollup.objects.filter(
        organization_id=organization_id, grain=grain, **{f"{field}__in": idents}
    )
    calls = CallRecord.objects.filter(organization_id=organization_id, **{f"{field}__in": idents})
    sums = {"life": Sum("cost")}
    ranges: dict[str, Q] = {}
    partial: dict[str, Q] = {}
    for name, (start, end) in periods.items():
        whole_from, whole_to = _ceil_hour(start), _floor_hour(end)
        sums[name] = Sum("cost", filter=Q(hour__gte=whole_from, hour__lt=whole_to))
        ranges[name] = Q(started_at__gte=start, started_at__lt=end)
        edges = []
        if whole_from > start:
            edges.append(Q(started_at__gte=start, started_at__lt=min(whole_from, end)))
        if whole_to < end and whole_to >= whole_from:
            edges.append(Q(started_at__gte=whole_to, started_at__lt=end))
        if edges:
            partial[name] = edges[0] if len(edges) == 1 else edges[0] | edges[1]
    billed: set[int] = set()
    for row in rollups.order_by().values(field).annotate(**sums, billed_calls=Sum("calls")):
        out[row[field]].update({k: int(row[k] or 0) for k in sums})
        if row["billed_calls"]:
            billed.add(row[field])
    if partial:
        extra = {n: Sum("cost", filter=q) for n, q in partial.items()}
        for row in calls.billed().order_by().values(field).annotate(**extra):
            for name in partial:
                out[row[field]][name] += int(row[name] or 0)
    tests = [i for i in idents if i not in billed] if grain == KEY else []
    if tests:
        # Keys without a billed call: a load test's key, its budget spent.
        whole = {n: Sum("cost", filter=q) for n, q in ranges.items()}
        test_calls = calls.filter(api_key_id__in=tests, is_test=True).order_by()
        for row in test_calls.values(field).annotate(life=Sum("cost"), **whole):
            for name in ("life", *ranges):
                out[row[field]][name] += int(row[name] or 0)
    return out


def key_spend(
    *, organization_id: int, key_ids: list[int], periods: dict[str, tuple[datetime, datetime]]
) -> dict[int, dict[str, int]]:
    """What each key spent per period (the ``console.kernel.hooks.KEY_SPEND`` provider)."""
    return spend_by_period_many(
        organization_id=organization_id, grain=KEY, idents=key_ids, periods=periods
    )


__all__ = ["KEY", "SUB_ACCOUNT", "key_spend", "spend_by_period", "spend_by_period_many"]
