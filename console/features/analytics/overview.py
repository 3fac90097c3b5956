"""The overview's usage tiles: today's and this month's spend, requests,
error rate, latency and cache hit rate, each with a small trend chart, and
this month's top models and keys by spend."""

from __future__ import annotations

import copy
import functools
from datetime import UTC, datetime, time, timedelta
from typing import Any

import plotly.graph_objects as go
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.features.analytics.chart import (
    MONEY_HOVER,
    Chart,
    hit_rate,
    iso_local,
    money_axis,
    money_hover_texts,
    round_ms,
    share_pct,
)
from console.features.analytics.query import Query
from console.kernel.money import format_amount, money_decimal
from invoicing import facade as invoicing
from usage import facade as usage

# Titles are translated when shown (issue 18); CSV columns keep the kinds.
KPIS = (
    ("spend", gettext_lazy("Spend")),
    ("calls", gettext_lazy("Requests")),
    ("error_rate", gettext_lazy("Error rate")),
    ("p50", gettext_lazy("Latency p50")),
    ("p99", gettext_lazy("Latency p99")),
    ("ttft_p50", gettext_lazy("TTFT p50")),
    ("hit_rate", gettext_lazy("Cached prompt share")),
)
# The CSV's period column keeps the English name; the page shows it translated.
PERIOD_TITLES = {"Today": gettext_lazy("Today"), "This month": gettext_lazy("This month")}
# The overview's cache figure and the Nodes page's engine figure differ by
# design; each page says how (see ``nodes.ENGINE_HIT_NOTE``).
CACHED_SHARE_NOTE = gettext_lazy(
    "Cached prompt share: the share of your billed prompt tokens read from the prefix cache. "
    "The Nodes page's engine prefix-cache hit rate is what each node reports for all the "
    "traffic it serves, so it is usually higher."
)


def _kpi_values(p: dict) -> dict:
    return {
        "spend": p["cost"],
        "calls": p["calls"],
        "error_rate": share_pct(p["calls_4xx"] + p["calls_5xx"], p["calls"]),
        "p50": round_ms(p["latency_ms"][0.5]),
        "p99": round_ms(p["latency_ms"][0.99]),
        "ttft_p50": round_ms(p["ttft_ms"][0.5]),
        "hit_rate": hit_rate(p),
    }


def _kpi_text(kind: str, value, cur: str) -> str:
    if value is None:
        return "—"
    if kind == "spend":
        return format_amount(value, cur)
    if kind == "calls":
        return f"{value:,}"
    if kind in ("error_rate", "hit_rate"):
        return f"{value:.1f} %"
    return f"{value:,.0f} ms"


def overview_periods(q: Query) -> list[tuple[str, datetime, datetime, str]]:
    now = q.form.now.astimezone(UTC)
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    local = now.astimezone(q.tz)
    today = datetime.combine(local.date(), time.min, tzinfo=q.tz)
    month = datetime.combine(local.date().replace(day=1), time.min, tzinfo=q.tz)
    return [("Today", today, end, "hour"), ("This month", month, end, "day")]


