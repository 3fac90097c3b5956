"""Charts that split a total by cause, from the rollups' breakdown sums
(``usage.ingest.aggregate``): where the time of a call goes, and why calls
were refused. Same contract as the other charts (``chart.py``): a ``Chart`` with its figure and
the rows of its CSV, read from ``usage.charts.series`` only."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.features.analytics.chart import (
    Chart,
    bar,
    empty_calls,
    figure,
    iso_local,
    line,
    series_of,
    share_pct,
    time_title,
    x_labels,
)
from console.features.analytics.query import Query

# --- where time goes -----------------------------------------------------------

TIME_PARTS = (
    ("queue_ms", gettext_lazy("Queue"), "#8C6D1F"),
    ("overhead_ms", gettext_lazy("Gateway overhead"), "#CC79A7"),
    ("first_token_ms", gettext_lazy("Upstream to first token"), "#0072B2"),
    ("decode_ms", gettext_lazy("Decode"), "#56B4E9"),
)
TIME_NOTE = gettext_lazy(
    "Mean per call in each bucket, from the hourly sums: queue and gateway overhead as the "
    "gateway measured them; upstream to first token = time to first token minus queue and "
    "overhead; decode = latency minus time to first token (each floored at 0). The bars add up "
    "to the mean latency (the line). Calls without a first token (embeddings, refused and "
    "failed calls) have no such split and show mostly as decode: filter by a chat model for "
    "a clean one. Hours whose calls reported none of these times are left blank."
)


def _ms_per_call(total_us: int, calls: int) -> float:
    return round(total_us / calls / 1000, 3)


def time_parts(p: dict) -> dict | None:
    """A bucket's mean time per call by part (ms), or ``None`` without calls.
    A bucket none of whose calls reported a queue, overhead or upstream time
    (hours rolled up before these sums were kept, say) has the mean latency
    but no parts: all of it would otherwise show as upstream to first token."""
    n = p["calls"]
    if not n:
        return None
    queue, overhead = p["queue_sum_us"], p["overhead_sum_us"]
    ttft, latency = p["ttft_sum_us"], p["latency_sum_us"]
    if not (queue or overhead or p["upstream_sum_us"]):
        return {"latency_ms": _ms_per_call(latency, n)}
    return {
        "latency_ms": _ms_per_call(latency, n),
        "queue_ms": _ms_per_call(queue, n),
        "overhead_ms": _ms_per_call(overhead, n),
        "first_token_ms": _ms_per_call(max(0, ttft - queue - overhead), n),
        "decode_ms": _ms_per_call(max(0, latency - ttft), n),
        "upstream_ms": _ms_per_call(p["upstream_sum_us"], n),
    }


def time_breakdown(q: Query) -> Chart:
    s = series_of(q)
    points = s.groups[None]
    chart = Chart(
        "time_breakdown",
        _("Where time goes (mean per call)"),
        columns=[
            "bucket_start",
            "calls",
            "calls_with_ttft",
            "mean_latency_ms",
            *(c for c, _l, _c in TIME_PARTS),
            "mean_upstream_ms",
            "latency_sum_us",
            "ttft_sum_us",
            "queue_sum_us",
            "overhead_sum_us",
            "upstream_sum_us",
        ],
        note=str(TIME_NOTE),
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        chart.note = None
        return chart
    parts = [time_parts(p) for p in points]
    x = x_labels(q, points)
    traces = [
        bar(str(label), colour, x, [v and v.get(col) for v in parts], unit=" ms")
        for col, label, colour in TIME_PARTS
    ]
    latency = [v and v["latency_ms"] for v in parts]
    traces.append(line(_("Mean latency"), "#1d2330", x, latency, dash="dot", unit=" ms"))
    for p, v in zip(points, parts, strict=True):
        v = v or {}
        chart.rows.append(
            [
                iso_local(p["start"], q.tz),
                p["calls"],
                p["ttft_count"],
                v.get("latency_ms"),
                *(v.get(c) for c, _l, _c in TIME_PARTS),
                v.get("upstream_ms"),
                p["latency_sum_us"],
                p["ttft_sum_us"],
                p["queue_sum_us"],
                p["overhead_sum_us"],
                p["upstream_sum_us"],
            ]
        )
    chart.figure = figure(
        traces, x_title=time_title(q), y_title=_("Mean time per call (ms)"), barmode="stack"
    )
    return chart


# --- refusals by cause ---------------------------------------------------------

CAUSES = (
    ("rate_limited_calls", gettext_lazy("Rate limit (requests or tokens per minute)"), "#7b4fd0"),
    ("cap_refused_calls", gettext_lazy("Spend cap or prepaid balance"), "#c0362c"),
    ("queue_refused_calls", gettext_lazy("Queue full or timed out"), "#E69F00"),
)
CAUSES_NOTE = gettext_lazy(
    "By the gateway's error code: rate limit = rpm_limit_exceeded, tpm_limit_exceeded; spend "
    "cap or balance = any *_cap_exceeded (429) and prepaid_balance_exhausted (402); queue = "
    "queue_full (429) and queue_timeout (503). So the bars include those 402s and 503s, and "
    "the line counts every 429, a node's own (upstream_rate_limited) too."
)


def refusals(q: Query) -> Chart:
    s = series_of(q)
    points = s.groups[None]
    chart = Chart(
        "refusals",
        _("429s and refusals by cause"),
        columns=[
            "bucket_start",
            "calls",
            "calls_429",
            *(c for c, _l, _c in CAUSES),
            "refused_pct",
        ],
        note=str(CAUSES_NOTE),
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        chart.note = None
        return chart
    for p in points:
        refused = sum(p[c] for c, _l, _c in CAUSES)
        chart.rows.append(
            [
                iso_local(p["start"], q.tz),
                p["calls"],
                p["calls_429"],
                *(p[c] for c, _l, _c in CAUSES),
                share_pct(refused, p["calls"]),
            ]
        )
    if not s.total("calls_429") and not any(s.total(c) for c, _l, _c in CAUSES):
        chart.empty = _(
            "No call was refused or answered 429 in this range: no rate limit, spend cap, "
            "prepaid balance or queue stood in the way."
        )
        chart.note = None
        return chart
    x = x_labels(q, points)
    calls_unit = " " + _("calls")
    traces = [
        bar(str(label), colour, x, [p[col] for p in points], unit=calls_unit)
        for col, label, colour in CAUSES
    ]
    traces.append(line(_("All 429s"), "#1d2330", x, [p["calls_429"] for p in points], dash="dot"))
    chart.figure = figure(traces, x_title=time_title(q), y_title=_("Calls"), barmode="stack")
    return chart
