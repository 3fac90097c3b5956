"""The gateway's own Prometheus metrics, kept as plain counters in process
(no client library: an increment is one dict operation on the hot path) and
rendered as Prometheus text on ``GET /metrics``.

A host runs several gateway processes (``uvicorn --workers N``); a scrape
reaches one of them but must show them all. Each process turns its counters
into a ``snapshot()`` (a JSON-able dict) that ``gateway_bridge.metrics_dir``
writes to a directory the processes share, every second and before each
scrape; the scraped process ``merge()``s every live process's snapshot with
the archive of dead ones: counters and histograms are summed (a dead
process's counters stay in the archive, so a total never goes down), gauges
are summed, or their maximum or minimum taken, as each one's meaning asks,
over the live processes only.
"""

from __future__ import annotations

import bisect
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway_bridge import process_stats

# A series' labels: the label values, in the family's label order.
Labels = tuple[Any, ...]

# Seconds; fine at the gateway's own scale (sub-millisecond) and the calls' (minutes).
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
# How a gauge is combined over the host's live processes.
SUM, MAX, MIN = "sum", "max", "min"

# The ``model`` label of gateway_requests_total: a catalogue model as served,
# NO_MODEL for calls that name none (the model list, the key's account),
# OTHER_MODEL for any other name and past a process's MAX_MODELS distinct ones.
NO_MODEL = "none"
OTHER_MODEL = "other"
DEFAULT_MAX_MODELS = 100
# Distinct error codes a process counts by name; the rest as OTHER_ERROR.
MAX_ERRORS = 200
OTHER_ERROR = "other"

SNAPSHOT_VERSION = 1


class Histogram:
    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value


