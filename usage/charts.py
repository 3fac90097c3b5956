"""Series for the console's charts, read from the hourly rollups as
``usage.analytics`` reads them (the same ``filters``, grains and hours).

``series`` is the general read behind the charts: sums (every column of
``usage.ingest.aggregate.SUM_COLUMNS``, so the time, cache and refusal
breakdowns too) and percentiles per time bucket (an hour, a day in the
organization's time zone, or the whole range), optionally one series per
model, key, sub-account or node. A series holding fewer than
``usage.percentiles.EXACT_BELOW`` calls reads their records too, and its
percentiles are exact (nearest rank); a larger one's come from the sketches.
``cache_savings`` prices the cache-read tokens of the same rows with the one
rating function.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, QuerySet, Sum
from django.db.models.functions import Cast, Extract, TruncDay

from usage.analytics import HOUR, Filters, billed_calls, floor_hour, rollup_rows
from usage.ingest.aggregate import SUM_COLUMNS
from usage.models import Rollup
from usage.percentiles import EXACT_BELOW, percentiles_of
from usage.prices import get_price_book
from usage.rating import discount_for, rate

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
    groups: dict[Any, list[dict[str, Any]]] = field(default_factory=dict)
    whole: dict[Any, dict[str, Any]] = field(default_factory=dict)

    def total(self, column: str) -> int:
        return sum(int(p[column]) for points in self.groups.values() for p in points)


def bucket_starts(
    start: datetime, end: datetime, bucket: str | None, tz: tzinfo = UTC
) -> list[datetime]:
    """Starts of the buckets covering ``[start, end)``: UTC hours, local
    days (``tz``; a day is 23 or 25 hours at a DST change), or one bucket."""
    first = floor_hour(start)
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


def _hour_key(
    qs: QuerySet[Rollup],
) -> tuple[QuerySet[Rollup], str, Callable[[datetime], datetime | int]]:
    """The query with the hour to read, and how to key an aware hour the same
    way: POSIX seconds on PostgreSQL (parsing a month of hours per group as
    timestamps costs more than merging their histograms), else the datetime."""
    if connection.vendor == "postgresql":
        epoch = Cast(Extract("hour", "epoch", tzinfo=UTC), BigIntegerField())
        return qs.annotate(hour_s=epoch), "hour_s", lambda t: int(t.timestamp())
    return qs, "hour", lambda t: t


def _plain_rows(qs: QuerySet[Rollup]) -> Iterable[tuple[Any, ...]]:
    """The rows of a ``values_list`` query. On PostgreSQL they are read with a
    plain cursor, without Django's per-row converters: a month of histogram
    rows is thousands, and converting each cell cost more than merging the
    histograms. Its columns must need no conversion (integers, text, bytea:
    psycopg gives ``bytes``); elsewhere the query is run as it is."""
    if connection.vendor != "postgresql":
        as_is: Iterable[tuple[Any, ...]] = qs
        return as_is
    sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows: list[tuple[Any, ...]] = cur.fetchall()
        return rows


def _hour_index(
    start: datetime, end: datetime, bucket: str | None, tz: tzinfo
) -> dict[datetime, int]:
    """Each UTC hour of the range to its bucket's position."""
    starts = bucket_starts(start, end, bucket, tz)
    out: dict[datetime, int] = {}
    hour, i = floor_hour(start), 0
    while hour < end:
        while i + 1 < len(starts) and starts[i + 1] <= hour:
            i += 1
        out[hour] = i
        hour += HOUR
    return out


# A bucket's cell of one group: its sums, then one list of histogram blobs per
# histogram asked for; keyed by (group value, bucket position).
_Cells = dict[tuple[Any, int], list[list[Any]]]
# A cell's latencies and TTFTs (us) from the call records, by the same key.
_Values = tuple[list[int], list[int]]
_Exact = dict[tuple[Any, int], _Values]
_NONE: _Values = ([], [])


