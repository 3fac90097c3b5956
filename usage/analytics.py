"""Usage analytics read from the hourly rollups only, never from call records,
so a month of one organization is at most a few thousand rows however many
calls it made. Latency percentiles come from merging the rows' histograms
(``usage.sketch``: within 1 % of the exact value).

``filters`` may hold ``sub_account_id``, ``api_key_id``, ``model`` and
``node_id`` (``None`` values are ignored; ``sub_account_id=0`` means keys
without a sub-account, ``node_id=0`` calls no node served). Hours are UTC;
``start`` is rounded down to its hour and ``end`` is exclusive.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db.models import Sum
from django.db.models.functions import TruncDay

from usage.ingest.aggregate import SUM_COLUMNS
from usage.models import Grain, Rollup
from usage.sketch import merge_encoded

DIMENSIONS = ("sub_account_id", "api_key_id", "model", "node_id")
_DIM_GRAIN = {
    "sub_account_id": Grain.SUB_ACCOUNT,
    "api_key_id": Grain.KEY,
    "model": Grain.MODEL,
    "node_id": Grain.NODE,
}
GROUP_BY = (None, "model", "api_key_id", "sub_account_id", "node_id", "hour", "day")
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
HOUR = timedelta(hours=1)


def _clean_filters(filters: dict | None) -> dict:
    filters = {k: v for k, v in (filters or {}).items() if v is not None and v != ""}
    unknown = set(filters) - set(DIMENSIONS)
    if unknown:
        raise ValueError(f"unknown filter(s): {', '.join(sorted(unknown))}")
    return filters


def choose_grain(filters: dict | None, group_by: str | None = None) -> Grain:
    """The narrowest grain whose rows answer these filters and this grouping:
    ORG for none, a dimension's own grain when only that dimension is
    involved, FULL for combinations."""
    dims = set(_clean_filters(filters))
    if group_by in _DIM_GRAIN:
        dims.add(group_by)
    if not dims:
        return Grain.ORG
    if len(dims) == 1:
        return _DIM_GRAIN[dims.pop()]
    return Grain.FULL


def _floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _rows(organization_id: int, start: datetime, end: datetime, filters, group_by=None):
    filters = _clean_filters(filters)
    grain = choose_grain(filters, group_by)
    return Rollup.objects.filter(
        organization_id=organization_id,
        grain=grain,
        hour__gte=_floor_hour(start),
        hour__lt=end,
        **filters,
    ).order_by()


def _to_ms(value: float | None) -> float | None:
    return None if value is None else value / 1000.0


def _quantiles(hist, quantiles) -> dict:
    return {q: _to_ms(hist.quantile(q)) for q in quantiles}


def latency_series(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: dict | None = None,
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
) -> list[dict]:
    """One entry per hour from ``start`` to ``end`` (hours without calls too):
    ``{"hour", "calls", "latency_ms": {q: ms}, "ttft_ms": {q: ms}}``."""
    by_hour: dict[datetime, list] = defaultdict(lambda: [0, [], []])
    for hour, calls, lat, ttft in _rows(organization_id, start, end, filters).values_list(
        "hour", "calls", "latency_hist", "ttft_hist"
    ):
        entry = by_hour[hour]
        entry[0] += calls
        entry[1].append(lat)
        entry[2].append(ttft)
    out = []
    hour = _floor_hour(start)
    while hour < end:
        calls, lats, ttfts = by_hour.get(hour, (0, [], []))
        out.append(
            {
                "hour": hour,
                "calls": calls,
                "latency_ms": _quantiles(merge_encoded(lats), quantiles),
                "ttft_ms": _quantiles(merge_encoded(ttfts), quantiles),
            }
        )
        hour += HOUR
    return out


def percentiles(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: dict | None = None,
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
) -> dict:
    """Percentiles over the whole range: ``{"calls", "latency_ms", "ttft_ms"}``."""
    calls = 0
    lats, ttfts = [], []
    for n, lat, ttft in _rows(organization_id, start, end, filters).values_list(
        "calls", "latency_hist", "ttft_hist"
    ):
        calls += n
        lats.append(lat)
        ttfts.append(ttft)
    return {
        "calls": calls,
        "latency_ms": _quantiles(merge_encoded(lats), quantiles),
        "ttft_ms": _quantiles(merge_encoded(ttfts), quantiles),
    }


def totals(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: dict | None = None,
    group_by: str | None = None,
) -> dict | list[dict]:
    """Sums of calls (by status class: 2xx, 4xx including 429, 429, 5xx),
    stream and cache-hit calls, unpriced calls, tokens per class and cost
    (micro-units). One dict for ``group_by=None``; otherwise a list of dicts,
    each with the group's value under the ``group_by`` name (days are UTC)."""
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(str(g) for g in GROUP_BY)}")
    qs = _rows(organization_id, start, end, filters, group_by)
    sums = {c: Sum(c) for c in SUM_COLUMNS}
    if group_by is None:
        row = qs.aggregate(**sums)
        return {c: row[c] or 0 for c in SUM_COLUMNS}
    if group_by == "day":
        qs = qs.annotate(day=TruncDay("hour", tzinfo=UTC))
    rows = qs.values(group_by).annotate(**sums).order_by(group_by)
    return [{group_by: r[group_by], **{c: r[c] or 0 for c in SUM_COLUMNS}} for r in rows]