@dataclass(frozen=True)
class Spec:
    """One metric family: its kind, help, label names, how a gauge combines
    over processes, and (for those read at snapshot time) what reads it."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    agg: str = SUM
    read: Callable[[], Iterable[Any]] | None = None


def _labels(names: tuple[str, ...], values: Labels) -> str:
    if not names:
        return ""
    parts = []
    for name, value in zip(names, values, strict=True):
        text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{name}="{text}"')
    return "{" + ",".join(parts) + "}"


def _number(value: float) -> str:
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    return str(value)


# --- this process's counters ------------------------------------------------------


class GatewayMetrics:
    def __init__(self, max_models: int = DEFAULT_MAX_MODELS) -> None:
        # (protocol, endpoint, model, HTTP status) -> count
        self.requests: defaultdict[tuple[str, str, str, int], int] = defaultdict(int)
        # (protocol, stream) -> Histogram
        self.latency: dict[tuple[str, bool], Histogram] = {}
        self.ttft: dict[tuple[str, bool], Histogram] = {}
        self.overhead = Histogram()
        # (node name, outcome) -> count; outcome: success | failure | neutral
        self.node_outcomes: defaultdict[tuple[str, str], int] = defaultdict(int)
        # error code -> count (refusals and failures); at most MAX_ERRORS codes
        self.errors: defaultdict[str, int] = defaultdict(int)
        self.retries = 0
        self.fallbacks = 0
        self.response_cache_hits = 0
        self.response_cache_misses = 0
        self.disconnects = 0
        self.in_flight = 0
        self.max_models = max_models
        self._models: set[str] = set()
        # Metrics read at snapshot time (gauges, and counters other objects
        # keep): name -> Spec with its reader.
        self.gauges: dict[str, Spec] = {}
        # The last value of each read counter's series, so one that leaves
        # its source (a deleted node's circuit openings) keeps its total.
        self._read_counters: dict[str, dict[Labels, float]] = {}
        self._seq = 0
        self.gauge(
            "process_resident_memory_bytes", "Resident memory size in bytes.", (), process_stats.rss
        )
        self.gauge("process_open_fds", "Open file descriptors.", (), process_stats.fds)
        self.gauge(
            "process_start_time_seconds",
            "Start time of the oldest live process since the Unix epoch, in seconds.",
            (),
            process_stats.start,
            agg=MIN,
        )
        self.gauge(
            "gateway_processes",
            "Live gateway processes whose metrics this scrape adds up.",
            (),
            process_stats.one,
        )
        self.counter(
            "process_cpu_seconds_total",
            "User and system CPU time spent, in seconds.",
            (),
            process_stats.cpu,
        )

    # --- the hot path -------------------------------------------------------

    def model_label(self, model: str | None, catalog: Mapping[str, object]) -> str:
        """``model`` when the catalogue has it and this process counts fewer
        than ``max_models`` distinct ones, else ``"other"``."""
        if model is None:
            return NO_MODEL
        if model in self._models:
            return model
        if model in catalog and len(self._models) < self.max_models:
            self._models.add(model)
            return model
        return OTHER_MODEL

    def observe_call(
        self,
        protocol: str,
        endpoint: str,
        status: int,
        stream: bool,
        latency_s: float,
        ttft_s: float | None,
        overhead_s: float | None,
        model: str = NO_MODEL,
    ) -> None:
        self.requests[(protocol, endpoint, model, status)] += 1
        key = (protocol, stream)
        hist = self.latency.get(key)
        if hist is None:
            hist = self.latency[key] = Histogram()
        hist.observe(latency_s)
        if ttft_s is not None:
            hist = self.ttft.get(key)
            if hist is None:
                hist = self.ttft[key] = Histogram()
            hist.observe(ttft_s)
        if overhead_s is not None:
            self.overhead.observe(overhead_s)

    def error(self, code: str) -> None:
        errors = self.errors
        if code not in errors and len(errors) >= MAX_ERRORS:
            code = OTHER_ERROR
        errors[code] += 1

    # --- registration ---------------------------------------------------------

    def gauge(
        self,
        name: str,
        help_text: str,
        labels: tuple[str, ...],
        read: Callable[[], Iterable[Any]],
        agg: str = SUM,
    ) -> None:
        """A gauge read at snapshot time; over the host's live processes it is
        summed (``SUM``: calls in flight, queue depth) or its ``MAX`` (a
        circuit open anywhere) or ``MIN`` taken."""
        self.gauges[name] = Spec(name, GAUGE, help_text, labels, agg, read)

    def counter(
        self, name: str, help_text: str, labels: tuple[str, ...], read: Callable[[], Iterable[Any]]
    ) -> None:
        """A counter another object keeps, read at snapshot time (summed over
        the host's processes, dead ones included)."""
        self.gauges[name] = Spec(name, COUNTER, help_text, labels, SUM, read)

    def specs(self) -> dict[str, Spec]:
        """Every family this process renders, in the order it renders them."""
        out = {
            s.name: s
            for s in (
                Spec(
                    "gateway_requests_total",
                    COUNTER,
                    "Calls answered, by protocol, endpoint, model (a catalogue model as "
                    "served; 'other' for any other name, 'none' for calls that name none) "
                    "and HTTP status.",
                    ("protocol", "endpoint", "model", "status"),
                ),
                Spec(
                    "gateway_request_duration_seconds",
                    HISTOGRAM,
                    "Total call latency as the client sees it.",
                    ("protocol", "stream"),
                ),
                Spec(
                    "gateway_time_to_first_token_seconds",
                    HISTOGRAM,
                    "Time to the first streamed token.",
                    ("protocol", "stream"),
                ),
                Spec(
                    "gateway_overhead_seconds",
                    HISTOGRAM,
                    "The gateway's own time per call (total minus upstream and queue).",
                ),
                Spec(
                    "gateway_node_requests_total",
                    COUNTER,
                    "Upstream attempts by node and outcome.",
                    ("node", "outcome"),
                ),
                Spec(
                    "gateway_errors_total",
                    COUNTER,
                    "Calls refused or failed, by the gateway's error code (label 'error'; "
                    "the HTTP status is gateway_requests_total's 'status').",
                    ("error",),
                ),
                Spec(
                    "gateway_retries_total", COUNTER, "Upstream attempts retried on another node."
                ),
                Spec("gateway_fallbacks_total", COUNTER, "Calls served by a fallback model."),
                Spec("gateway_response_cache_hits_total", COUNTER, "Response-cache hits."),
                Spec(
                    "gateway_response_cache_misses_total",
                    COUNTER,
                    "Response-cache lookups that missed.",
                ),
                Spec("gateway_client_disconnects_total", COUNTER, "Streams the client left."),
                Spec("gateway_in_flight", GAUGE, "Calls being served now."),
            )
        }
        for name in sorted(self.gauges):
            out[name] = self.gauges[name]
        return out

    # --- snapshots --------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """This process's metrics as a JSON-able dict (labels as lists of
        strings): ``counters``, ``gauges`` and ``histograms``, by name."""
        self._seq += 1

        def rows(items: Iterable[tuple[Labels, float]]) -> list[list[Any]]:
            return [[[str(v) for v in labels], value] for labels, value in items]

        def hists(items: Iterable[tuple[Labels, Histogram]]) -> list[list[Any]]:
            return [
                [[str(v) for v in labels], list(h.counts), h.sum, h.count] for labels, h in items
            ]

        counters = {
            "gateway_requests_total": rows(self.requests.items()),
            "gateway_node_requests_total": rows(self.node_outcomes.items()),
            "gateway_errors_total": rows(((c,), n) for c, n in self.errors.items()),
            "gateway_retries_total": [[[], self.retries]],
            "gateway_fallbacks_total": [[[], self.fallbacks]],
            "gateway_response_cache_hits_total": [[[], self.response_cache_hits]],
            "gateway_response_cache_misses_total": [[[], self.response_cache_misses]],
            "gateway_client_disconnects_total": [[[], self.disconnects]],
        }
        gauges: dict[str, list[list[Any]]] = {"gateway_in_flight": [[[], self.in_flight]]}
        for name, spec in self.gauges.items():
            assert spec.read is not None  # registered with its reader (gauge, counter)
            read = [(tuple(map(str, labels)), value) for labels, value in spec.read()]
            if spec.kind == COUNTER:
                kept = self._read_counters.setdefault(name, {})
                kept.update(read)
                counters[name] = rows(kept.items())
            else:
                gauges[name] = rows(read)
        return {
            "version": SNAPSHOT_VERSION,
            "pid": os.getpid(),
            "seq": self._seq,
            "written": time.time(),
            "counters": counters,
            "gauges": gauges,
            "histograms": {
                "gateway_request_duration_seconds": hists(
                    ((p, str(s).lower()), h) for (p, s), h in self.latency.items()
                ),
                "gateway_time_to_first_token_seconds": hists(
                    ((p, str(s).lower()), h) for (p, s), h in self.ttft.items()
                ),
                "gateway_overhead_seconds": hists([((), self.overhead)]),
            },
        }

    def render(self, merged: dict[str, Any] | None = None) -> str:
        """Prometheus text of ``merged`` (``merge()``'s result), or of this
        process alone."""
        if merged is None:
            merged = merge([self.snapshot()], None, self.specs())
        out: list[str] = []
        for name, spec in self.specs().items():
            series = merged.get(name)
            if series is None:
                continue
            out.append(f"# HELP {name} {spec.help}")
            out.append(f"# TYPE {name} {spec.kind}")
            ordered = sorted(series.items(), key=lambda kv: kv[0])
            if spec.kind != HISTOGRAM:
                for values, value in ordered:
                    out.append(f"{name}{_labels(spec.labels, values)} {_number(value)}")
                continue
            for values, (counts, total, count) in ordered:
                running = 0
                bounds = (*(repr(float(b)) for b in LATENCY_BUCKETS), "+Inf")
                for le, n in zip(bounds, counts, strict=False):
                    running += n
                    out.append(
                        f"{name}_bucket{_labels((*spec.labels, 'le'), (*values, le))} {running}"
                    )
                out.append(f"{name}_sum{_labels(spec.labels, values)} {total!r}")
                out.append(f"{name}_count{_labels(spec.labels, values)} {count}")
        return "\n".join(out) + "\n"


# --- merging the host's processes ---------------------------------------------------


def _add_counters(into: dict[Labels, Any], rows: Iterable[Any]) -> None:
    for labels, value in rows:
        key = tuple(labels)
        into[key] = into.get(key, 0) + value


def _add_histograms(into: dict[Labels, Any], rows: Iterable[Any]) -> None:
    width = len(LATENCY_BUCKETS) + 1
    for labels, counts, total, count in rows:
        if len(counts) != width:
            continue  # another bucket layout: cannot be added
        key = tuple(labels)
        have = into.get(key)
        if have is None:
            into[key] = (list(counts), total, count)
        else:
            into[key] = ([a + b for a, b in zip(have[0], counts, strict=True)], have[1] + total,
                         have[2] + count)  # fmt: skip


def fold(archive: dict[str, Any] | None, dead: dict[str, Any]) -> dict[str, Any]:
    """The archive with a dead process's counters and histograms added (its
    gauges are dropped): what keeps a host's totals from going down."""
    counters: dict[str, dict[Labels, Any]] = {}
    hists: dict[str, dict[Labels, Any]] = {}
    for snap in (archive or {}, dead):
        for name, rows in snap.get("counters", {}).items():
            _add_counters(counters.setdefault(name, {}), rows)
        for name, rows in snap.get("histograms", {}).items():
            _add_histograms(hists.setdefault(name, {}), rows)
    return {
        "version": SNAPSHOT_VERSION,
        "counters": {
            name: [[list(k), v] for k, v in series.items()] for name, series in counters.items()
        },
        "histograms": {
            name: [[list(k), c, s, n] for k, (c, s, n) in series.items()]
            for name, series in hists.items()
        },
    }


