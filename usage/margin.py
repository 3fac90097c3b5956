"""Margin: what customers were charged for their calls (revenue), what the
upstream vendors charge for the same calls (cost), and the difference, per
model, per channel (node), per organization and per day, platform-wide.

Read from the hourly rollups only (the MODEL, NODE and ORG grains), never
from call records, so a quarter is a few thousand rows. The figures are
exact to the micro-unit: a rollup row is the sum of its call records, so
revenue is the sum of the calls' ``cost`` and cost the sum of their
``upstream_cost`` where the vendor's currency is the organization's.

Decisions:

* Money stays per currency: an organization is billed in its currency, and a
  rollup row holds that currency; figures of different currencies are never
  added (each line names its currency). A call whose vendor charges in
  another currency, or whose cost price is unknown, adds its revenue but no
  cost and counts in ``uncosted_calls``, so a page can say how many calls
  the margin does not account for (``Rollup.uncosted_calls``).
* The range is whole UTC hours (the rollups' grain): ``margin_report``
  refuses anything else rather than silently widen it.
* Revenue is the rated cost at ingest; re-rating corrections of invoiced
  periods (``Adjustment``) and credit notes are invoicing's, not here.
* The margin share is integer math: basis points of revenue, half away from
  zero (``margin_basis_points``); pages format it, and money through
  ``console.kernel.money``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from django.db.models import QuerySet, Sum
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from accounts.facade import Organization
from inference_node.facade import Node
from usage.models import Grain, Rollup

BASIS_POINTS = 10_000
NO_UPSTREAM = gettext_noop("(no upstream)")  # local answers: no node, no vendor cost
_SUMS = {
    "calls": Sum("calls"),
    "revenue": Sum("cost"),
    "upstream": Sum("upstream_cost"),
    "uncosted": Sum("uncosted_calls"),
}


def margin_basis_points(margin: int, revenue: int) -> int | None:
    """``margin`` as basis points of ``revenue`` (1234 = 12.34 %), rounded
    half away from zero; ``None`` when there is no revenue to share."""
    if revenue <= 0:
        return None
    scaled = abs(margin) * BASIS_POINTS
    bp = (2 * scaled + revenue) // (2 * revenue)
    return bp if margin >= 0 else -bp


@dataclass(frozen=True, slots=True)
class MarginLine:
    """One group's calls in one currency: ``revenue`` (what the organizations
    were charged) and ``cost`` (what the vendors charge, comparable calls
    only), in integer micro-units of ``currency``."""

    key: str | int  # model name, node id (0: no upstream), organization id; "" for a total
    label: str
    currency: str
    calls: int
    revenue: int
    cost: int
    uncosted_calls: int

    @property
    def margin(self) -> int:
        return self.revenue - self.cost

    @property
    def margin_bp(self) -> int | None:
        return margin_basis_points(self.margin, self.revenue)


@dataclass(frozen=True, slots=True)
class MarginDay:
    """One UTC day's revenue and cost in one currency."""

    day: date
    currency: str
    revenue: int
    cost: int

    @property
    def margin(self) -> int:
        return self.revenue - self.cost


@dataclass(frozen=True, slots=True)
class MarginReport:
    """Margin over ``[start, end)``: totals per currency, then the same calls
    by model, by channel (node) and by organization, and per day."""

    start: datetime
    end: datetime
    totals: list[MarginLine]
    by_model: list[MarginLine]
    by_channel: list[MarginLine]
    by_organization: list[MarginLine]
    days: list[MarginDay]

    @property
    def uncosted_calls(self) -> int:
        return sum(t.uncosted_calls for t in self.totals)


def _whole_hour(t: datetime, name: str) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"{name} must be an aware datetime")
    t = t.astimezone(UTC)
    if t.minute or t.second or t.microsecond:
        raise ValueError(f"{name} must be a whole UTC hour (the rollups' grain): {t.isoformat()}")
    return t


