"""The node charts: latency, cache hit rate and a summary per node (from the
rollups' node grain), each node's health over the range (from the health
prober's audit events, one per flip) and its load as last probed. None reads
call records. (The circuit-breaker openings are ``circuits.circuit_openings``.)"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from django.db.models import Q
from django.utils import timezone as tz
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.facade import audit_trail
from console.features.analytics.chart import (
    Chart,
    empty_calls,
    figure,
    hit_rate,
    iso_local,
    line,
    q_label,
    round_ms,
    series_of,
    share_pct,
    split_top,
    time_title,
    x_labels,
)
from console.features.analytics.query import Query
from inference_node.facade import Node

ENGINE_HIT_NOTE = gettext_lazy(
    "Engine prefix-cache hit rate: what each node's inference engine reports for its own "
    "prefix cache, over all the traffic it serves. The cached prompt share (here per node, "
    "and on the overview) counts only your billed prompt tokens read from cache, so the two "
    "differ."
)
# The sums the node table shows (calls, errors, the cached prompt share).
TABLE_SUMS = ("calls", "calls_4xx", "calls_5xx", "input_tokens", "cache_read_tokens",
              "cache_write_tokens")  # fmt: skip
HEALTH_NAMES = {
    "healthy": gettext_lazy("healthy"),
    "unhealthy": gettext_lazy("unhealthy"),
    "unknown": gettext_lazy("unknown"),
}
# The load table's status and health columns, translated when shown (the
# node models' own labels are inference_node's).
STATUS_DISPLAY = {
    "active": gettext_lazy("Active"),
    "draining": gettext_lazy("Draining"),
    "disabled": gettext_lazy("Disabled"),
}
HEALTH_DISPLAY = {
    "unknown": gettext_lazy("Unknown"),
    "healthy": gettext_lazy("Healthy"),
    "unhealthy": gettext_lazy("Unhealthy"),
}
HEALTH_COLOURS = {"healthy": "#2ca02c", "unhealthy": "#d62728", "unknown": "#b0b7c3"}
FLIPS = ("node.healthy", "node.unhealthy")


def chosen_nodes(q: Query) -> list[Node]:
    """The organization's own nodes and the shared ones, as the Nodes page lists
    them (narrowed by the node filter when one is set)."""
    nodes = Node.objects.filter(
        Q(organization_id=q.organization_id) | Q(organization__isnull=True)
    ).order_by("name", "id")
    wanted = q.filters.get("node_id")
    if wanted:
        ids = wanted if isinstance(wanted, list | tuple | set) else [wanted]
        nodes = nodes.filter(pk__in=ids)
    return list(nodes[:50])


def _fmt(v: float | None, unit: str = " ms") -> str:
    return "—" if v is None else f"{v:,.1f}{unit}"


def node_table(q: Query) -> Chart:
    s = series_of(q, group_by="node_id", bucket=None, quantiles=(0.5, 0.9, 0.99), sums=TABLE_SUMS)
    chart = Chart(
        "node_table",
        _("Nodes over the whole range"),
        columns=[
            "node_id",
            "node",
            "calls",
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "ttft_p50_ms",
            "token_hit_rate_pct",
            "error_rate_pct",
        ],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart
    rows = []
    for node_id, (p,) in s.groups.items():
        label = q.names.label("node_id", node_id)
        lat, tt = p["latency_ms"], p["ttft_ms"]
        err = share_pct(p["calls_4xx"] + p["calls_5xx"], p["calls"])
        hit = hit_rate(p)
        chart.rows.append(
            [
                node_id,
                label,
                p["calls"],
                round_ms(lat[0.5]),
                round_ms(lat[0.9]),
                round_ms(lat[0.99]),
                round_ms(tt[0.5]),
                hit,
                err,
            ]
        )
        href = q.calls_url(node=node_id) if q.names.known("node_id", node_id) else None
        rows.append(
            [
                (label, href),
                (f"{p['calls']:,}", None),
                *((_fmt(v), None) for v in (lat[0.5], lat[0.9], lat[0.99], tt[0.5])),
                (_fmt(hit, " %"), None),
                (_fmt(err, " %"), None),
            ]
        )
    chart.table = _node_summary_table(rows)
    return chart


def _node_summary_table(rows: list) -> dict[str, Any]:
    """The per-node summary's table: a node's calls, latency and TTFT, cache and errors."""
    return {
        "headers": [
            _("Node"),
            _("Calls"),
            "p50",
            "p90",
            "p99",
            _("TTFT p50"),
            _("Cached prompt share"),
            _("Errors"),
        ],
        "numeric": [False, True, True, True, True, True, True, True],
        "rows": rows,
    }


def _line_per_node(q: Query, s, chart: Chart, value, unit: str, row) -> list:
    """One line of ``value(point)`` per node (the busiest ``MAX_GROUPS``), and
    the CSV rows ``[bucket, node, *row(point)]``."""
    shown, _rest = split_top(s.groups)
    x = x_labels(q, s.groups[shown[0]])
    traces = []
    for i, node_id in enumerate(shown):
        points = s.groups[node_id]
        label = q.names.label("node_id", node_id)
        colour = q.names.colour("node_id", node_id, i)
        traces.append(line(label, colour, x, [value(p) for p in points], unit=unit))
        chart.rows.extend([iso_local(p["start"], q.tz), label, *row(p)] for p in points)
    return traces


def node_latency(q: Query) -> Chart:
    qq = q.compared_quantile
    s = series_of(q, group_by="node_id", quantiles=(qq,), hists=("latency",), sums=("calls",))
    chart = Chart(
        "node_latency",
        _("Latency %(quantile)s per node") % {"quantile": q_label(qq)},
        columns=["bucket_start", "node", "calls", f"{q_label(qq)}_ms"],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart

    def latency(p):
        return round_ms(p["latency_ms"][qq])

    traces = _line_per_node(q, s, chart, latency, " ms", lambda p: [p["calls"], latency(p)])
    chart.figure = figure(traces, x_title=time_title(q), y_title=_("Latency (ms)"))
    return chart


def node_cache(q: Query) -> Chart:
    s = series_of(q, group_by="node_id")
    chart = Chart(
        "node_cache",
        _("Cached prompt share per node"),
        columns=[
            "bucket_start",
            "node",
            "prompt_tokens",
            "cached_prompt_tokens",
            "token_hit_rate_pct",
        ],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart

    def row(p):
        prompt = p["input_tokens"] + p["cache_read_tokens"] + p["cache_write_tokens"]
        return [prompt, p["cache_read_tokens"], hit_rate(p)]

    traces = _line_per_node(q, s, chart, hit_rate, " %", row)
    chart.figure = figure(traces, x_title=time_title(q), y_title=_("Hit rate (%)"), y_suffix=" %")
    return chart


def health_segments(node: Node, flips: list[tuple[datetime, str, str]], start, end):
    """[(from, to, state)] covering ``start``..``end`` for one node: the state at
    ``start`` is the ``from`` of the first flip after it (or the node's current
    health when it never flipped in the range)."""
    inside = [(t, before, after) for t, before, after in flips if start < t < end]
    earlier = [after for t, _b, after in flips if t <= start]
    if earlier:
        state = earlier[-1]
    elif inside:
        state = inside[0][1]
    else:
        state = node.health
    out, cursor = [], start
    for t, _before, after in inside:
        out.append((cursor, t, state))
        cursor, state = t, after
    out.append((cursor, end, state))
    return [s for s in out if s[1] > s[0]]


def node_health(q: Query) -> Chart:
    chart = Chart(
        "node_health",
        _("Health of each node"),
        columns=["node", "from", "to", "state", "seconds"],
        note=_(
            "From the health prober: a node turns unhealthy after NODE_UNHEALTHY_AFTER "
            "failed probes in a row and healthy again after NODE_HEALTHY_AFTER good ones; "
            "unhealthy nodes get no calls."
        ),
    )
    nodes = chosen_nodes(q)
    if not nodes:
        chart.empty = _("No nodes yet. Register one under Nodes, or use the shared ones.")
        return chart
    end = min(q.end, tz.now())
    start = min(q.start, end)
    events = audit_trail(
        organization_id=q.organization_id,
        target_type="node",
        target_ids=[str(n.pk) for n in nodes],
        actions=FLIPS,
        before=end,
    )
    flips = _flips_by_node(events)
    traces: dict[str, dict[str, list[Any]]] = {}  # per state: the bars' x, y and base
    for node in nodes:
        for seg_from, seg_to, state in health_segments(
            node, flips.get(str(node.pk), []), start, end
        ):
            seconds = (seg_to - seg_from).total_seconds()
            chart.rows.append(
                [
                    node.name,
                    iso_local(seg_from, q.tz),
                    iso_local(seg_to, q.tz),
                    state,
                    round(seconds),
                ]
            )
            t = traces.setdefault(state, {"x": [], "y": [], "base": []})
            t["x"].append(seconds * 1000)
            t["y"].append(node.name)
            t["base"].append(seg_from.astimezone(q.tz).strftime("%Y-%m-%d %H:%M:%S"))
    chart.figure = _health_figure(q, traces, len(nodes))
    return chart


def _flips_by_node(events: list) -> dict[str, list[tuple[datetime, str, str]]]:
    """The audit trail's health flips per node id: (when, from, to)."""
    flips: dict[str, list[tuple[datetime, str, str]]] = {}
    for _action, target, at, params in events:
        flips.setdefault(target, []).append(
            (at, (params or {}).get("from", "unknown"), (params or {}).get("to", "unknown"))
        )
    return flips