def merge(
    live: list[dict[str, Any]], archive: dict[str, Any] | None, specs: dict[str, Spec]
) -> dict[str, Any]:
    """The host's metrics: name -> {labels: value} (a histogram's value is
    ``(bucket counts, sum, count)``). Counters and histograms add the live
    processes' snapshots to the archive; gauges combine the live ones only,
    each by its ``agg``; families ``specs`` does not know are left out."""
    out: dict[str, dict[Labels, Any]] = {}
    for snap in (archive or {}, *live):
        for name, rows in snap.get("counters", {}).items():
            spec = specs.get(name)
            if spec is not None and spec.kind == COUNTER:
                _add_counters(out.setdefault(name, {}), rows)
        for name, rows in snap.get("histograms", {}).items():
            spec = specs.get(name)
            if spec is not None and spec.kind == HISTOGRAM:
                _add_histograms(out.setdefault(name, {}), rows)
    for snap in live:
        for name, rows in snap.get("gauges", {}).items():
            spec = specs.get(name)
            if spec is None or spec.kind != GAUGE:
                continue
            series = out.setdefault(name, {})
            for labels, value in rows:
                key = tuple(labels)
                have = series.get(key)
                if have is None:
                    series[key] = value
                elif spec.agg == MAX:
                    series[key] = max(have, value)
                elif spec.agg == MIN:
                    series[key] = min(have, value)
                else:
                    series[key] = have + value
    return out
