"""The Latency page's charts: percentiles of total latency and of time to
first token over time, overall or one line per model or node, from the hourly
latency sketches. (Where the time goes is ``breakdowns.time_breakdown``.)"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext as _

from console.features.analytics.chart import (
    ALL_QUANTILES,
    GROUP_NOUNS,
    Chart,
    busiest_note,
    empty_calls,
    figure,
    iso_local,
    line,
    q_label,
    round_ms,
    series_of,
    split_top,
    time_title,
    x_labels,
)
from console.features.analytics.query import QUANTILE_COLOURS, Query

# The tail percentiles often lie close together: p99 dashed and p99.9 dotted
# (each its own colour too) keep them apart where they overlap.
QUANTILE_DASHES = {0.99: "dash", 0.999: "dot"}
# The only sums these charts show: calls, and the calls with a first token.
LATENCY_SUMS = ("calls", "ttft_count")


@dataclass(frozen=True)
class _Measure:
    """What one chart measures: total latency, or time to first token."""

    which: str  # the points' quantiles: latency_ms | ttft_ms
    hist: str  # the sketch they come from
    name: str
    title: str
    count_col: str  # the calls measured


def latency(q: Query, *, which: str = "latency_ms") -> Chart:
    ttft = which == "ttft_ms"
    m = _Measure(
        which=which,
        hist="ttft" if ttft else "latency",
        name="ttft" if ttft else "latency",
        title=_("Time to first token") if ttft else _("Total latency"),
        count_col="ttft_count" if ttft else "calls",
    )
    y_title = _("Time to first token (ms)") if ttft else _("Latency (ms)")
    column = q.group_column("compare")
    if column is None:
        chart, traces = _every_quantile(q, m)
    else:
        chart, traces = _compared(q, m, column)
    if traces is None:  # nothing measured: the chart says why
        return chart
    chart.figure = figure(traces, x_title=time_title(q), y_title=y_title)
    return chart


def _every_quantile(q: Query, m: _Measure) -> tuple[Chart, list | None]:
    """Nothing compared: a line per percentile."""
    which, count_col = m.which, m.count_col
    s = series_of(q, quantiles=ALL_QUANTILES, hists=(m.hist,), sums=LATENCY_SUMS)
    points = s.groups[None]
    chart = Chart(
        m.name,
        m.title,
        columns=[
            "bucket_start",
            "series",
            "calls",
            *(f"{q_label(x)}_ms" for x in ALL_QUANTILES),
        ],
    )
    if not s.total(count_col):
        chart.empty = (
            empty_calls(q)
            if not s.total("calls")
            else _(
                "None of these calls has a time to first token (embeddings and failed calls "
                "have none)."
            )
        )
        return chart, None
    x = x_labels(q, points)
    traces = [
        line(
            q_label(qq),
            QUANTILE_COLOURS[qq],
            x,
            [round_ms(p[which][qq]) for p in points],
            dash=QUANTILE_DASHES.get(qq),
            unit=" ms",
        )
        for qq in ALL_QUANTILES
    ]
    for p in points:
        chart.rows.append(
            [
                iso_local(p["start"], q.tz),
                "all",
                p[count_col],
                *(round_ms(p[which][qq]) for qq in ALL_QUANTILES),
            ]
        )
    return chart, traces


def _compared(q: Query, m: _Measure, column: str) -> tuple[Chart, list | None]:
    """The compared percentile, a line per model or node (the busiest)."""
    which, count_col = m.which, m.count_col
    qq = q.compared_quantile
    s = series_of(q, group_by=column, quantiles=(qq,), hists=(m.hist,), sums=LATENCY_SUMS)
    chart = Chart(
        m.name,
        _("%(title)s, %(quantile)s by %(noun)s")
        % {"title": m.title, "quantile": q_label(qq), "noun": GROUP_NOUNS[column]},
        columns=["bucket_start", "series", "calls", f"{q_label(qq)}_ms"],
    )
    if not s.total(count_col):
        chart.empty = empty_calls(q)
        return chart, None
    shown, rest = split_top(s.groups)
    traces = []
    x = x_labels(q, s.groups[shown[0]])
    for i, group in enumerate(shown):
        points = s.groups[group]
        label = q.names.label(column, group)
        traces.append(
            line(
                label,
                q.names.colour(column, group, i),
                x,
                [round_ms(p[which][qq]) for p in points],
                unit=" ms",
            )
        )
        for p in points:
            chart.rows.append(
                [iso_local(p["start"], q.tz), label, p[count_col], round_ms(p[which][qq])]
            )
    if rest:
        chart.note = busiest_note(len(shown), len(s.groups))
    return chart, traces


def ttft(q: Query) -> Chart:
    return latency(q, which="ttft_ms")