def _health_figure(q: Query, traces: dict[str, dict[str, list[Any]]], n_nodes: int) -> dict:
    """A row of bars per node, one colour per health state, over time."""
    data = [
        go.Bar(
            name=str(HEALTH_NAMES.get(state, state)),
            orientation="h",
            marker={"color": HEALTH_COLOURS.get(state, "#b0b7c3")},
            hovertemplate=_("%(node)s: %(state)s from %(start)s")
            % {"node": "%{y}", "state": HEALTH_NAMES.get(state, state), "start": "%{base}"}
            + "<extra></extra>",
        )
        for state in traces
    ]
    layout = go.Layout(
        template="none",
        height=max(140, 48 + 36 * n_nodes),
        margin={"l": 140, "r": 16, "t": 12, "b": 48},
        barmode="overlay",
        legend={"orientation": "h", "y": -0.3, "x": 0},
        xaxis={"type": "date", "title": {"text": f"{_('Time')} ({q.tz.key})"}},
        yaxis={"autorange": "reversed"},
    )
    fig = go.Figure(data=data, layout=layout).to_plotly_json()
    # Plain lists set after serializing (as chart.figure does): no typed arrays.
    for trace, arrays in zip(fig["data"], traces.values(), strict=True):
        trace.update(arrays)
    return fig


