"""Reading a node's ``/metrics`` (Prometheus text exposition format) into the
few load figures routing needs, whichever engine the node runs.

The parser is lenient on purpose: a line it cannot read is skipped, never an
error, because one odd line from a server must not hide the node's load."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

Samples = dict[str, list[tuple[dict[str, str], float]]]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_SPECIAL = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}


def parse_prometheus(text: str) -> Samples:
    """``{metric name: [(labels, value), ...]}`` for every sample line that parses.
    Comments, ``# HELP``/``# TYPE``, timestamps and unreadable lines are skipped."""
    out: Samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        sample = _parse_line(line)
        if sample is not None:
            name, labels, value = sample
            out.setdefault(name, []).append((labels, value))
    return out


def _parse_line(line: str) -> tuple[str, dict[str, str], float] | None:
    match = _NAME.match(line)
    if match is None:
        return None
    name, pos = match.group(), match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        parsed = _parse_labels(line, pos + 1)
        if parsed is None:
            return None
        labels, pos = parsed
    rest = line[pos:].split()
    if not rest or len(rest) > 2:  # value, then an optional timestamp
        return None
    value = _parse_value(rest[0])
    if value is None:
        return None
    return name, labels, value


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int] | None:
    """Labels from just after ``{``; returns them and the index after ``}``."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t,":
            pos += 1
        if pos >= n:
            return None
        if line[pos] == "}":
            return labels, pos + 1
        match = _LABEL_NAME.match(line, pos)
        if match is None:
            return None
        key, pos = match.group(), match.end()
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos + 1 >= n or line[pos] != "=" or line[pos + 1] != '"':
            return None
        pos += 2
        chars: list[str] = []
        while True:
            if pos >= n:
                return None
            ch = line[pos]
            if ch == "\\" and pos + 1 < n:
                nxt = line[pos + 1]
                chars.append(_ESCAPES.get(nxt, "\\" + nxt))
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                chars.append(ch)
                pos += 1
        labels[key] = "".join(chars)


def _parse_value(token: str) -> float | None:
    special = _SPECIAL.get(token.lower())
    if special is not None:
        return special
    try:
        return float(token)
    except ValueError:
        return None


# --- load ------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeLoad:
    """Load figures of one scrape. ``None`` means the node does not report it.
    Counts are summed over all label sets (several models on one node)."""

    running: int | None = None
    waiting: int | None = None
    kv_cache_usage: float | None = None  # fraction 0..1
    prefix_cache_queries: float | None = None  # cumulative counter (tokens)
    prefix_cache_hits: float | None = None
    prefix_cache_hit_rate: float | None = None  # cumulative since start, 0..1

    @property
    def has_any(self) -> bool:
        return any(v is not None for v in vars(self).values())


# Candidate names in order of preference: vLLM (current, then older), SGLang, llama.cpp.
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred")
KV_USAGE = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
    "llamacpp:kv_cache_usage_ratio",
)
PREFIX_QUERIES = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_queries",
)
PREFIX_HITS = (
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_hits",
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hits",
)
HIT_RATE_GAUGES = ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate")


def _finite(samples: Samples, names: tuple[str, ...]) -> list[float] | None:
    """The finite values of the first of ``names`` the scrape has, or None."""
    for name in names:
        values = [v for _labels, v in samples.get(name, ()) if math.isfinite(v)]
        if values:
            return values
    return None


def _total(samples: Samples, names: tuple[str, ...]) -> float | None:
    values = _finite(samples, names)
    return None if values is None else max(0.0, sum(values))


def _fraction(samples: Samples, names: tuple[str, ...], combine) -> float | None:
    values = _finite(samples, names)
    if values is None:
        return None
    return min(1.0, max(0.0, combine(values)))


def _count(value: float | None) -> int | None:
    return None if value is None else round(value)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def node_load(text: str | Samples) -> NodeLoad:
    """The load a ``/metrics`` text (or its parsed samples) reports.

    Fractions are not additive across models: KV cache usage takes the fullest
    pool (the conservative figure for routing), a hit-rate gauge the mean."""
    samples = parse_prometheus(text) if isinstance(text, str) else text
    queries = _total(samples, PREFIX_QUERIES)
    hits = _total(samples, PREFIX_HITS)
    if queries is not None and hits is not None:
        hit_rate = min(1.0, hits / queries) if queries > 0 else None
    else:
        queries = hits = None
        hit_rate = _fraction(samples, HIT_RATE_GAUGES, _mean)
    return NodeLoad(
        running=_count(_total(samples, RUNNING)),
        waiting=_count(_total(samples, WAITING)),
        kv_cache_usage=_fraction(samples, KV_USAGE, max),
        prefix_cache_queries=queries,
        prefix_cache_hits=hits,
        prefix_cache_hit_rate=hit_rate,
    )


def recent_hit_rate(
    previous_queries: float | None, previous_hits: float | None, current: NodeLoad
) -> float | None:
    """The hit rate between the previous scrape and this one when the counters
    allow it (both scrapes have them, queries grew, no reset in between); else
    the cumulative rate of this scrape."""
    q, h = current.prefix_cache_queries, current.prefix_cache_hits
    if (
        q is not None
        and h is not None
        and previous_queries is not None
        and previous_hits is not None
    ):
        dq, dh = q - previous_queries, h - previous_hits
        if dq > 0 and 0 <= dh <= dq:
            return dh / dq
    return current.prefix_cache_hit_rate