def _summed_cells(
    qs: QuerySet[Rollup],
    starts: list[datetime],
    bucket: str | None,
    tz: tzinfo,
    group_col: list[str],
    sum_cols: tuple[str, ...],
    n_hists: int,
) -> _Cells:
    """The sums of each bucket and group, added up by the database."""
    cells: _Cells = {}
    summed = {c: Sum(c) for c in sum_cols}
    sum_qs = qs
    index: dict[Any, int] = {}
    time_col: list[str] = []
    if bucket == "hour":
        index = {t.astimezone(UTC): i for i, t in enumerate(starts)}
        time_col = ["hour"]
    elif bucket == "day":
        index = {t.date(): i for i, t in enumerate(starts)}
        sum_qs = qs.annotate(bucket_day=TruncDay("hour", tzinfo=tz))
        time_col = ["bucket_day"]
    rows = (
        sum_qs.values_list(*time_col, *group_col)
        .annotate(**summed)
        .values_list(*time_col, *group_col, *sum_cols)
    )
    for row in rows:
        i: int | None
        if bucket is None:
            i = 0
        elif bucket == "day":
            i = index.get(row[0].astimezone(tz).date())
        else:
            i = index.get(row[0])
        if i is None:
            continue
        group = row[len(time_col)] if group_col else None
        vals = [v or 0 for v in row[len(time_col) + len(group_col) :]]
        acc = cells.get((group, i))
        if acc is None:
            cells[(group, i)] = [vals, *([] for _ in range(n_hists))]
        else:
            acc[0] = list(map(int.__add__, acc[0], vals))
    return cells


def _add_histograms(
    cells: _Cells,
    qs: QuerySet[Rollup],
    hour_index: dict[datetime, int],
    group_col: list[str],
    wanted: list[str],
) -> None:
    """Read just the histograms asked for, into the cells of their buckets."""
    qs, hour_col, key = _hour_key(qs)
    by_key = {key(h): i for h, i in hour_index.items()}
    columns = [hour_col, *group_col, *(f"{h}_hist" for h in wanted)]
    first_hist = 1 + len(group_col)
    for row in _plain_rows(qs.values_list(*columns)):
        pos = by_key.get(row[0])
        acc = cells.get((row[1] if group_col else None, pos)) if pos is not None else None
        if acc is None:
            continue
        for j in range(len(wanted)):
            blob = row[first_hist + j]
            if blob:
                acc[1 + j].append(bytes(blob))


def _exact_values(
    organization_id: int,
    start: datetime,
    end: datetime,
    filters: Filters | None,
    group_by: str | None,
    hour_index: dict[datetime, int],
) -> _Exact:
    """Each cell's latencies and TTFTs from the call records (a series of
    few calls: ``usage.percentiles`` reads them exactly)."""
    out: _Exact = defaultdict(lambda: ([], []))
    cols = [*([group_by] if group_by else []), "started_at", "latency_us", "ttft_us"]
    for row in billed_calls(organization_id, start, end, filters).values_list(*cols).iterator():
        group = (row[0] or 0) if group_by else None
        i = hour_index.get(floor_hour(row[-3]))
        if i is None:
            continue
        values = out[(group, i)]
        values[0].append(row[-2])
        if row[-1] is not None:
            values[1].append(row[-1])
    return out


def _given(values: list[int]) -> Callable[[], list[int]]:
    return lambda: values


def _point(
    start: datetime,
    sum_cols: tuple[str, ...],
    sums: list[int],
    wanted: list[str],
    blobs: list[list[bytes]],
    quantiles: tuple[float, ...] | None,
    values: _Values = _NONE,
) -> dict[str, Any]:
    """A bucket's sums and percentiles (exact from ``values`` when the
    bucket holds few calls and ``values`` holds them all, else the sketches')."""
    point: dict[str, Any] = {"start": start, **dict(zip(sum_cols, sums, strict=True))}
    for j, h in enumerate(wanted):
        measured = values[0] if h == "latency" else values[1]
        point[f"{h}_ms"] = percentiles_of(blobs[j], quantiles or (), _given(measured))
    return point