def grouped_query(grain: str, start: datetime, end: datetime, column: str) -> QuerySet[Rollup]:
    """The sums of one grain's rollup rows over a range, by ``column`` and
    currency (on PostgreSQL, a range of the ``usage_rollup_platform`` index)."""
    rows: QuerySet[Rollup] = (
        Rollup.objects.filter(grain=grain, hour__gte=start, hour__lt=end)
        .values(column, "currency")
        .annotate(**_SUMS)
        .order_by()
    )
    return rows


def _grouped(grain: str, start: datetime, end: datetime, column: str) -> list[dict[str, Any]]:
    return list(grouped_query(grain, start, end, column))


def _lines(rows: list[dict[str, Any]], column: str, labels: dict[Any, str]) -> list[MarginLine]:
    lines = [
        MarginLine(
            key=r[column],
            label=labels.get(r[column], str(r[column])),
            currency=r["currency"],
            calls=r["calls"] or 0,
            revenue=r["revenue"] or 0,
            cost=r["upstream"] or 0,
            uncosted_calls=r["uncosted"] or 0,
        )
        for r in rows
    ]
    # Per currency, the biggest revenue first; ties by name, then key.
    lines.sort(key=lambda m: (m.currency, -m.revenue, m.label, str(m.key)))
    return lines


def node_labels(ids: Iterable[int]) -> dict[int, str]:
    """Channel or node names by id (0: local answers), deleted ones said so."""
    named = dict(Node.objects.filter(pk__in=[i for i in ids if i]).values_list("pk", "name"))
    labels = {i: named.get(i) or _("node #%(id)s (deleted)") % {"id": i} for i in ids if i}
    labels[0] = _(NO_UPSTREAM)
    return labels


def _totals(by_org: list[MarginLine]) -> list[MarginLine]:
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for m in by_org:
        a = acc[m.currency]
        a[0] += m.calls
        a[1] += m.revenue
        a[2] += m.cost
        a[3] += m.uncosted_calls
    return [
        MarginLine("", "All calls", cur, calls, revenue, cost, uncosted)
        for cur, (calls, revenue, cost, uncosted) in sorted(acc.items())
    ]


def _days(start: datetime, end: datetime) -> list[MarginDay]:
    rows = (
        Rollup.objects.filter(grain=Grain.ORG, hour__gte=start, hour__lt=end)
        .values("hour", "currency")
        .annotate(revenue=Sum("cost"), upstream=Sum("upstream_cost"))
        .order_by()
    )
    acc: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        a = acc[(r["hour"].astimezone(UTC).date(), r["currency"])]
        a[0] += r["revenue"] or 0
        a[1] += r["upstream"] or 0
    return [MarginDay(day, cur, rev, cost) for (day, cur), (rev, cost) in sorted(acc.items())]


def margin_report(*, start: datetime, end: datetime) -> MarginReport:
    """Revenue, cost and margin of every organization's calls started in
    ``[start, end)`` (whole UTC hours), per currency: in total, by model, by
    channel, by organization and per UTC day. Platform staff only: it shows
    what vendors charge, which no organization may see."""
    start = _whole_hour(start, "start")
    end = _whole_hour(end, "end")
    if end <= start:
        raise ValueError("end must be after start")
    org_rows = _grouped(Grain.ORG, start, end, "organization_id")
    orgs = dict(
        Organization.objects.filter(pk__in={r["organization_id"] for r in org_rows}).values_list(
            "pk", "name"
        )
    )
    by_org = _lines(org_rows, "organization_id", orgs)
    model_rows = _grouped(Grain.MODEL, start, end, "model")
    node_rows = _grouped(Grain.NODE, start, end, "node_id")
    return MarginReport(
        start=start,
        end=end,
        totals=_totals(by_org),
        by_model=_lines(model_rows, "model", {}),
        by_channel=_lines(node_rows, "node_id", node_labels({r["node_id"] for r in node_rows})),
        by_organization=by_org,
        days=_days(start, end),
    )


__all__ = ["MarginDay", "MarginLine", "MarginReport", "margin_basis_points", "margin_report"]
