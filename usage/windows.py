"""What one model, node or organization's calls did over a recent window of
minutes (5 minutes to a day): calls, server errors and the p99 of latency and
time to first token, for the alert rules (``console.features.alerts``), read by beat,
never on the gateway's path.

The whole UTC hours inside the window come from the hourly rollups (their
counters and merged ``usage.sketch`` histograms); the partial hours at its
edges from the billed call records (``CallRecord.objects.billed()``: like
the rollups, no load-test call marked "not billed"), added to the same
histograms, so a five-minute window is five minutes of calls, not the hour
around them, and counts the same calls as a window of whole hours. A window
of fewer than ``usage.percentiles.EXACT_BELOW`` calls reads them all from the
records and its p99s are exact (nearest rank, ``usage.percentiles``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from usage.models import CallRecord, Grain, Rollup
from usage.percentiles import percentiles_of
from usage.sketch import LogHistogram, merge_encoded

_HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class WindowStats:
    calls: int
    errors: int  # answered 5xx
    latency_p99_ms: float | None
    ttft_p99_ms: float | None

    @property
    def error_percent(self) -> float:
        return 100.0 * self.errors / self.calls if self.calls else 0.0


def _floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil_hour(t: datetime) -> datetime:
    f = _floor_hour(t)
    return f if f == t else f + _HOUR


def _p99s(
    latency: LogHistogram, ttft: LogHistogram, window: QuerySet[CallRecord]
) -> tuple[float | None, float | None]:
    """The p99s of the window's histograms (``usage.percentiles``: exact from
    the ``window``'s call records when it holds few calls)."""
    values: list[tuple[list[int], list[int]]] = []

    def recorded(i: int) -> list[int]:
        if not values:
            rows = window.order_by().values_list("latency_us", "ttft_us")
            lats = [max(0, int(lat)) for lat, _t in rows]
            ttfts = [max(0, int(t)) for _lat, t in rows if t is not None]
            values.append((lats, ttfts))
        return values[0][i]

    lat = percentiles_of([latency.to_bytes()], (0.99,), lambda: recorded(0))
    first = percentiles_of([ttft.to_bytes()], (0.99,), lambda: recorded(1))
    return lat[0.99], first[0.99]


def window_stats(
    *,
    organization_id: int,
    start: datetime,
    end: datetime,
    model: str | None = None,
    node_id: int | None = None,
) -> WindowStats:
    """The calls of ``[start, end)`` of the organization, of one ``model`` or
    one ``node_id`` (not both), and their 5xx count and p99s."""
    if model and node_id:
        raise ValueError("a window is of one model or one node, not both")
    dims: dict[str, Any] = {}
    grain = Grain.ORG
    if model:
        dims, grain = {"model": model}, Grain.MODEL
    elif node_id:
        dims, grain = {"node_id": node_id}, Grain.NODE
    whole_from, whole_to = _ceil_hour(start), _floor_hour(end)
    calls = errors = 0
    lat_blobs: list[Any] = []
    ttft_blobs: list[Any] = []
    edges = Q(started_at__gte=start, started_at__lt=end)
    if whole_from < whole_to:
        rows = Rollup.objects.filter(
            organization_id=organization_id,
            grain=grain,
            hour__gte=whole_from,
            hour__lt=whole_to,
            **dims,
        ).order_by()
        for n, e, lat, ttft in rows.values_list("calls", "calls_5xx", "latency_hist", "ttft_hist"):
            calls += n
            errors += e
            lat_blobs.append(lat)
            ttft_blobs.append(ttft)
        edges = Q(started_at__gte=start, started_at__lt=whole_from) | Q(
            started_at__gte=whole_to, started_at__lt=end
        )
    latency = merge_encoded(lat_blobs)
    ttft = merge_encoded(ttft_blobs)
    records = (
        CallRecord.objects.billed()
        .filter(edges, organization_id=organization_id, **dims)
        .order_by()
    )
    for status, lat_us, ttft_us in records.values_list("status_code", "latency_us", "ttft_us"):
        calls += 1
        errors += status >= 500
        latency.add(max(0, int(lat_us)))
        if ttft_us is not None:
            ttft.add(max(0, int(ttft_us)))

    window = CallRecord.objects.billed().filter(
        organization_id=organization_id, started_at__gte=start, started_at__lt=end, **dims
    )
    return WindowStats(calls, errors, *_p99s(latency, ttft, window))


__all__ = ["WindowStats", "window_stats"]