def node_load(q: Query) -> Chart:
    chart = Chart(
        "node_load",
        _("Load as last probed"),
        note=str(ENGINE_HIT_NOTE),
        columns=[
            "node",
            "status",
            "health",
            "running",
            "waiting",
            "kv_cache_usage_pct",
            "prefix_cache_hit_rate_pct",
            "last_probe",
        ],
    )
    nodes = chosen_nodes(q)
    if not nodes:
        chart.empty = _("No nodes yet. Register one under Nodes, or use the shared ones.")
        return chart

    def pct(v):
        return None if v is None else round(v * 100, 1)

    rows = []
    for n in nodes:
        kv, hit = pct(n.kv_cache_usage), pct(n.prefix_cache_hit_rate)
        probed = iso_local(n.last_probe_at, q.tz) if n.last_probe_at else None
        chart.rows.append([n.name, n.status, n.health, n.running, n.waiting, kv, hit, probed])

        def text(v, unit=""):
            return "—" if v is None else f"{v:,}{unit}"

        rows.append(
            [
                (n.name, None),
                (str(STATUS_DISPLAY.get(n.status) or n.get_status_display()), None),
                (str(HEALTH_DISPLAY.get(n.health) or n.get_health_display()), None),
                (text(n.running), None),
                (text(n.waiting), None),
                (text(kv, " %"), None),
                (text(hit, " %"), None),
                (probed[:19].replace("T", " ") if probed else _("never"), None),
            ]
        )
    chart.table = {
        "headers": [_("Node"), _("Status"), _("Health"), _("Running"), _("Waiting"),
                    _("KV cache"), _("Engine prefix-cache hit rate"), _("Last probe")],
        "numeric": [False, False, False, True, True, True, True, False],
        "rows": rows,
    }  # fmt: skip
    return chart
