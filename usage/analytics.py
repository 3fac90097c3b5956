"""Usage analytics read from the hourly rollups only, never from call records,
so a month of one organization is at most a few thousand rows however many
calls it made. Latency percentiles come from merging the rows' histograms
(``usage.sketch``: within 1 % of the exact value); ``percentiles`` of a range
holding few calls reads those calls' records instead and is exact
(``usage.percentiles``).

``filters`` may hold ``sub_account_id``, ``api_key_id``, ``model`` and
``node_id`` (``None`` values are ignored; ``sub_account_id=0`` means keys
without a sub-account, ``node_id=0`` calls no node served). A value may also
be a list, tuple or set, meaning any of them (a developer's own keys, say; an
empty one matches nothing). Hours are UTC; ``start`` is rounded down to its
hour and ``end`` is exclusive.

The console's charts read the same rows through ``usage.charts`` (``series``,
``cache_savings``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import TruncDay

from usage.ingest.aggregate import SUM_COLUMNS
from usage.models import CallRecord, CatalogModel, Grain, Rollup
from usage.percentiles import percentiles_of
from usage.quantiles import encoded_quantiles

DIMENSIONS = ("sub_account_id", "api_key_id", "model", "node_id", "protocol", "mode")
_DIM_GRAIN = {
    "sub_account_id": Grain.SUB_ACCOUNT,
    "api_key_id": Grain.KEY,
    "model": Grain.MODEL,
    "node_id": Grain.NODE,
    "protocol": Grain.TRAFFIC,
    "mode": Grain.TRAFFIC,
}
_TRAFFIC_DIMS = frozenset({"model", "protocol", "mode"})
GROUP_BY = (None, "model", "api_key_id", "sub_account_id", "node_id", "hour", "day")
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
HOUR = timedelta(hours=1)
#: Filters by dimension (see the module docstring): a value, or a collection of values.
Filters = dict[str, Any]


def _clean_filters(filters: Filters | None) -> Filters:
    filters = {k: v for k, v in (filters or {}).items() if v is not None and v != ""}
    unknown = set(filters) - set(DIMENSIONS)
    if unknown:
        raise ValueError(f"unknown filter(s): {', '.join(sorted(unknown))}")
    return filters


def choose_grain(filters: Filters | None, group_by: str | None = None) -> Grain:
    """The narrowest grain whose rows answer these filters and this grouping:
    ORG for none, a dimension's own grain when only that dimension is
    involved, TRAFFIC (model, protocol and streaming) for protocol or
    streaming with or without a model, FULL for other combinations."""
    dims = set(_clean_filters(filters))
    if group_by in _DIM_GRAIN:
        dims.add(group_by)
    if not dims:
        return Grain.ORG
    grains = {_DIM_GRAIN[d] for d in dims}
    if len(grains) == 1:
        grain: Grain = grains.pop()
        return grain
    if dims <= _TRAFFIC_DIMS:
        return Grain.TRAFFIC
    return Grain.FULL


def floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def rollup_rows(
    organization_id: int,
    start: datetime,
    end: datetime,
    filters: Filters | None,
    group_by: str | None = None,
) -> QuerySet[Rollup]:
    filters = _clean_filters(filters)
    grain = choose_grain(filters, group_by)
    lookups = {
        (f"{dim}__in" if isinstance(value, list | tuple | set | frozenset) else dim): value
        for dim, value in filters.items()
    }
    rows: QuerySet[Rollup] = Rollup.objects.filter(
        organization_id=organization_id,
        grain=grain,
        hour__gte=floor_hour(start),
        hour__lt=end,
        **lookups,
    ).order_by()
    return rows


def _dimension_match(dim: str, value: Any) -> Q:
    """The call records a rollup filter's value stands for: ``0`` is "none"
    for a sub-account or a node, a mode is whether the call streamed."""
    values = list(value) if isinstance(value, list | tuple | set | frozenset) else [value]
    match = Q(pk__in=[])
    for v in values:
        if dim == "mode":
            match |= Q(stream=v == "stream")
        elif dim in ("sub_account_id", "node_id") and v == 0:
            match |= Q(**{f"{dim}__isnull": True})
        else:
            match |= Q(**{dim: v})
    return match


def billed_calls(
    organization_id: int, start: datetime, end: datetime, filters: Filters | None
) -> QuerySet[CallRecord]:
    """The billed call records that ``rollup_rows`` of the same arguments sum
    up: started in the rollup hours ``[start, end)`` covers (``end`` rounded
    up to its hour)."""
    last = floor_hour(end)
    if last < end:
        last += HOUR
    calls: QuerySet[CallRecord] = CallRecord.objects.billed().filter(
        organization_id=organization_id, started_at__gte=floor_hour(start), started_at__lt=last
    )
    for dim, value in _clean_filters(filters).items():
        calls = calls.filter(_dimension_match(dim, value))
    return calls


def call_values(
    organization_id: int, start: datetime, end: datetime, filters: Filters | None
) -> tuple[list[int], list[int]]:
    """The latencies and TTFTs (us) of ``billed_calls``."""
    lats: list[int] = []
    ttfts: list[int] = []
    rows = billed_calls(organization_id, start, end, filters).values_list("latency_us", "ttft_us")
    for lat, ttft in rows.iterator():
        lats.append(lat)
        if ttft is not None:
            ttfts.append(ttft)
    return lats, ttfts


def latency_series(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: Filters | None = None,
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
) -> list[dict[str, Any]]:
    """One entry per hour from ``start`` to ``end`` (hours without calls too):
    ``{"hour", "calls", "latency_ms": {q: ms}, "ttft_ms": {q: ms}}``."""
    by_hour: dict[datetime, list[Any]] = defaultdict(lambda: [0, [], []])
    for hour, calls, lat, ttft in rollup_rows(organization_id, start, end, filters).values_list(
        "hour", "calls", "latency_hist", "ttft_hist"
    ):
        entry = by_hour[hour]
        entry[0] += calls
        entry[1].append(lat)
        entry[2].append(ttft)
    out = []
    hour = floor_hour(start)
    while hour < end:
        calls, lats, ttfts = by_hour.get(hour, (0, [], []))
        out.append(
            {
                "hour": hour,
                "calls": calls,
                "latency_ms": encoded_quantiles(lats, quantiles),
                "ttft_ms": encoded_quantiles(ttfts, quantiles),
            }
        )
        hour += HOUR
    return out


def percentiles(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: Filters | None = None,
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
) -> dict[str, Any]:
    """Percentiles over the whole range: ``{"calls", "latency_ms", "ttft_ms"}``;
    exact (nearest rank) from the call records while the range holds few
    calls, from the sketches above (``usage.percentiles``)."""
    calls = 0
    lats: list[bytes | None] = []
    ttfts: list[bytes | None] = []
    for n, lat, ttft in rollup_rows(organization_id, start, end, filters).values_list(
        "calls", "latency_hist", "ttft_hist"
    ):
        calls += n
        lats.append(lat)
        ttfts.append(ttft)
    values: list[tuple[list[int], list[int]]] = []

    def records() -> tuple[list[int], list[int]]:
        if not values:
            values.append(call_values(organization_id, start, end, filters))
        return values[0]

    return {
        "calls": calls,
        "latency_ms": percentiles_of(lats, quantiles, lambda: records()[0]),
        "ttft_ms": percentiles_of(ttfts, quantiles, lambda: records()[1]),
    }


def totals(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: Filters | None = None,
    group_by: str | None = None,
) -> dict[str, int] | list[dict[str, Any]]:
    """Every ``SUM_COLUMNS`` sum: calls (by status class: 2xx, 4xx including
    429, 429, 5xx), stream and cache-hit calls (response-cache hits also on
    their own), unpriced calls, tokens per class, cost (micro-units), latency,
    TTFT, queue, overhead and upstream time (us), and refusals by cause (rate
    limit, spend cap or balance, queue). One dict for ``group_by=None``;
    otherwise a list of dicts, each with the group's value under the
    ``group_by`` name (days are UTC)."""
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(str(g) for g in GROUP_BY)}")
    qs = rollup_rows(organization_id, start, end, filters, group_by)
    sums = {c: Sum(c) for c in SUM_COLUMNS}
    if group_by is None:
        row = qs.aggregate(**sums)
        return {c: row[c] or 0 for c in SUM_COLUMNS}
    if group_by == "day":
        qs = qs.annotate(day=TruncDay("hour", tzinfo=UTC))
    rows = qs.values(group_by).annotate(**sums).order_by(group_by)
    return [{group_by: r[group_by], **{c: r[c] or 0 for c in SUM_COLUMNS}} for r in rows]


def unserved_models(
    organization_id: int, start: datetime, end: datetime, *, among: Iterable[str] | None = None
) -> frozenset[str]:
    """Names called in the range that are no model: unknown to the catalogue,
    and no call to them was answered or used a token. That is what a call to
    a model that does not exist leaves (the gateway refuses it, 404
    ``model_not_found``, before any node sees it); the failed call still
    counts among the errors, but the name is not a model to price, chart or
    compare. A name a node did serve (an answer, or tokens) stays a model,
    catalogued or not, so it still asks for a price. ``among``: only these
    names are looked at (the ones a chart has; none outside the catalogue
    costs no read of the rollups)."""
    if among is not None:
        among = set(among)
        among -= set(CatalogModel.objects.filter(name__in=among).values_list("name", flat=True))
        if not among:
            return frozenset()
    rows = Rollup.objects.filter(
        organization_id=organization_id,
        grain=Grain.MODEL,
        hour__gte=floor_hour(start),
        hour__lt=end,
    )
    if among is not None:
        rows = rows.filter(model__in=among)
    rows = (
        rows.exclude(model__in=CatalogModel.objects.values("name"))
        .order_by()
        .values("model")
        .annotate(
            answered=Sum("calls_2xx"),
            tokens=Sum("input_tokens")
            + Sum("cache_read_tokens")
            + Sum("cache_write_tokens")
            + Sum("output_tokens"),
        )
    )
    return frozenset(r["model"] for r in rows if not r["answered"] and not r["tokens"])
