"""What every analytics chart shares: the ``Chart`` a builder returns (a
Plotly figure plus the rows of its CSV), the figure, line and bar builders,
and the small helpers that read ``usage.charts.series`` for a ``Query``
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
from datetime import UTC, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal

import plotly.graph_objects as go
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.features.analytics.query import Query
from console.kernel.money import MICRO, chart_tickformat, format_amount, micro_to_decimal
from usage import facade as usage

ALL_QUANTILES = (0.5, 0.9, 0.99, 0.999)
# Chart titles say what a chart is split by: "… by model" (translated when shown).
GROUP_NOUNS = {"model": gettext_lazy("model"), "node_id": gettext_lazy("node"),
               "api_key_id": gettext_lazy("API key"),
               "sub_account_id": gettext_lazy("sub-account")}  # fmt: skip
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
    summary: str | None = None  # the range's total, said above the chart
    partial: str | None = None  # the last bucket is still running: said under it

    def total_row(self, *cells) -> None:
        """The CSV's last row: the range's total (``bucket_start`` "total",
        so a script summing the buckets can skip it)."""
        self.rows.append(["total", *cells])


def q_label(q: float) -> str:
    return f"p{q * 100:g}"


def x_labels(q: Query, points) -> list[str]:
    fmt = "%Y-%m-%d %H:%M" if q.bucket == "hour" else "%Y-%m-%d"
    return [p["start"].astimezone(q.tz).strftime(fmt) for p in points]


def iso_local(t: datetime, tz) -> str:
    return t.astimezone(tz).isoformat()


def money_axis(micro: int) -> float:
    """Display only (a chart's axis); CSVs carry the exact decimal. Ticks
    round it to the currency's decimals (``y_currency=`` of ``figure``);
    hover labels show it in the small-amount form (``currency=`` of ``line``
    and ``bar``: ``money_hover_texts``)."""
    return float(micro_to_decimal(micro))


MONEY_HOVER = "%{customdata}"


def _hover(number_format: str, unit: str, currency: str | None) -> str:
    """A trace's hover label: money as the kernel's small-amount form (the
    point's text in ``customdata``, see ``money_hover_texts``)."""
    if currency:
        return MONEY_HOVER
    return f"%{{y:{number_format}}}{unit}"


def money_hover_texts(y, currency: str) -> list[str]:
    """Each money point's hover text (``y`` in currency units, as
    ``money_axis`` gives them): the currency's decimals, and fractions of a
    cent told apart (``"0.0031 USD"``, ``console.kernel.money``'s
    ``small=True``), never ``"< 0.01 USD"`` for every small point."""
    texts = []
    for v in y:
        if v is None:
            texts.append("")
            continue
        micro = (Decimal(str(v)) * MICRO).to_integral_value(rounding=ROUND_HALF_UP)
        texts.append(format_amount(int(micro), currency, small=True))
    return texts


def _money_arrays(x, y, currency: str | None) -> dict:
    arrays = {"x": x, "y": y}
    if currency:
        arrays["customdata"] = money_hover_texts(y, currency)
    return arrays


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
    return trace, _money_arrays(x, y, currency)


def bar(name: str, colour: str, x, y, *, unit: str = "", currency: str | None = None) -> tuple:
    trace = go.Bar(
        name=name, marker={"color": colour}, hovertemplate=_hover(",.6~r", unit, currency)
    )
    return trace, _money_arrays(x, y, currency)


def time_title(q: Query) -> str:
    what = _("Hour") if q.bucket == "hour" else _("Day")
    return f"{what} ({q.tz.key})"


def busiest_note(shown: int, groups: int) -> str:
    """Said under a chart that draws only the busiest of its groups."""
    return _("The %(shown)d busiest of %(groups)d are drawn.") % {
        "shown": shown,
        "groups": groups,
    }


def empty_calls(q: Query) -> str:
    start = q.start.astimezone(q.tz).strftime("%Y-%m-%d %H:%M")
    end = q.end.astimezone(q.tz).strftime("%Y-%m-%d %H:%M")
    narrowed = any(q.form.dimension_filters().values())
    hint = (
        _("Clear the model, node, key or sub-account filter, or widen the time range.")
        if narrowed
        else _(
            "Widen the time range, or send calls through the gateway with an API key: "
            "they appear here within a minute of being made."
        )
    )
    return _("No calls between %(start)s and %(end)s (%(zone)s). %(hint)s") % {
        "start": start,
        "end": end,
        "zone": q.tz.key,
        "hint": hint,
    }


PARTIAL_FILL = "rgba(120,130,150,0.10)"


def last_bucket(q: Query) -> tuple[datetime, datetime]:
    """The start and natural end of the range's last bucket (an hour, or a
    local day), in the organization's time zone."""
    last = (q.end - timedelta(microseconds=1)).astimezone(q.tz)
    if q.bucket == "hour":
        start = last.astimezone(UTC).replace(minute=0, second=0, microsecond=0).astimezone(q.tz)
        return start, start + timedelta(hours=1)
    day = last.date()
    return (
        datetime.combine(day, time.min, tzinfo=q.tz),
        datetime.combine(day + timedelta(days=1), time.min, tzinfo=q.tz),
    )


def mark_partial(q: Query, chart: Chart) -> None:
    """When the last bucket of a chart over time is still running (now is
    inside it), draw it lighter and say so: its bars are faded, a grey band
    lies behind it, and a note under the chart says its figures will grow."""
    fig = chart.figure
    if not fig or fig.get("layout", {}).get("xaxis", {}).get("type") != "date":
        return
    start, end = last_bucket(q)
    now = q.form.now
    if not start <= now < end:
        return
    fmt = "%Y-%m-%d %H:%M" if q.bucket == "hour" else "%Y-%m-%d"
    label = start.strftime(fmt)
    marked = False
    for trace in fig["data"]:
        x = trace.get("x")
        if not x or x[-1] != label:
            continue
        marked = True
        if trace.get("type") == "bar":
            trace.setdefault("marker", {})["opacity"] = [1.0] * (len(x) - 1) + [0.4]
    if not marked:
        return
    half = (end - start) / 2
    shape_fmt = "%Y-%m-%d %H:%M"
    fig["layout"].setdefault("shapes", []).append(
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": (start - half).strftime(shape_fmt),
            "x1": (start + half).strftime(shape_fmt),
            "y0": 0,
            "y1": 1,
            "fillcolor": PARTIAL_FILL,
            "line": {"width": 1, "dash": "dot", "color": "#9aa3b5"},
            "layer": "below",
        }
    )
    fig["layout"].setdefault("annotations", []).append(
        {
            "xref": "x",
            "yref": "paper",
            "x": start.strftime(shape_fmt),
            "y": 1,
            "yanchor": "bottom",
            "text": _("so far"),
            "showarrow": False,
            "font": {"size": 11, "color": "#6b7385"},
        }
    )
    until = end.strftime("%H:%M" if q.bucket == "hour" else "%Y-%m-%d %H:%M")
    if q.bucket == "hour":
        text = _(
            "The last hour (%(label)s) is still running: its figures will grow until %(until)s."
        )
    else:
        text = _("Today (%(label)s) is still running: its figures will grow until %(until)s.")
    chart.partial = text % {"label": label, "until": until}


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
