"""The gateway's own Prometheus metrics, kept as plain counters in process
(no client library: an increment is one dict operation on the hot path) and
rendered as Prometheus text on ``GET /metrics``."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable

# Seconds; fine at the gateway's own scale (sub-millisecond) and the calls' (minutes).
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip


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


def _labels(names: tuple[str, ...], values: tuple) -> str:
    if not names:
        return ""
    parts = []
    for name, value in zip(names, values, strict=True):
        text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{name}="{text}"')
    return "{" + ",".join(parts) + "}"


class GatewayMetrics:
    def __init__(self) -> None:
        # (protocol, endpoint, status) -> count
        self.requests: defaultdict[tuple, int] = defaultdict(int)
        # (protocol, stream) -> Histogram
        self.latency: dict[tuple, Histogram] = {}
        self.ttft: dict[tuple, Histogram] = {}
        self.overhead = Histogram()
        # (node name, outcome) -> count; outcome: success | failure | neutral
        self.node_outcomes: defaultdict[tuple, int] = defaultdict(int)
        # error code -> count (refusals and failures)
        self.errors: defaultdict[str, int] = defaultdict(int)
        self.retries = 0
        self.fallbacks = 0
        self.response_cache_hits = 0
        self.response_cache_misses = 0
        self.disconnects = 0
        self.in_flight = 0
        # Gauges read at scrape time: name -> (help, callable returning [(labels, value)])
        self.gauges: dict[str, tuple[str, tuple[str, ...], Callable[[], Iterable]]] = {}

    def observe_call(
        self,
        protocol: str,
        endpoint: str,
        status: int,
        stream: bool,
        latency_s: float,
        ttft_s: float | None,
        overhead_s: float | None,
    ) -> None:
        self.requests[(protocol, endpoint, status)] += 1
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

    def gauge(self, name: str, help_text: str, labels: tuple[str, ...], read) -> None:
        self.gauges[name] = (help_text, labels, read)

    def render(self) -> str:
        out: list[str] = []

        def counter(name, help_text, labels, items):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} counter")
            for values, count in sorted(items, key=lambda kv: tuple(map(str, kv[0]))):
                out.append(f"{name}{_labels(labels, values)} {count}")

        def histogram(name, help_text, labels, hists):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} histogram")
            for values, h in sorted(hists, key=lambda kv: tuple(map(str, kv[0]))):
                running = 0
                for bound, n in zip((*h.bounds, "+Inf"), h.counts, strict=True):
                    running += n
                    le = bound if isinstance(bound, str) else repr(float(bound))
                    out.append(f"{name}_bucket{_labels((*labels, 'le'), (*values, le))} {running}")
                out.append(f"{name}_sum{_labels(labels, values)} {h.sum!r}")
                out.append(f"{name}_count{_labels(labels, values)} {h.count}")

        counter(
            "gateway_requests_total",
            "Calls answered, by protocol, endpoint and HTTP status.",
            ("protocol", "endpoint", "status"),
            self.requests.items(),
        )
        histogram(
            "gateway_request_duration_seconds",
            "Total call latency as the client sees it.",
            ("protocol", "stream"),
            [((p, str(s).lower()), h) for (p, s), h in self.latency.items()],
        )
        histogram(
            "gateway_time_to_first_token_seconds",
            "Time to the first streamed token.",
            ("protocol", "stream"),
            [((p, str(s).lower()), h) for (p, s), h in self.ttft.items()],
        )
        histogram(
            "gateway_overhead_seconds",
            "The gateway's own time per call (total minus upstream and queue).",
            (),
            [((), self.overhead)],
        )
        counter(
            "gateway_node_requests_total",
            "Upstream attempts by node and outcome.",
            ("node", "outcome"),
            self.node_outcomes.items(),
        )
        counter(
            "gateway_errors_total",
            "Calls refused or failed, by error code.",
            ("code",),
            [((code,), n) for code, n in self.errors.items()],
        )
        for name, help_text, value in (
            ("gateway_retries_total", "Upstream attempts retried on another node.", self.retries),
            ("gateway_fallbacks_total", "Calls served by a fallback model.", self.fallbacks),
            ("gateway_response_cache_hits_total", "Response-cache hits.", self.response_cache_hits),
            (
                "gateway_response_cache_misses_total",
                "Response-cache lookups that missed.",
                self.response_cache_misses,
            ),
            ("gateway_client_disconnects_total", "Streams the client left.", self.disconnects),
        ):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} counter")
            out.append(f"{name} {value}")
        out.append("# HELP gateway_in_flight Calls being served now.")
        out.append("# TYPE gateway_in_flight gauge")
        out.append(f"gateway_in_flight {self.in_flight}")
        for name, (help_text, labels, read) in sorted(self.gauges.items()):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} gauge")
            for values, value in read():
                out.append(f"{name}{_labels(labels, values)} {value}")
        return "\n".join(out) + "\n"