@functools.lru_cache(maxsize=64)
def _sparkline(title: str, hovertemplate: str | None) -> dict:
    """A tile's trend figure without its data, validated by graph_objects
    once per title (and currency) and copied for each tile: building
    fourteen figures per request cost more than reading their numbers."""
    trace = go.Scatter(
        # Markers too: a day or hour alone between gaps is still seen.
        mode="lines+markers",
        marker={"size": 3, "color": "#3056d3"},
        line={"color": "#3056d3", "width": 1.5},
        fill="tozeroy",
        fillcolor="rgba(48,86,211,0.12)",
        connectgaps=False,
        name=title,
        # Spend as every money chart shows it: the small-amount form (customdata).
        **({"hovertemplate": hovertemplate} if hovertemplate else {"hoverinfo": "x+y"}),
    )
    layout = go.Layout(
        template="none",
        height=48,
        margin={"l": 0, "r": 0, "t": 2, "b": 2},
        xaxis={"visible": False, "type": "category"},
        yaxis={"visible": False, "rangemode": "tozero"},
        showlegend=False,
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return go.Figure(data=[trace], layout=layout).to_plotly_json()


def overview_kpis(q: Query) -> Chart:
    """Today and this month: each figure with a small trend chart."""
    cur = q.currency
    chart = Chart(
        "overview_kpis",
        _("Usage today and this month"),
        columns=["period", "bucket_start", *(k for k, _ in KPIS)],
    )
    kpis = []
    any_calls = False
    spend_hover = f"%{{x}}: {MONEY_HOVER}<extra></extra>"
    for label, start, end, bucket in overview_periods(q):
        kw = {"filters": q.filters, "tz": q.tz, "quantiles": (0.5, 0.99)}
        s = usage.series(q.organization_id, start, end, bucket=bucket, whole=True, **kw)
        whole, trend = s.whole[None], s.groups[None]
        any_calls = any_calls or whole["calls"] > 0
        totals = _kpi_values(whole)
        points = [_kpi_values(p) for p in trend]
        fmt = "%H:%M" if bucket == "hour" else "%Y-%m-%d"
        x = [p["start"].astimezone(q.tz).strftime(fmt) for p in trend]
        tiles = []
        for kind, lazy_title in KPIS:
            title = str(lazy_title)
            ys = [money_axis(v[kind]) if kind == "spend" else v[kind] for v in points]
            fig = copy.deepcopy(_sparkline(title, spend_hover if kind == "spend" else None))
            fig["data"][0].update({"x": x, "y": ys})
            if kind == "spend":
                fig["data"][0]["customdata"] = money_hover_texts(ys, cur)
            tiles.append(
                {
                    "kind": kind,
                    "title": title,
                    "value": _kpi_text(kind, totals[kind], cur),
                    "figure": fig,
                }
            )
        for t, v in zip(trend, points, strict=True):
            chart.rows.append(
                [
                    label,
                    iso_local(t["start"], q.tz),
                    *(
                        money_decimal(v[k], cur, exact=True) if k == "spend" else v[k]
                        for k, _ in KPIS
                    ),
                ]
            )
        kpis.append({"label": str(PERIOD_TITLES[label]), "tiles": tiles, "bucket": bucket})
    chart.kpis = kpis
    chart.note = str(CACHED_SHARE_NOTE)
    if not any_calls:
        chart.empty = _(
            "No calls this month yet. Create an API key and send a request through the "
            "gateway; usage shows up here within a minute."
        )
    return chart


def overview_top(q: Query) -> Chart:
    """This month's top models and keys by spend."""
    cur = q.currency
    _label, start, end, _b = overview_periods(q)[1]
    chart = Chart(
        "overview_top",
        _("Top models and keys this month"),
        columns=["kind", "id", "name", "calls", f"spend_{cur}"],
    )
    tables = []
    for column, title, noun in (
        ("model", _("Top models"), _("Model")),
        ("api_key_id", _("Top keys"), _("Key")),
    ):
        s = usage.series(
            q.organization_id, start, end, filters=q.filters, group_by=column, bucket=None, tz=q.tz
        )
        s = q.models_only(s, column, start, end)
        ranked = sorted(s.groups.items(), key=lambda kv: -kv[1][0]["cost"])[:5]
        rows = []
        for value, (p,) in ranked:
            label = q.names.label(column, value)
            chart.rows.append(
                [column, value, label, p["calls"], money_decimal(p["cost"], cur, exact=True)]
            )
            dim = {"model" if column == "model" else "key": value}
            link = q.calls_url(start=start, end=end, **dim)
            rows.append(
                [
                    (label, link),
                    (f"{p['calls']:,}", None),
                    (format_amount(p["cost"], cur, small=True), None),
                ]
            )
        tables.append(
            {
                "title": title,
                "headers": [noun, _("Calls"), _("Spend")],
                "numeric": [False, True, True],
                "rows": rows,
            }
        )
    chart.table = {"tables": tables}
    if not any(t["rows"] for t in tables):
        chart.empty = _("No calls this month yet.")
    return chart


def _sla_table(f: invoicing.SlaFigures) -> dict[str, Any]:
    """The month's SLA figures (``invoicing.sla_figures``) as the page's table, the
    availability linked to the SLA ledger."""
    pct = invoicing.percent_text
    link = reverse("invoicing:sla")
    left = (
        _("over by %(count)s") % {"count": f"{-f.budget_left:,}"}
        if f.budget_left < 0
        else f"{f.budget_left:,}"
    )
    table: dict[str, Any] = {
        "headers": [_("Figure"), _("This month")],
        "numeric": [False, True],
        "rows": [
            [(_("Availability target"), None), (pct(f.target_ppm), None)],
            [(_("Availability"), link), (pct(f.availability_ppm), link)],
            [(_("Calls"), None), (f"{f.calls:,}", None)],
            [(_("Failed calls"), None), (f"{f.failed:,}", None)],
            [(_("Failure budget"), None), (f"{f.budget:,}", None)],
            [(_("Budget left"), None), (left, None)],
        ],
    }
    if f.ttft_bound_ms:
        p99 = f"{f.ttft_p99_ms:,} ms" if f.ttft_p99_ms is not None else "—"
        table["rows"].append(
            [
                (
                    _("p99 time to first token (bound %(bound)s ms)") % {"bound": f.ttft_bound_ms},
                    None,
                ),
                (p99, None),
            ]
        )
    return table


def overview_sla(q: Query) -> Chart:
    """The SLA ledger's month so far (owners, admins, finance): the target,
    the availability, the failure budget and what is left of it."""
    org = q.org
    f = invoicing.sla_figures(org, invoicing.current_period(org, q.form.now))
    pct = invoicing.percent_text
    chart = Chart(
        "overview_sla",
        _("Availability this month (SLA)"),
        columns=[
            "period",
            "target_pct",
            "availability_pct",
            "calls",
            "failed_calls",
            "failure_budget",
            "budget_left",
        ],
    )
    chart.rows.append(
        [
            f.period,
            pct(f.target_ppm).removesuffix(" %"),
            pct(f.availability_ppm).removesuffix(" %"),
            f.calls,
            f.failed,
            f.budget,
            f.budget_left,
        ]
    )
    chart.table = _sla_table(f)
    chart.note = _(
        "Failed calls are those the platform or an upstream failed (5xx); client errors "
        "count as served. The failure budget is how many the target allows for the calls so far."
    )
    if f.breached:
        chart.summary = _("Below the target this month: a credit is drafted when the month ends.")
    return chart
