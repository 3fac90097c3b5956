"""Measured performance per model, from every organization's traffic: what the
marketplace and the public status page show.

Everything here is read from the hourly rollups (the MODEL grain, and the
FULL grain for the per-channel breakdown), summed and merged across
organizations: no figure is ever one organization's, and nothing returned
names an organization, a key or a sub-account.

The figures, over the rollup hours of a window (``24h``, ``7d``, ``30d``:
the hour now running and the whole hours before it, 24, 168 or 720 hours):

* calls: every billed call recorded for the model (the rollups hold no
  load-test call marked "not billed": a load test at its knee is not the
  model's performance);
* TTFT p50 / p99 and latency p50 / p99 / p99.9 (ms): ``usage.percentiles``:
  exact nearest-rank order statistics of the call records while the window
  holds fewer than ``EXACT_BELOW`` values, the merged sketches'
  (``usage.sketch``: within 1 % relative error) above;
* output tokens per second, p50: of the per-call ``output tokens ÷ generation
  time`` (latency less TTFT for a stream, the whole latency otherwise), over
  the 2xx calls with output tokens not answered from the response cache
  (``usage.ingest.aggregate.TPS_BINS``);
* prompt-cache hit share: cache-read tokens ÷ prompt tokens (input +
  cache-read + cache-write), as on the Cache page;
* availability: the share of calls not failed by the platform or upstream,
  ``1 - 5xx ÷ calls``. A 4xx (bad input, authentication, a rate limit, a
  spend cap, a full queue) is the caller's and does not count against it;
  a 5xx (an upstream error, no node, a queue timeout, a gateway error) does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from usage.margin import node_labels
from usage.models import CallRecord, Grain, Rollup
from usage.percentiles import EXACT_BELOW, percentiles_of
from usage.quantiles import encoded_quantiles

HOUR = timedelta(hours=1)
WINDOWS: dict[str, timedelta] = {
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
TTFT_QUANTILES = (0.5, 0.99)
LATENCY_QUANTILES = (0.5, 0.99, 0.999)

# Status page thresholds, on the share of calls not failed (``availability``).
DOWN_BELOW = 0.95
DEGRADED_BELOW = 0.995
STATUS_DAYS = 90
UP, DEGRADED, DOWN, NO_DATA = "up", "degraded", "down", "no_data"


def floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def window_start(window: str, now: datetime | None = None) -> datetime:
    """The first rollup hour of ``window`` ending now: the running hour counts."""
    return floor_hour(now or timezone.now()) - WINDOWS[window] + HOUR


@dataclass(frozen=True)
class Figures:
    calls: int
    failed_calls: int
    prompt_tokens: int
    cache_read_tokens: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    latency_p999_ms: float | None
    tokens_per_s_p50: float | None

    @property
    def availability(self) -> float | None:
        return (self.calls - self.failed_calls) / self.calls if self.calls else None

    @property
    def cache_hit_share(self) -> float | None:
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else None

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "availability": self.availability,
            "cache_hit_share": self.cache_hit_share,
        }


class _Acc:
    __slots__ = ("cache_read", "calls", "failed", "lat", "prompt", "tps", "ttft")

    def __init__(self) -> None:
        self.calls = self.failed = self.prompt = self.cache_read = 0
        self.lat: list[bytes | None] = []
        self.ttft: list[bytes | None] = []
        self.tps: list[bytes | None] = []

    def add(
        self,
        calls: int,
        failed: int,
        inp: int,
        cr: int,
        cw: int,
        lat: bytes | None,
        ttft: bytes | None,
        tps: bytes | None,
    ) -> None:
        self.calls += calls
        self.failed += failed
        self.prompt += inp + cr + cw
        self.cache_read += cr
        self.lat.append(lat)
        self.ttft.append(ttft)
        self.tps.append(tps)

    def figures(self, records: Callable[[], _Values]) -> Figures:
        """``records``: the window's (latency, TTFT) values (us) from the call
        records, read only when the window holds few calls."""
        ttft = percentiles_of(self.ttft, TTFT_QUANTILES, lambda: records()[1])
        lat = percentiles_of(self.lat, LATENCY_QUANTILES, lambda: records()[0])
        # The sketch holds thousandths of a token per second; ``encoded_quantiles``
        # divides by 1000 (it reads microseconds as ms), which gives tokens/s.
        tps = encoded_quantiles(self.tps, (0.5,))
        return Figures(
            calls=self.calls,
            failed_calls=self.failed,
            prompt_tokens=self.prompt,
            cache_read_tokens=self.cache_read,
            ttft_p50_ms=ttft[0.5],
            ttft_p99_ms=ttft[0.99],
            latency_p50_ms=lat[0.5],
            latency_p99_ms=lat[0.99],
            latency_p999_ms=lat[0.999],
            tokens_per_s_p50=tps[0.5],
        )


# One window's latencies and TTFTs (us) from the call records.
_Values = tuple[list[int], list[int]]


def _record_values(
    start: datetime, end: datetime, models: Sequence[str], node_id: int | None = None
) -> dict[str, _Values]:
    """The billed calls' latencies and TTFTs (us) per model, started in
    ``[start, end)`` (the rollup hours they are summed into); ``node_id``:
    one channel's only (0: answered by none)."""
    calls = CallRecord.objects.billed().filter(
        model__in=list(models), started_at__gte=start, started_at__lt=end
    )
    if node_id is not None:
        calls = calls.filter(node_id=node_id or None)
    out: dict[str, _Values] = {m: ([], []) for m in models}
    for model, lat, ttft in calls.values_list("model", "latency_us", "ttft_us").iterator():
        values = out[model]
        values[0].append(lat)
        if ttft is not None:
            values[1].append(ttft)
    return out


