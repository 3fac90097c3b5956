"""Usage analytics read from the hourly rollups only, never from call records,
so a month of one organization is at most a few thousand rows however many
calls it made. Latency percentiles come from merging the rows' histograms
(``usage.sketch``: within 1 % of the exact value).

``filters`` may hold ``sub_account_id``, ``api_key_id``, ``model`` and
``node_id`` (``None`` values are ignored; ``sub_account_id=0`` means keys
without a sub-account, ``node_id=0`` calls no node served). A value may also
be a list, tuple or set, meaning any of them (a developer's own keys, say; an
empty one matches nothing). Hours are UTC; ``start`` is rounded down to its
hour and ``end`` is exclusive.

``series`` is the general read behind the console's charts: sums (every
column of ``usage.ingest.aggregate.SUM_COLUMNS``, so the time, cache and
refusal breakdowns too) and percentiles per time bucket (an hour, a day in
the organization's time zone, or the whole range), optionally one series per
model, key, sub-account or node. ``cache_savings`` prices the cache-read
tokens of the same rows with the one rating function.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from itertools import accumulate

from django.db import connection
from django.db.models import BigIntegerField, Sum
from django.db.models.functions import Cast, Extract, TruncDay

from usage.ingest.aggregate import SUM_COLUMNS
from usage.models import CatalogModel, Grain, Rollup
from usage.prices import get_price_book
from usage.rating import discount_for, rate
from usage.sketch import _HEADER, bucket_value, merge_encoded

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


def _clean_filters(filters: dict | None) -> dict:
    filters = {k: v for k, v in (filters or {}).items() if v is not None and v != ""}
    unknown = set(filters) - set(DIMENSIONS)
    if unknown:
        raise ValueError(f"unknown filter(s): {', '.join(sorted(unknown))}")
    return filters


def choose_grain(filters: dict | None, group_by: str | None = None) -> Grain:
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
        return grains.pop()
    if dims <= _TRAFFIC_DIMS:
        return Grain.TRAFFIC
    return Grain.FULL


def _floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _rows(organization_id: int, start: datetime, end: datetime, filters, group_by=None):
    filters = _clean_filters(filters)
    grain = choose_grain(filters, group_by)
    lookups = {
        (f"{dim}__in" if isinstance(value, list | tuple | set | frozenset) else dim): value
        for dim, value in filters.items()
    }
    return Rollup.objects.filter(
        organization_id=organization_id,
        grain=grain,
        hour__gte=_floor_hour(start),
        hour__lt=end,
        **lookups,
    ).order_by()


_BODY = 1 + _HEADER.size
_ITEMSIZE = {ord(code): array(code).itemsize for code in "BHIQ"}
_LIMIT = {ord(code): 256 ** array(code).itemsize - 1 for code in "BHIQ"}
# Array types wide enough for a merged count, narrowest first: (code, width, limit).
_FIELDS = tuple((c, array(c).itemsize, 256 ** array(c).itemsize - 1) for c in "BHIQ")


def _dense(blob: bytes) -> tuple[int, int, array]:
    lo, zero = _HEADER.unpack_from(blob, 1)
    counts = array(chr(blob[0]))
    counts.frombytes(blob[1 + _HEADER.size :])
    if sys.byteorder == "big":
        counts.byteswap()
    return lo, zero, counts


def _merged_dense(blobs: list[bytes]) -> tuple[int, int, array | list]:
    """The dense counts of the merge of several encodings. Each one's counts
    are spread into fixed-width fields of one big integer (strided byte
    copies), added up per first bucket, then shifted into place and added:
    the additions of every bucket happen in C, with no per-bucket Python
    loop. The fields are as narrow as the largest possible sum allows (the
    sum of each encoding's array type limit), so none can overflow."""
    bound = sum(_LIMIT[b[0]] for b in blobs)
    fitting = [(c, w) for c, w, limit in _FIELDS if bound <= limit]
    if not fitting:  # counts near 2**64: add them up as Python integers
        return _merged_slowly(blobs)
    code, width = fitting[0]
    bits = 8 * width
    zero = 0
    lo_min = hi_max = None
    by_lo: dict[int, int] = {}  # encodings starting at the same bucket, added unshifted
    get = by_lo.get
    unpack = _HEADER.unpack_from
    for b in blobs:
        lo, z = unpack(b, 1)
        zero += z
        size = _ITEMSIZE[b[0]]
        n = (len(b) - _BODY) // size
        if not n:
            continue
        if lo_min is None or lo < lo_min:
            lo_min = lo
        if hi_max is None or lo + n > hi_max:
            hi_max = lo + n
        data = memoryview(b)[_BODY:]
        if size == width:
            field = data
        else:
            field = bytearray(width * n)
            for k in range(size):
                # Encodings are little-endian: byte k of a count goes to byte k of its field.
                field[k::width] = data[k::size]
        by_lo[lo] = get(lo, 0) + int.from_bytes(field, "little")
    if lo_min is None:
        return 0, zero, array(code)
    total = 0
    for lo, part in by_lo.items():
        total += part << (bits * (lo - lo_min))
    counts = array(code)
    counts.frombytes(total.to_bytes(width * (hi_max - lo_min), "little"))
    if sys.byteorder == "big":
        counts.byteswap()
    return lo_min, zero, counts


def _merged_slowly(blobs: list[bytes]) -> tuple[int, int, list[int]]:
    hist = merge_encoded(blobs)
    lo = min(hist.bins) if hist.bins else 0
    hi = max(hist.bins) + 1 if hist.bins else 0
    return lo, hist.zero_count, [hist.bins.get(k, 0) for k in range(lo, hi)]


def encoded_quantiles(encoded: list, quantiles) -> dict:
    """Quantiles (ms) of the merge of these encoded histograms, with the same
    rank rule as ``LogHistogram.quantile``. One cumulative pass answers every
    quantile, and a single row (the usual case: one row per hour of a grain)
    is read straight from its dense counts without building a dict."""
    blobs = [bytes(b) for b in encoded if b]
    if not blobs:
        return dict.fromkeys(quantiles)
    if len(blobs) == 1:
        lo, zero, counts = _dense(blobs[0])
    else:
        lo, zero, counts = _merged_dense(blobs)
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
    """Every ``SUM_COLUMNS`` sum: calls (by status class: 2xx, 4xx including
    429, 429, 5xx), stream and cache-hit calls (response-cache hits also on
    their own), unpriced calls, tokens per class, cost (micro-units), latency,
    TTFT, queue, overhead and upstream time (us), and refusals by cause (rate
    limit, spend cap or balance, queue). One dict for ``group_by=None``;
    otherwise a list of dicts, each with the group's value under the
    ``group_by`` name (days are UTC)."""
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


def unserved_models(
    organization_id: int, start: datetime, end: datetime, *, among=None
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
        among = set(among) - set(
            CatalogModel.objects.filter(name__in=among).values_list("name", flat=True)
        )
        if not among:
            return frozenset()
    rows = Rollup.objects.filter(
        organization_id=organization_id,
        grain=Grain.MODEL,
        hour__gte=_floor_hour(start),
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


# --- series for charts -------------------------------------------------------

SERIES_GROUP_BY = (None, "model", "api_key_id", "sub_account_id", "node_id")
BUCKETS = ("hour", "day", None)


@dataclass
class Series:
    """Per-bucket sums (and percentiles when asked for) of one range.

    ``buckets`` are the buckets' starts (aware, in the time zone asked for;
    the first one may start before ``start`` for days); ``groups`` maps each
    group value (``None`` without grouping) to one dict per bucket with every
    ``SUM_COLUMNS`` sum and, with quantiles, ``latency_ms`` and ``ttft_ms``.
    Groups are ordered by their calls, busiest first. With ``whole=True``,
    ``whole`` maps each group to one such dict for the whole range (its
    percentiles merged from the same histograms: no second read)."""

    buckets: list[datetime]
    groups: dict = field(default_factory=dict)
    whole: dict = field(default_factory=dict)

    def total(self, column: str) -> int:
        return sum(p[column] for points in self.groups.values() for p in points)


def bucket_starts(start: datetime, end: datetime, bucket: str | None, tz=UTC) -> list[datetime]:
    """Starts of the buckets covering ``[start, end)``: UTC hours, local
    days (``tz``; a day is 23 or 25 hours at a DST change), or one bucket."""
    first = _floor_hour(start)
    if bucket is None:
        return [first.astimezone(tz)]
    if bucket == "hour":
        out, hour = [], first
        while hour < end:
            out.append(hour.astimezone(tz))
            hour += HOUR
        return out
    if bucket == "day":
        day = first.astimezone(tz).date()
        last = (end - timedelta(microseconds=1)).astimezone(tz).date()
        out = []
        while day <= last:
            out.append(datetime.combine(day, time.min, tzinfo=tz))
            day += timedelta(days=1)
        return out
    raise ValueError(f"bucket must be one of {', '.join(str(b) for b in BUCKETS)}")


def _hour_key(qs):
    """The query with the hour to read, and how to key an aware hour the same
    way: POSIX seconds on PostgreSQL (parsing a month of hours per group as
    timestamps costs more than merging their histograms), else the datetime."""
    if connection.vendor == "postgresql":
        epoch = Cast(Extract("hour", "epoch", tzinfo=UTC), BigIntegerField())
        return qs.annotate(hour_s=epoch), "hour_s", lambda t: int(t.timestamp())
    return qs, "hour", lambda t: t


def _plain_rows(qs):
    """The rows of a ``values_list`` query. On PostgreSQL they are read with a
    plain cursor, without Django's per-row converters: a month of histogram
    rows is thousands, and converting each cell cost more than merging the
    histograms. Its columns must need no conversion (integers, text, bytea:
    psycopg gives ``bytes``); elsewhere the query is run as it is."""
    if connection.vendor != "postgresql":
        return qs
    sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _hour_index(start: datetime, end: datetime, bucket: str | None, tz) -> dict[datetime, int]:
    """Each UTC hour of the range to its bucket's position."""
    starts = bucket_starts(start, end, bucket, tz)
    out = {}
    hour, i = _floor_hour(start), 0
    while hour < end:
        while i + 1 < len(starts) and starts[i + 1] <= hour:
            i += 1
        out[hour] = i
        hour += HOUR
    return out


def series(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: dict | None = None,
    group_by: str | None = None,
    bucket: str | None = "hour",
    tz=UTC,
    quantiles: tuple[float, ...] | None = None,
    hists: tuple[str, ...] = ("latency", "ttft"),
    whole: bool = False,
    sums: tuple[str, ...] = SUM_COLUMNS,
) -> Series:
    """Sums (and, with ``quantiles``, percentiles of the ``hists`` asked
    for: ``latency_ms``, ``ttft_ms``) per bucket and group, read from the
    narrowest grain that answers the filters and the grouping: the database
    adds the sums up per bucket and group; with quantiles a second query
    reads just the histograms, and each bucket's are merged once."""
    if group_by not in SERIES_GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(str(g) for g in SERIES_GROUP_BY)}")
    starts = bucket_starts(start, end, bucket, tz)
    # Only the sums asked for (a percentile chart needs its counts, not the
    # two dozen others): the database adds up fewer columns.
    if unknown := set(sums) - set(SUM_COLUMNS):
        raise ValueError(f"not a sum: {', '.join(sorted(unknown))}")
    sum_cols = ("calls", *(c for c in sums if c != "calls"))  # calls first: groups rank by it
    n_sums = len(sum_cols)
    qs = _rows(organization_id, start, end, filters, group_by)
    group_col = [group_by] if group_by else []
    wanted = [h for h in ("latency", "ttft") if h in hists] if quantiles else []
    # The sums, added up by the database per bucket and group.
    cells: dict = {}
    summed = {c: Sum(c) for c in sum_cols}
    sum_qs = qs
    if bucket == "hour":
        index = {t.astimezone(UTC): i for i, t in enumerate(starts)}
        time_col = ["hour"]
    elif bucket == "day":
        index = {t.date(): i for i, t in enumerate(starts)}
        sum_qs = qs.annotate(bucket_day=TruncDay("hour", tzinfo=tz))
        time_col = ["bucket_day"]
    else:
        index, time_col = None, []
    rows = (
        sum_qs.values_list(*time_col, *group_col)
        .annotate(**summed)
        .values_list(*time_col, *group_col, *sum_cols)
    )
    for row in rows:
        if bucket is None:
            i = 0
        elif bucket == "day":
            i = index.get(row[0].astimezone(tz).date())
        else:
            i = index.get(row[0])
        if i is None:
            continue
        group = row[len(time_col)] if group_by else None
        vals = [v or 0 for v in row[len(time_col) + len(group_col) :]]
        acc = cells.get((group, i))
        if acc is None:
            cells[(group, i)] = [vals, *([] for _ in wanted)]
        else:
            acc[0] = list(map(int.__add__, acc[0], vals))
    # The histograms, each bucket's merged once in Python.
    if wanted:
        qs, hour_col, key = _hour_key(qs)
        hour_index = {key(h): i for h, i in _hour_index(start, end, bucket, tz).items()}
        columns = [hour_col, *group_col, *(f"{h}_hist" for h in wanted)]
        first_hist = 1 + len(group_col)
        for row in _plain_rows(qs.values_list(*columns)):
            acc = cells.get((row[1] if group_by else None, hour_index.get(row[0])))
            if acc is None:
                continue
            for j in range(len(wanted)):
                blob = row[first_hist + j]
                if blob:
                    acc[1 + j].append(bytes(blob))
    busy: dict = defaultdict(int)
    for (group, _i), acc in cells.items():
        busy[group] += acc[0][0]
    if group_by is None:
        busy.setdefault(None, 0)
    out = Series(buckets=starts)
    empty = [0] * n_sums
    for group in sorted(busy, key=lambda g: (-busy[g], str(g))):
        points = []
        for i, t in enumerate(starts):
            acc = cells.get((group, i))
            point = {"start": t, **dict(zip(sum_cols, acc[0] if acc else empty, strict=True))}
            for j, h in enumerate(wanted):
                point[f"{h}_ms"] = encoded_quantiles(acc[1 + j] if acc else [], quantiles)
            points.append(point)
        out.groups[group] = points
        if whole:
            accs = [acc for i in range(len(starts)) if (acc := cells.get((group, i)))]
            added = [sum(col) for col in zip(*(acc[0] for acc in accs), strict=True)] or empty
            point = {"start": starts[0], **dict(zip(sum_cols, added, strict=True))}
            for j, h in enumerate(wanted):
                blobs = [b for acc in accs for b in acc[1 + j]]
                point[f"{h}_ms"] = encoded_quantiles(blobs, quantiles)
            out.whole[group] = point
    return out


def cache_savings(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    discount_ppm: int,
    filters: dict | None = None,
    bucket: str | None = "hour",
    tz=UTC,
) -> dict[str, list[dict]]:
    """What cache-read tokens saved against paying the input price for them,
    per model and bucket, in micro-units: for each model and hour, the price
    row in effect then (``usage.prices``, a negotiated one first) rated with
    ``usage.rating.rate`` for the tokens as input minus as cache reads.
    ``{model: [{"start", "cache_read_tokens", "saved", "unpriced_tokens"}]}``."""

    book = get_price_book()
    starts = bucket_starts(start, end, bucket, tz)
    index = _hour_index(start, end, bucket, tz)
    out: dict[str, list[dict]] = {}
    rows = (
        _rows(organization_id, start, end, filters, "model")
        .filter(cache_read_tokens__gt=0)
        .values_list("hour", "model", "currency")
        .annotate(tokens=Sum("cache_read_tokens"))
    )
    for hour, model, currency, tokens in rows:
        i = index.get(hour)
        if i is None:
            continue
        points = out.get(model)
        if points is None:
            points = out[model] = [
                {"start": t, "cache_read_tokens": 0, "saved": 0, "unpriced_tokens": 0}
                for t in starts
            ]
        point = points[i]
        point["cache_read_tokens"] += tokens
        price = book.price_for(model, currency, organization_id, hour)
        if price is None:
            point["unpriced_tokens"] += tokens
            continue
        disc = discount_for(price, discount_ppm)
        as_input = rate((tokens, 0, 0, 0), price, disc)
        point["saved"] += as_input - rate((0, tokens, 0, 0), price, disc)
    return dict(sorted(out.items(), key=lambda kv: -sum(p["saved"] for p in kv[1])))
