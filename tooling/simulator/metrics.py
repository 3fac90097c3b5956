"""Prometheus text exposition with vLLM's metric names.

Names follow current vLLM (V1 engine): gauges ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``; counters (in
tokens, like vLLM) ``vllm:prefix_cache_queries_total``,
``vllm:prefix_cache_hits_total``, ``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``; ``vllm:request_success_total`` (also
labelled ``finished_reason``, as vLLM does); histograms
``vllm:time_to_first_token_seconds`` and ``vllm:e2e_request_latency_seconds``.
Every series carries ``model_name``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from typing import Any

# vLLM's own bucket bounds for these two histograms.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


class ModelMetrics:
    """Counters of one served model."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success: Counter[str] = Counter()
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def record(
        self, *, prompt_tokens: int, generation_tokens: int, finish: str, ttft: float, e2e: float
    ) -> None:
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += generation_tokens
        self.success[finish] += 1
        self.ttft.observe(ttft)
        self.e2e.observe(e2e)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# The families with one sample per engine: (name, type, help, the sample's value).
_PER_ENGINE: tuple[tuple[str, str, str, Callable[[Any], str]], ...] = (
    ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
     lambda e: f"{e.scheduler.running}"),
    ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
     lambda e: f"{e.scheduler.waiting}"),
    ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
     lambda e: f"{e.cache.usage!r}"),
    ("vllm:prefix_cache_queries_total", "counter",
     "Prefix cache queries, in terms of number of queried tokens.",
     lambda e: f"{e.cache.queries_tokens}"),
    ("vllm:prefix_cache_hits_total", "counter",
     "Prefix cache hits, in terms of number of cached tokens.",
     lambda e: f"{e.cache.hit_tokens}"),
    ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
     lambda e: f"{e.metrics.prompt_tokens}"),
    ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
     lambda e: f"{e.metrics.generation_tokens}"),
)  # fmt: skip


def _success_lines(rows: list[tuple[str, Any]]) -> list[str]:
    lines = []
    for lb, e in rows:
        for reason in ("stop", "length", "abort"):
            count = e.metrics.success.get(reason, 0)
            lines.append(f'vllm:request_success_total{{finished_reason="{reason}",{lb}}} {count}')
    return lines


def render(engines) -> str:
    """The exposition text for ``engines`` (objects with name, metrics, cache, scheduler)."""
    rows = [(f'model_name="{_escape(e.name)}"', e) for e in engines]
    sections: list[tuple[str, str, str, list[str]]] = [
        (name, kind, help_text, [f"{name}{{{lb}}} {value(e)}" for lb, e in rows])
        for name, kind, help_text, value in _PER_ENGINE
    ]
    sections.append(
        (
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            _success_lines(rows),
        )
    )
    ttft, e2e = [], []
    for lb, e in rows:
        ttft.extend(e.metrics.ttft.lines("vllm:time_to_first_token_seconds", lb))
        e2e.extend(e.metrics.e2e.lines("vllm:e2e_request_latency_seconds", lb))
    sections.append(
        (
            "vllm:time_to_first_token_seconds",
            "histogram",
            "Histogram of time to first token in seconds.",
            ttft,
        )
    )
    sections.append(
        (
            "vllm:e2e_request_latency_seconds",
            "histogram",
            "Histogram of e2e request latency in seconds.",
            e2e,
        )
    )
    out: list[str] = []
    for name, kind, help_text, values in sections:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(values)
    return "\n".join(out) + "\n"
