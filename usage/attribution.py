"""Cost attribution: an organization's calls grouped by the value of one of
their tags, or by their end user (what the caller says the call was for;
``usage.events``), over a range.

Whole UTC hours are read from the attribution rollups
(``usage.models.AttributionRollup``, kept by ingest in the transaction that
stores the calls); a range edge that cuts an hour, and any narrowing to some
keys (a developer sees only their own), is read from the billed call records
(load-test calls marked "not billed" are in neither: the groups are what the
invoice bills). The calls without the tag key (or without an end user) make
one more group, ``value`` None: the organization's total (its ORG-grain
rollup) less the groups. So the groups always sum to the range's total, to the micro-unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.fields.json import KeyTextTransform

from usage.ingest.aggregate import END_USER, TAG
from usage.models import AttributionRollup, CallRecord, Grain, Rollup

BY_TAG = TAG
BY_END_USER = END_USER
SUMS = ("calls", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "cost")
_TOKENS = SUMS[1:5]
_HOUR = timedelta(hours=1)


@dataclass
class AttributionGroup:
    """One tag value's (or end user's) sums; ``value`` None: the calls without."""

    value: str | None
    calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost: int = 0

    @property
    def tokens(self) -> int:
        return sum(getattr(self, c) for c in _TOKENS)

    def add(self, sums: dict[str, Any], sign: int = 1) -> None:
        for c in SUMS:
            setattr(self, c, getattr(self, c) + sign * int(sums.get(c) or 0))


@dataclass
class Attribution:
    by: str
    tag_key: str
    groups: list[AttributionGroup]  # by cost, largest first; the calls without last
    total: AttributionGroup

    @property
    def untagged(self) -> AttributionGroup | None:
        return next((g for g in self.groups if g.value is None), None)


def _floor(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil(t: datetime) -> datetime:
    f = _floor(t)
    return f if f == t else f + _HOUR


def _aggregates() -> dict[str, Any]:
    return {
        "calls_n": Count("request_id"),
        **{c: Sum(c) for c in SUMS[1:]},
    }


def _call_groups(
    calls: QuerySet[CallRecord], by: str, tag_key: str
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Groups and total of a call-record queryset."""
    total = calls.aggregate(**_aggregates())
    if by == BY_TAG:
        grouped = calls.filter(tags__has_key=tag_key).annotate(
            _value=KeyTextTransform(tag_key, "tags")
        )
    else:
        grouped = calls.exclude(end_user="")
    field = "_value" if by == BY_TAG else "end_user"
    out = {}
    for row in grouped.order_by().values(field).annotate(**_aggregates()):
        out[row[field]] = {**row, "calls": row["calls_n"]}
    return out, {**total, "calls": total["calls_n"]}