class _Records:
    """A window's call-record values per model, read once, on first need."""

    def __init__(self, load: Callable[[], dict[str, _Values]]) -> None:
        self._load = load
        self._values: dict[str, _Values] | None = None

    def of(self, model: str) -> Callable[[], _Values]:
        def values() -> _Values:
            if self._values is None:
                self._values = self._load()
            return self._values.get(model, ([], []))

        return values


_COLUMNS = (
    "calls",
    "calls_5xx",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "latency_hist",
    "ttft_hist",
    "tps_hist",
)


def model_performance(
    *, now: datetime | None = None, windows: tuple[str, ...] = tuple(WINDOWS)
) -> dict[str, dict[str, Figures]]:
    """``{window: {model: Figures}}`` for every model called in each window,
    across every organization. One read of the MODEL-grain rows of the
    longest window answers them all."""
    now = now or timezone.now()
    starts = {w: window_start(w, now) for w in windows}
    accs: dict[str, dict[str, _Acc]] = {w: defaultdict(_Acc) for w in windows}
    rows = Rollup.objects.filter(
        grain=Grain.MODEL, hour__gte=min(starts.values()), hour__lte=floor_hour(now)
    ).values_list("hour", "model", *_COLUMNS)
    for hour, model, *values in rows.iterator(chunk_size=2000):
        for w, start in starts.items():
            if hour >= start:
                accs[w][model].add(*values)
    end = floor_hour(now) + HOUR
    out: dict[str, dict[str, Figures]] = {}
    for w, by in accs.items():
        few = [m for m, a in by.items() if a.calls < EXACT_BELOW]
        records = _Records(partial(_record_values, starts[w], end, few))
        out[w] = {m: a.figures(records.of(m)) for m, a in sorted(by.items())}
    return out


@dataclass(frozen=True)
class ChannelFigures:
    node_id: int
    label: str
    figures: Figures


def channel_performance(
    model: str, window: str, *, now: datetime | None = None
) -> list[ChannelFigures]:
    """One model's figures per channel or node (0: answered by no upstream),
    across every organization, busiest first. Platform staff only: it names
    the channels. Read from the FULL grain (the one that keeps model and node)."""
    now = now or timezone.now()
    accs: dict[int, _Acc] = defaultdict(_Acc)
    rows = Rollup.objects.filter(
        grain=Grain.FULL,
        model=model,
        hour__gte=window_start(window, now),
        hour__lte=floor_hour(now),
    ).values_list("node_id", *_COLUMNS)
    for node_id, *values in rows.iterator(chunk_size=2000):
        accs[node_id].add(*values)
    labels = node_labels(list(accs))
    start, end = window_start(window, now), floor_hour(now) + HOUR
    out = [
        ChannelFigures(
            n,
            labels[n],
            acc.figures(_Records(partial(_record_values, start, end, [model], n)).of(model)),
        )
        for n, acc in accs.items()
    ]
    out.sort(key=lambda c: (-c.figures.calls, c.label))
    return out


def state_of(calls: int, failed: int) -> str:
    """``up``, ``degraded``, ``down`` or ``no_data`` for a stretch of calls."""
    if not calls:
        return NO_DATA
    availability = (calls - failed) / calls
    if availability < DOWN_BELOW:
        return DOWN
    if availability < DEGRADED_BELOW:
        return DEGRADED
    return UP


@dataclass(frozen=True)
class DayState:
    day: date
    calls: int
    failed_calls: int
    state: str


@dataclass(frozen=True)
class ModelStatus:
    model: str
    current: str  # the last hour: this hour and the one before
    days: list[DayState]  # oldest first, today last


def daily_status(
    models: list[str], *, now: datetime | None = None, days: int = STATUS_DAYS
) -> list[ModelStatus]:
    """Each model's state per UTC day over the last ``days`` days (today
    included) and now, across every organization."""
    now = now or timezone.now()
    today = now.astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    current_from = floor_hour(now) - HOUR
    rows = (
        Rollup.objects.filter(grain=Grain.MODEL, model__in=models, hour__gte=start)
        .values("model", "hour")
        .annotate(n=Sum("calls"), failed=Sum("calls_5xx"))
        .order_by()
    )
    per_day: dict[tuple[str, date], list[int]] = defaultdict(lambda: [0, 0])
    recent: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        hour = r["hour"].astimezone(UTC)
        acc = per_day[(r["model"], hour.date())]
        acc[0] += r["n"] or 0
        acc[1] += r["failed"] or 0
        if current_from <= hour <= now:
            acc = recent[r["model"]]
            acc[0] += r["n"] or 0
            acc[1] += r["failed"] or 0
    out = []
    for model in models:
        day_states = []
        for i in range(days):
            d = first + timedelta(days=i)
            calls, failed = per_day.get((model, d), (0, 0))
            day_states.append(DayState(d, calls, failed, state_of(calls, failed)))
        out.append(ModelStatus(model, state_of(*recent.get(model, (0, 0))), day_states))
    return out
