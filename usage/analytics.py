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

import sys
from array import array
from bisect import bisect_right
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from itertools import accumulate

from django.db.models import Sum
from django.db.models.functions import TruncDay

from usage.ingest.aggregate import SUM_COLUMNS
from usage.models import Grain, Rollup
from usage.sketch import _HEADER, bucket_value, merge_encoded

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


def encoded_quantiles(encoded: list, quantiles) -> dict:
    """Quantiles (ms) of the merge of these encoded histograms, with the same
    rank rule as ``LogHistogram.quantile``. One cumulative pass answers every
    quantile, and a single row (the usual case: one row per hour of a grain)
    is read straight from its dense counts without building a dict."""
    blobs = [bytes(b) for b in encoded if b]
    if not blobs:
        return dict.fromkeys(quantiles)
    if len(blobs) == 1:
        b = blobs[0]
        lo, zero = _HEADER.unpack_from(b, 1)
        counts = array(chr(b[0]))
        counts.frombytes(b[1 + _HEADER.size :])
        if sys.byteorder == "big":
            counts.byteswap()
    else:
        hist = merge_encoded(blobs)
        zero, bins = hist.zero_count, hist.bins
        lo = min(bins) if bins else 0
        counts = [bins.get(k, 0) for k in range(lo, max(bins) + 1)] if bins else []
    cumulative = list(accumulate(counts, initial=zero))
    total = cumulative[-1]
    out = {}
    for q in quantiles:
        if not 0.0 <= q <= 1.0:
            raise ValueError("quantile must be between 0 and 1")
        if total == 0:
            out[q] = None
            continue
        rank = q * (total - 1)
        if zero > rank:
            out[q] = 0.0
            continue
        i = bisect_right(cumulative, rank, 1)
        if i >= len(cumulative):  # float rounding at q == 1: the last non-empty bucket
            i = max(j for j, c in enumerate(counts, 1) if c)
        out[q] = bucket_value(lo + i - 1) / 1000.0
    return out


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
        "latency_ms": encoded_quantiles(lats, quantiles),
        "ttft_ms": encoded_quantiles(ttfts, quantiles),
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