def _assembled(
    cells: _Cells,
    starts: list[datetime],
    *,
    grouped: bool,
    sum_cols: tuple[str, ...],
    wanted: list[str],
    quantiles: tuple[float, ...] | None,
    whole: bool,
    exact: _Exact | None = None,
) -> Series:
    """The cells as one series per group, busiest first (and each group's
    whole range when asked)."""
    busy: dict[Any, int] = defaultdict(int)
    for (group, _i), cell in cells.items():
        busy[group] += cell[0][0]
    if not grouped:
        busy.setdefault(None, 0)
    exact = exact or {}
    out = Series(buckets=starts)
    empty = [0] * len(sum_cols)
    no_blobs: list[list[bytes]] = [[] for _ in wanted]
    for group in sorted(busy, key=lambda g: (-busy[g], str(g))):
        points = []
        for i, t in enumerate(starts):
            acc = cells.get((group, i))
            points.append(
                _point(t, sum_cols, acc[0] if acc else empty, wanted,
                       acc[1:] if acc else no_blobs, quantiles, exact.get((group, i), _NONE))
            )  # fmt: skip
        out.groups[group] = points
        if whole:
            accs = [acc for i in range(len(starts)) if (acc := cells.get((group, i)))]
            added = [sum(col) for col in zip(*(acc[0] for acc in accs), strict=True)] or empty
            blobs = [[b for acc in accs for b in acc[1 + j]] for j in range(len(wanted))]
            mine = [exact.get((group, i), _NONE) for i in range(len(starts))]
            values = ([v for m in mine for v in m[0]], [v for m in mine for v in m[1]])
            out.whole[group] = _point(starts[0], sum_cols, added, wanted, blobs, quantiles, values)
    return out


def series(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    filters: Filters | None = None,
    group_by: str | None = None,
    bucket: str | None = "hour",
    tz: tzinfo = UTC,
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
    qs = rollup_rows(organization_id, start, end, filters, group_by)
    group_col = [group_by] if group_by else []
    wanted: list[str] = [h for h in ("latency", "ttft") if h in hists] if quantiles else []
    cells = _summed_cells(qs, starts, bucket, tz, group_col, sum_cols, len(wanted))
    # The histograms, each bucket's merged once in Python; a series of few
    # calls also reads their records, for exact percentiles.
    exact: _Exact = {}
    if wanted:
        hour_index = _hour_index(start, end, bucket, tz)
        _add_histograms(cells, qs, hour_index, group_col, wanted)
        if 0 < sum(cell[0][0] for cell in cells.values()) < EXACT_BELOW:
            exact = _exact_values(organization_id, start, end, filters, group_by, hour_index)
    return _assembled(
        cells, starts, grouped=bool(group_by), sum_cols=sum_cols, wanted=wanted,
        quantiles=quantiles, whole=whole, exact=exact,
    )  # fmt: skip


def cache_savings(
    organization_id: int,
    start: datetime,
    end: datetime,
    *,
    discount_ppm: int,
    filters: Filters | None = None,
    bucket: str | None = "hour",
    tz: tzinfo = UTC,
) -> dict[str, list[dict[str, Any]]]:
    """What cache-read tokens saved against paying the input price for them,
    per model and bucket, in micro-units: for each model and hour, the price
    row in effect then (``usage.prices``, a negotiated one first) rated with
    ``usage.rating.rate`` for the tokens as input minus as cache reads.
    ``{model: [{"start", "cache_read_tokens", "saved", "unpriced_tokens"}]}``."""

    book = get_price_book()
    starts = bucket_starts(start, end, bucket, tz)
    index = _hour_index(start, end, bucket, tz)
    out: dict[str, list[dict[str, Any]]] = {}
    rows = (
        rollup_rows(organization_id, start, end, filters, "model")
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
