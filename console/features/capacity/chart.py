"""The result chart: requests per second against p99 latency, one point per
step (labelled with its clients), the knee marked. Built with the analytics
pages' figure builder (``console.features.analytics.chart``)."""

from __future__ import annotations

import json

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from console.features.analytics.chart import figure, line
from console.features.capacity.models import step_label


def qps_p99_figure(steps, knee_step: int | None) -> str | None:
    """The figure as JSON for the page, or ``None`` before any step has a p99."""
    points = [s for s in steps if s.latency_p99_ms is not None]
    if not points:
        return None
    clients = _("clients")
    traces = [
        line(
            _("p99 latency"),
            "#2563eb",
            [s.requests_per_second for s in points],
            [s.latency_p99_ms for s in points],
            unit=" ms",
        )
    ]
    traces[0][1]["text"] = [f"{s.concurrency} {clients}" for s in points]
    knee = [s for s in points if s.index == knee_step]
    if knee:
        marker = go.Scatter(
            name=_("knee"),
            mode="markers+text",
            marker={"color": "#dc2626", "size": 14, "symbol": "x"},
            textposition="top center",
        )
        traces.append(
            (
                marker,
                {
                    "x": [knee[0].requests_per_second],
                    "y": [knee[0].latency_p99_ms],
                    "text": [
                        _("knee: %(step)s")
                        % {"step": step_label(knee[0].number, knee[0].concurrency)}
                    ],
                },
            )
        )
    fig = figure(
        traces, x_title=_("requests per second"), y_title=_("p99 latency"), y_suffix=" ms",
        x_type="linear",
    )  # fmt: skip
    fig["layout"]["hovermode"] = "closest"
    return json.dumps(fig).replace("</", "<\\/")