def _call_filters(where: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in where.items():
        if name == "mode":
            out["stream"] = value == "stream"
        elif isinstance(value, list | tuple | set | frozenset):
            out[f"{name}__in"] = list(value)
        else:
            out[name] = value
    return out


def _hours_and_edges(
    start: datetime, end: datetime, *, narrowed: bool
) -> tuple[tuple[datetime, datetime] | None, list[Q]]:
    """How to read ``[start, end)``: the whole UTC hours the rollups answer
    (None: none, or ``narrowed`` to what the rollups keep no account of),
    and the call-record ranges left over (the edges that cut an hour)."""
    whole = Q(started_at__gte=start, started_at__lt=end)
    if narrowed:
        return None, [whole]
    whole_from, whole_to = _ceil(start), _floor(end)
    if whole_to <= whole_from:
        return None, [whole]
    edges = []
    if whole_from > start:
        edges.append(Q(started_at__gte=start, started_at__lt=whole_from))
    if whole_to < end:
        edges.append(Q(started_at__gte=whole_to, started_at__lt=end))
    return (whole_from, whole_to), edges


def _rolled_up(
    organization_id: int, by: str, key: str, hours: tuple[datetime, datetime]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The groups' sums and the total of these whole hours, from the rollups."""
    whole_from, whole_to = hours
    cells = AttributionRollup.objects.filter(
        organization_id=organization_id,
        kind=by,
        tag_key=key,
        hour__gte=whole_from,
        hour__lt=whole_to,
    )
    rows = list(cells.order_by().values("value").annotate(**{c: Sum(c) for c in SUMS}))
    total: dict[str, Any] = Rollup.objects.filter(
        organization_id=organization_id,
        grain=Grain.ORG,
        hour__gte=whole_from,
        hour__lt=whole_to,
    ).aggregate(**{c: Sum(c) for c in SUMS})
    return rows, total


def _by_cost_then_untagged(
    groups: dict[str, AttributionGroup], total: AttributionGroup
) -> list[AttributionGroup]:
    """The groups by cost, largest first, then the calls without (the total
    less the groups) when there are any."""
    untagged = AttributionGroup(None)
    untagged.add({c: getattr(total, c) for c in SUMS})
    for g in groups.values():
        untagged.add({c: getattr(g, c) for c in SUMS}, sign=-1)
    ordered = sorted(groups.values(), key=lambda g: (-g.cost, -g.calls, g.value))
    if untagged.calls:
        ordered.append(untagged)
    return ordered


def attribution(
    *,
    organization_id: int,
    start: datetime,
    end: datetime,
    by: str,
    tag_key: str = "",
    where: dict[str, Any] | None = None,
    currency: str | None = None,
) -> Attribution:
    """The organization's calls that started in ``[start, end)`` grouped by
    the value of tag ``tag_key`` (``by`` ``BY_TAG``) or by end user
    (``BY_END_USER``). ``where``: only the calls with these call-record
    field values (``api_key_id`` may be a list: a developer's own keys),
    read from the call records; ``currency``: only calls rated in it (an
    invoice's)."""
    if by not in (BY_TAG, BY_END_USER):
        raise ValueError(f"attribution is by tag or by end user, not {by!r}")
    if by == BY_TAG and not tag_key:
        raise ValueError("attribution by tag needs a tag key")
    key = tag_key if by == BY_TAG else ""
    groups: dict[str, AttributionGroup] = {}
    total = AttributionGroup(None)

    def add(value: str, sums: dict[str, Any]) -> None:
        g = groups.get(value)
        if g is None:
            g = groups[value] = AttributionGroup(value)
        g.add(sums)

    # Billed calls only, as in the attribution rollups (``usage.ingest``).
    calls = CallRecord.objects.billed().filter(organization_id=organization_id)
    if currency:
        calls = calls.filter(currency=currency)
    # Narrowed to some keys, models, ... or one currency: the rollups keep none.
    narrowed = bool(where or currency)
    if narrowed:
        calls = calls.filter(**_call_filters(where or {}))
    hours, edges = _hours_and_edges(start, end, narrowed=narrowed)
    if hours is not None:
        rows, rolled_total = _rolled_up(organization_id, by, key, hours)
        for row in rows:
            add(row["value"], row)
        total.add(rolled_total)
    if edges:
        in_edges = edges[0]
        for q in edges[1:]:
            in_edges |= q
        found, sums = _call_groups(calls.filter(in_edges), by, key)
        for value, row in found.items():
            add(value, row)
        total.add(sums)
    return Attribution(
        by=by, tag_key=key, groups=_by_cost_then_untagged(groups, total), total=total
    )


def tag_keys(*, organization_id: int, start: datetime, end: datetime, limit: int = 50) -> list[str]:
    """The tag keys the organization's calls carried in the range's hours
    (from the attribution rollups), most used first."""
    rows = (
        AttributionRollup.objects.filter(
            organization_id=organization_id,
            kind=BY_TAG,
            hour__gte=_floor(start),
            hour__lt=_ceil(end),
        )
        .order_by()
        .values("tag_key")
        .annotate(n=Sum("calls"))
        .order_by("-n", "tag_key")
    )
    return [r["tag_key"] for r in rows[:limit]]


__all__ = [
    "BY_END_USER",
    "BY_TAG",
    "Attribution",
    "AttributionGroup",
    "attribution",
    "tag_keys",
]
