"""The Errors page's status charts: the share of calls per status class
over time and the calls per class. (Refusals by cause are
``breakdowns.refusals``, circuit openings ``nodes.circuit_openings``.)"""

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
from console.features.analytics.query import STATUS_COLOURS, Query

STATUS_CLASSES = (
    ("2xx", gettext_lazy("2xx success"), lambda p: p["calls_2xx"]),
    ("4xx", gettext_lazy("4xx client error (not 429)"), lambda p: p["calls_4xx"] - p["calls_429"]),
    ("429", gettext_lazy("429 rate limited"), lambda p: p["calls_429"]),
    ("5xx", gettext_lazy("5xx server error"), lambda p: p["calls_5xx"]),
)


def error_rate(q: Query) -> Chart:
    s = series_of(q)
    points = s.groups[None]
    chart = Chart(
        "error_rate",
        _("Error rate by status class"),
        columns=[
            "bucket_start",
            "calls",
            *(f"calls_{k}" for k, _l, _f in STATUS_CLASSES),
            "error_rate_pct",
            "rate_4xx_pct",
            "rate_429_pct",
            "rate_5xx_pct",
        ],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart
    x = x_labels(q, points)
    traces = []
    for key, label, fn in STATUS_CLASSES[1:]:
        traces.append(
            line(
                str(label),
                STATUS_COLOURS[key],
                x,
                [share_pct(fn(p), p["calls"]) for p in points],
                unit=" %",
            )
        )
    traces.append(
        line(
            _("All errors (4xx and 5xx)"),
            "#1d2330",
            x,
            [share_pct(p["calls_4xx"] + p["calls_5xx"], p["calls"]) for p in points],
            dash="dot",
            unit=" %",
        )
    )
    for p in points:
        counts = [fn(p) for _k, _l, fn in STATUS_CLASSES]
        chart.rows.append(
            [
                iso_local(p["start"], q.tz),
                p["calls"],
                *counts,
                share_pct(p["calls_4xx"] + p["calls_5xx"], p["calls"]),
                share_pct(counts[1], p["calls"]),
                share_pct(counts[2], p["calls"]),
                share_pct(counts[3], p["calls"]),
            ]
        )
    chart.figure = figure(
        traces, x_title=time_title(q), y_title=_("Share of calls (%)"), y_suffix=" %"
    )
    return chart


def status_counts(q: Query) -> Chart:
    s = series_of(q)
    points = s.groups[None]
    chart = Chart(
        "status_counts",
        _("Calls by status class"),
        columns=["bucket_start", "calls", *(f"calls_{k}" for k, _l, _f in STATUS_CLASSES)],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart
    x = x_labels(q, points)
    calls_unit = " " + _("calls")
    traces = [
        bar(str(label), STATUS_COLOURS[key], x, [fn(p) for p in points], unit=calls_unit)
        for key, label, fn in STATUS_CLASSES
    ]
    for p in points:
        chart.rows.append(
            [iso_local(p["start"], q.tz), p["calls"], *(fn(p) for _k, _l, fn in STATUS_CLASSES)]
        )
    chart.figure = figure(traces, x_title=time_title(q), y_title=_("Calls"), barmode="stack")
    return chart
