"""Call records and rollups as plain rows, for what other apps check or watch:
the soak's proofs (every answered call has its record, the money adds up,
no cap was exceeded), and the alert rules' trailing spend, per-key rates and
the calls refused at a spend cap."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Count, Min, Q, Sum

from usage.models import CallRecord, Grain, Rollup

# A cap period's name (as ``spend_by_period`` and the alert rules name them) to
# the word in the gateway's refusal code (``key_daily_cap_exceeded``, ...).
_CAP_PERIOD_WORDS = {"d": "daily", "m": "monthly", "life": "lifetime"}


class StoredCall(NamedTuple):
    """One call record's identity, outcome, tokens and cost."""

    request_id: str
    organization_id: int
    api_key_id: int
    sub_account_id: int | None
    node_id: int | None
    model: str
    status_code: int
    error_type: str
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost: int
    currency: str
    started_at: datetime
    billed: bool


def call_rows(
    *,
    organization_ids: Iterable[int] | None = None,
    request_ids: Iterable[str] | None = None,
    api_key_id: int | None = None,
    sub_account_id: int | None = None,
) -> list[StoredCall]:
    """The call records matching every filter given (each one narrows)."""
    filters: dict[str, Any] = {}
    if organization_ids is not None:
        filters["organization_id__in"] = list(organization_ids)
    if request_ids is not None:
        filters["request_id__in"] = list(request_ids)
    if api_key_id is not None:
        filters["api_key_id"] = api_key_id
    if sub_account_id is not None:
        filters["sub_account_id"] = sub_account_id
    rows = CallRecord.objects.filter(**filters).values_list(
        "request_id",
        "organization_id",
        "api_key_id",
        "sub_account_id",
        "node_id",
        "model",
        "status_code",
        "error_type",
        "input_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "output_tokens",
        "cost",
        "currency",
        "started_at",
        "is_test",
    )
    return [StoredCall._make((*row[:-1], not row[-1])) for row in rows]


def org_rollup_cost(
    organization_id: int, *, since: datetime | None = None, until: datetime | None = None
) -> int:
    """The organization's rolled-up cost (billed calls only) over the hours in
    ``[since, until)`` (all hours when not given)."""
    rollups = Rollup.objects.filter(organization_id=organization_id, grain=Grain.ORG)
    if since is not None:
        rollups = rollups.filter(hour__gte=since)
    if until is not None:
        rollups = rollups.filter(hour__lt=until)
    cost: int = rollups.aggregate(s=Sum("cost"))["s"] or 0
    return cost


def calls_and_tokens_by_key(
    organization_id: int, api_key_ids: Iterable[int], start: datetime, end: datetime
) -> dict[int, tuple[int, int]]:
    """``{key id: (calls, tokens of every class)}`` of these keys' calls in
    ``[start, end)``; a key without calls is absent."""
    rows = (
        CallRecord.objects.filter(
            organization_id=organization_id,
            api_key_id__in=list(api_key_ids),
            started_at__gte=start,
            started_at__lt=end,
        )
        .order_by()
        .values("api_key_id")
        .annotate(
            n=Count("request_id"),
            tokens=Sum("input_tokens")
            + Sum("cache_read_tokens")
            + Sum("cache_write_tokens")
            + Sum("output_tokens"),
        )
    )
    return {r["api_key_id"]: (int(r["n"] or 0), int(r["tokens"] or 0)) for r in rows}


class FailedCall(NamedTuple):
    request_id: str
    started_at: datetime
    model: str
    status_code: int
    error_type: str


def failed_billed_calls(organization_id: int, start: datetime, end: datetime) -> list[FailedCall]:
    """The organization's billed calls in ``[start, end)`` failed by the platform
    or an upstream (a 5xx answer), oldest first."""
    rows = (
        CallRecord.objects.billed()
        .filter(
            organization_id=organization_id,
            started_at__gte=start,
            started_at__lt=end,
            status_code__gte=500,
        )
        .order_by("started_at", "request_id")
        .values_list("request_id", "started_at", "model", "status_code", "error_type")
    )
    return [FailedCall(*row) for row in rows]


def first_cap_refusals(
    organization_id: int,
    *,
    grain: str,
    idents: Iterable[int],
    periods: dict[str, tuple[datetime, datetime]],
    lifetime: bool = True,
) -> dict[int, dict[str, datetime]]:
    """When the gateway first refused a call of key ``ident`` (``grain``
    ``KEY``) or sub-account ``ident`` (``SUB_ACCOUNT``) for that holder's own
    cap of each period (``periods``: ``"d"`` / ``"m"`` -> [start, end), and
    ``"life"`` when ``lifetime``; without it only the periods' calls are read):
    ``{ident: {period: started_at}}``, a period without such a refusal absent.
    A refusal (``key_daily_cap_exceeded``, ``sub_account_monthly_cap_exceeded``,
    ...) means the spend reached the cap, though the recorded spend stops short
    of it (the gateway reserves a call's worst case). One grouped query."""
    if grain not in (Grain.KEY.value, Grain.SUB_ACCOUNT.value):
        raise ValueError(f"caps are kept per key or per sub-account, not per {grain!r}")
    field = "api_key_id" if grain == Grain.KEY.value else "sub_account_id"
    scope = "key" if grain == Grain.KEY.value else "sub_account"
    idents = list(dict.fromkeys(idents))
    if not idents:
        return {}
    firsts = {}
    for name in (*periods, "life") if lifetime else tuple(periods):
        word = _CAP_PERIOD_WORDS.get(name)
        if word is None:
            continue
        q = Q(error_type=f"{scope}_{word}_cap_exceeded")
        if name in periods:
            start, end = periods[name]
            q &= Q(started_at__gte=start, started_at__lt=end)
        firsts[name] = Min("started_at", filter=q)
    if not firsts:
        return {}
    codes = [f"{scope}_{word}_cap_exceeded" for word in _CAP_PERIOD_WORDS.values()]
    calls = CallRecord.objects.filter(
        organization_id=organization_id, error_type__in=codes, **{f"{field}__in": idents}
    )
    if not lifetime:  # no lifetime cap among them: the periods' calls are enough
        calls = calls.filter(started_at__gte=min(start for start, _ in periods.values()))
    rows = calls.order_by().values(field).annotate(**firsts)
    out: dict[int, dict[str, datetime]] = {}
    for row in rows:
        seen = {name: row[name] for name in firsts if row[name] is not None}
        if seen:
            out[int(row[field])] = seen
    return out
