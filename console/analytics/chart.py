"""What every analytics chart shares: the ``Chart`` a builder returns (a
Plotly figure plus the rows of its CSV), the figure, line and bar builders,
and the small helpers that read ``usage.analytics.series`` for a ``Query``
and format its points.

Each page's charts live in a module of their own (``latency``, ``cache``,
``spend``, ``errors``, ``billing``, ``overview``, ``nodes``,
``breakdowns``); they read the hourly rollups through ``series_of``, never
call records.

Traces are built and validated by graph_objects without their data arrays,
which are set on the serialized figure: validating thousands of points one
by one would cost more than reading them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import plotly.graph_objects as go

from console.analytics.query import Query
from console.money import chart_tickformat, micro_to_decimal
from usage import facade as usage

ALL_QUANTILES = (0.5, 0.9, 0.99, 0.999)
GROUP_NOUNS = {"model": "model", "node_id": "node", "api_key_id": "API key",
               "sub_account_id": "sub-account"}  # fmt: skip
MAX_GROUPS = 10  # lines or stacks per chart; the rest is summed as "other" where it adds up


@dataclass
class Chart:
    """A chart's figure (``None`` when there is nothing to draw), the rows of
    its CSV, and what to say instead when it is empty."""

    name: str
    title: str
    figure: dict | None = None
    columns: list[str] = field(default_factory=list)
    rows: list[list] = field(default_factory=list)
    empty: str | None = None
    note: str | None = None
    table: dict | None = None  # {"headers": [...], "rows": [[(text, href), ...]]}
    kpis: list | None = None


def q_label(q: float) -> str:
    return f"p{q * 100:g}"


def x_labels(q: Query, points) -> list[str]:
    fmt = "%Y-%m-%d %H:%M" if q.bucket == "hour" else "%Y-%m-%d"
    return [p["start"].astimezone(q.tz).strftime(fmt) for p in points]


def iso_local(t: datetime, tz) -> str:
    return t.astimezone(tz).isoformat()


def money_axis(micro: int) -> float:
    """Display only (a chart's axis); CSVs carry the exact decimal. Hover
    labels and ticks round it to the currency's decimals (``currency=`` of
    ``line``, ``bar`` and ``figure``)."""
    return float(micro_to_decimal(micro))


def _hover(number_format: str, unit: str, currency: str | None) -> str:
    """A trace's hover label: money with its currency's decimals
    (``console.money.chart_tickformat``: 2 for USD, 0 for JPY, 3 for BHD)."""
    if currency:
        return f"%{{y:{chart_tickformat(currency)}}} {currency.upper()}"
    return f"%{{y:{number_format}}}{unit}"


def share_pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 3) if whole else None


def round_ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def figure(
    traces: list[tuple[go.Scatter | go.Bar, dict]],
    *,
    x_title: str,
    y_title: str,
    barmode: str | None = None,
    height: int = 340,
    y_suffix: str = "",
    x_type: str = "date",
    y_currency: str | None = None,
) -> dict:
    """The serialized figure: validated trace and layout objects, then the
    data arrays set on the result. ``y_currency``: the y axis is money, its
    ticks get the currency's decimals."""
    layout = go.Layout(
        template="none",
        height=height,
        margin={"l": 64, "r": 16, "t": 12, "b": 56},
        font={"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.22, "x": 0},
        xaxis={"title": {"text": x_title}, "type": x_type, "gridcolor": "#eef1f6"},
        yaxis={
            "title": {"text": y_title},
            "gridcolor": "#eef1f6",
            "rangemode": "tozero",
            "ticksuffix": y_suffix,
            **({"tickformat": chart_tickformat(y_currency)} if y_currency else {}),
        },
        barmode=barmode,
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
    )
    fig = go.Figure(data=[t for t, _ in traces], layout=layout).to_plotly_json()
    for trace, (_t, arrays) in zip(fig["data"], traces, strict=True):
        trace.update(arrays)
    return fig


def line(
    name: str,
    colour: str,
    x,
    y,
    *,
    dash: str | None = None,
    unit: str = "",
    currency: str | None = None,
) -> tuple:
    trace = go.Scatter(
        name=name,
        mode="lines+markers" if len(x) <= 48 else "lines",
        line={"color": colour, "width": 2, "dash": dash},
        marker={"size": 4},
        connectgaps=False,
        hovertemplate=_hover(",.4~r", unit, currency),
    )
    return trace, {"x": x, "y": y}


def bar(name: str, colour: str, x, y, *, unit: str = "", currency: str | None = None) -> tuple:
    trace = go.Bar(
        name=name, marker={"color": colour}, hovertemplate=_hover(",.6~r", unit, currency)
    )
    return trace, {"x": x, "y": y}


def time_title(q: Query) -> str:
    return f"{'Hour' if q.bucket == 'hour' else 'Day'} ({q.tz.key})"


def empty_calls(q: Query) -> str:
    start = q.start.astimezone(q.tz).strftime("%Y-%m-%d %H:%M")
    end = q.end.astimezone(q.tz).strftime("%Y-%m-%d %H:%M")
    narrowed = any(q.form.dimension_filters().values())
    hint = (
        "Clear the model, node, key or sub-account filter, or widen the time range."
        if narrowed
        else "Widen the time range, or send calls through the gateway with an API key: "
        "they appear here within a minute of being made."
    )
    return f"No calls between {start} and {end} ({q.tz.key}). {hint}"


def series_of(q: Query, **kwargs) -> usage.Series:
    kwargs.setdefault("bucket", q.bucket)
    s = usage.series(q.organization_id, q.start, q.end, filters=q.filters, tz=q.tz, **kwargs)
    return q.models_only(s, kwargs.get("group_by"))


def split_top(groups: dict, limit: int = MAX_GROUPS) -> tuple[list, list]:
    keys = list(groups)
    return keys[:limit], keys[limit:]


def hit_rate(p: dict) -> float | None:
    prompt = p["input_tokens"] + p["cache_read_tokens"] + p["cache_write_tokens"]
    return share_pct(p["cache_read_tokens"], prompt)
