"""The circuit-breaker openings chart: each time a gateway opened a node's
circuit in the range, from the transitions the gateways report
(``gateway_bridge.circuits``) as audit events. It reads no call record."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from django.conf import settings
from django.utils import timezone as tz
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.facade import audit_trail
from console.features.analytics.chart import Chart, iso_local
from console.features.analytics.nodes import chosen_nodes
from console.features.analytics.query import Query

CIRCUIT_OPENED, CIRCUIT_CLOSED = "node.circuit_opened", "node.circuit_closed"
REASONS = {
    "error_rate": (gettext_lazy("Error rate over the window"), "#c0362c"),
    "probe_failed": (gettext_lazy("Half-open probe failed"), "#E69F00"),
}


def circuit_openings(q: Query) -> Chart:
    """Each time a gateway opened a node's circuit in the range, from the
    transitions the gateways report (``gateway_bridge.circuits``): one marker
    per opening, with how long the circuit stayed open."""
    rate, least = settings.GATEWAY_BREAKER_ERROR_RATE, settings.GATEWAY_BREAKER_MIN_CALLS
    window, wait = settings.GATEWAY_BREAKER_WINDOW_SECONDS, settings.GATEWAY_BREAKER_OPEN_SECONDS
    chart = Chart(
        "circuit_openings",
        _("Circuit-breaker openings"),
        columns=[
            "opened_at",
            "node",
            "gateway",
            "reason",
            "calls",
            "errors",
            "error_rate_pct",
            "closed_at",
            "seconds_open",
        ],
        note=_(
            "A gateway stops sending calls to a node when at least %(rate)s of at least "
            "%(least)s calls in %(window)s s failed, and tries it again %(wait)s s later. Each "
            "gateway process keeps its own circuits; the model, key and sub-account filters do "
            "not apply here."
        )
        % {"rate": f"{rate:.0%}", "least": least, "window": window, "wait": wait},
    )
    nodes = {str(n.pk): n for n in chosen_nodes(q)}
    end = min(q.end, tz.now())
    start = min(q.start, end)
    events = audit_trail(
        organization_id=q.organization_id,
        target_type="node",
        target_ids=list(nodes),
        actions=(CIRCUIT_OPENED, CIRCUIT_CLOSED),
        since=start,
    )
    openings = _openings(events, nodes, end)
    if not openings:
        chart.empty = _(
            "No circuit opened between %(start)s and %(end)s (%(zone)s): every node answered "
            "well enough to keep its calls."
        ) % {
            "start": f"{start.astimezone(q.tz):%Y-%m-%d %H:%M}",
            "end": f"{end.astimezone(q.tz):%Y-%m-%d %H:%M}",
            "zone": q.tz.key,
        }
        return chart
    traces = _opening_marks(chart, q, openings)
    chart.figure = _openings_figure(q, traces, openings, start, end)
    return chart


def _openings(events: list, nodes: dict[str, Any], end: datetime) -> list[dict]:
    """Each opening before ``end`` (its node, time, gateway, reason, figures) with
    when the same gateway closed it again (``None``: still open)."""
    openings: list[dict] = []
    open_now: dict[tuple[str, str], dict] = {}  # (node, gateway) -> its last opening
    for action, target, at, params in events:
        params = params or {}
        slot = (target, params.get("gateway", ""))
        if action == CIRCUIT_CLOSED:
            opening = open_now.pop(slot, None)
            if opening is not None:
                opening["closed_at"] = at
            continue
        if at >= end:
            continue
        opening = {"node": nodes[target].name, "at": at, "closed_at": None, **params}
        openings.append(opening)
        open_now[slot] = opening
    return openings


def _opening_marks(chart: Chart, q: Query, openings: list[dict]) -> dict[str, dict]:
    """Each opening's CSV row, and its marker (per reason: x, y and hover text)."""
    traces: dict[str, dict] = {}
    for o in openings:
        calls, errors = int(o.get("calls") or 0), int(o.get("errors") or 0)
        rate = round(100.0 * errors / calls, 1) if calls else None
        closed = o["closed_at"]
        seconds = round((closed - o["at"]).total_seconds(), 1) if closed else None
        chart.rows.append(
            [iso_local(o["at"], q.tz), o["node"], o.get("gateway", ""), o.get("reason", ""), calls,
             errors, rate, iso_local(closed, q.tz) if closed else None, seconds]
        )  # fmt: skip
        t = traces.setdefault(o.get("reason", ""), {"x": [], "y": [], "text": []})
        t["x"].append(o["at"].astimezone(q.tz).strftime("%Y-%m-%d %H:%M:%S"))
        t["y"].append(o["node"])
        detail = (
            _("%(errors)s of %(calls)s calls failed") % {"errors": errors, "calls": calls}
            if calls
            else _("a probe failed")
        )
        still = (
            _("open for %(seconds)s s") % {"seconds": f"{seconds:g}"}
            if seconds is not None
            else _("still open")
        )
        t["text"].append(f"{o.get('gateway', '')}: {detail}; {still}")
    return traces


def _openings_figure(
    q: Query, traces: dict[str, dict], openings: list[dict], start: datetime, end: datetime
) -> dict:
    """A marker per opening, a row per node, a colour per reason, over the range."""
    data = [
        go.Scatter(
            name=str(REASONS.get(reason, (reason or _("unknown"), "#1d2330"))[0]),
            mode="markers",
            marker={
                "color": REASONS.get(reason, ("", "#1d2330"))[1],
                "size": 11,
                "symbol": "x-thin-open",
                "line": {"width": 2},
            },
            hovertemplate=_("%(node)s at %(time)s") % {"node": "%{y}", "time": "%{x}"}
            + "<br>%{text}<extra></extra>",
        )
        for reason in traces
    ]
    names = sorted({o["node"] for o in openings})
    layout = go.Layout(
        template="none",
        height=max(160, 72 + 36 * len(names)),
        margin={"l": 140, "r": 16, "t": 12, "b": 56},
        legend={"orientation": "h", "y": -0.35, "x": 0},
        xaxis={"type": "date", "title": {"text": f"{_('Time')} ({q.tz.key})"},
               "range": [start.astimezone(q.tz).strftime("%Y-%m-%d %H:%M:%S"),
                         end.astimezone(q.tz).strftime("%Y-%m-%d %H:%M:%S")]},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": names,
               "autorange": "reversed"},
    )  # fmt: skip
    fig = go.Figure(data=data, layout=layout).to_plotly_json()
    for trace, arrays in zip(fig["data"], traces.values(), strict=True):
        trace.update(arrays)
    return fig
