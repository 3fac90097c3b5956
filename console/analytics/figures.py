"""The analytics charts: each reads the hourly rollups through
``usage.analytics`` (never call records; billing reads invoicing's tables)
and returns a ``Chart``: a Plotly figure built with ``plotly.graph_objects``
and the numbers behind it, which are also what its CSV download holds.

Traces are built and validated by graph_objects without their data arrays,
which are set on the serialized figure: validating thousands of points one
by one would cost more than reading them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import plotly.graph_objects as go
from django.db.models import Sum
from django.db.models.functions import TruncMonth

from console.analytics.query import (
    QUANTILE_COLOURS,
    STATUS_COLOURS,
    TOKEN_COLOURS,
    Query,
)
from console.money import micro_to_decimal, minor_units
from usage import analytics
from usage.rating import discount_ppm_for

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


def _x(q: Query, points) -> list[str]:
    fmt = "%Y-%m-%d %H:%M" if q.bucket == "hour" else "%Y-%m-%d"
    return [p["start"].astimezone(q.tz).strftime(fmt) for p in points]


def _iso(t: datetime, tz) -> str:
    return t.astimezone(tz).isoformat()


def _money(micro: int) -> float:
    """Display only (a chart's axis); CSVs carry the exact decimal."""
    return float(micro_to_decimal(micro))


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 3) if whole else None


def _ms(value: float | None) -> float | None:
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
) -> dict:
    """The serialized figure: validated trace and layout objects, then the
    data arrays set on the result."""
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
        },
        barmode=barmode,
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
    )
    fig = go.Figure(data=[t for t, _ in traces], layout=layout).to_plotly_json()
    for trace, (_t, arrays) in zip(fig["data"], traces, strict=True):
        trace.update(arrays)
    return fig


def line(name: str, colour: str, x, y, *, dash: str | None = None, unit: str = "") -> tuple:
    trace = go.Scatter(
        name=name,
        mode="lines+markers" if len(x) <= 48 else "lines",
        line={"color": colour, "width": 2, "dash": dash},
        marker={"size": 4},
        connectgaps=False,
        hovertemplate=f"%{{y:,.4~r}}{unit}",
    )
    return trace, {"x": x, "y": y}


def bar(name: str, colour: str, x, y, *, unit: str = "") -> tuple:
    trace = go.Bar(name=name, marker={"color": colour}, hovertemplate=f"%{{y:,.6~r}}{unit}")
    return trace, {"x": x, "y": y}


def _time_title(q: Query) -> str:
    return f"{'Hour' if q.bucket == 'hour' else 'Day'} ({q.tz.key})"


def _empty_calls(q: Query) -> str:
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


def _series(q: Query, **kwargs) -> analytics.Series:
    kwargs.setdefault("bucket", q.bucket)
    return analytics.series(q.organization_id, q.start, q.end, filters=q.filters, tz=q.tz, **kwargs)


def _top(groups: dict, limit: int = MAX_GROUPS) -> tuple[list, list]:
    keys = list(groups)
    return keys[:limit], keys[limit:]


# --- latency -----------------------------------------------------------------


def latency(q: Query, *, which: str = "latency_ms") -> Chart:
    ttft = which == "ttft_ms"
    hist = "ttft" if ttft else "latency"
    name = "ttft" if ttft else "latency"
    title = "Time to first token" if ttft else "Total latency"
    count_col = "ttft_count" if ttft else "calls"
    y_title = "Time to first token (ms)" if ttft else "Latency (ms)"
    column = q.group_column("compare")
    if column is None:
        s = _series(q, quantiles=ALL_QUANTILES, hists=(hist,))
        points = s.groups[None]
        chart = Chart(
            name,
            title,
            columns=[
                "bucket_start",
                "series",
                "calls",
                *(f"{q_label(x)}_ms" for x in ALL_QUANTILES),
            ],
        )
        if not s.total(count_col):
            chart.empty = (
                _empty_calls(q)
                if not s.total("calls")
                else (
                    "None of these calls has a time to first token (embeddings and failed calls "
                    "have none)."
                )
            )
            return chart
        x = _x(q, points)
        traces = [
            line(
                q_label(qq),
                QUANTILE_COLOURS[qq],
                x,
                [_ms(p[which][qq]) for p in points],
                dash="dot" if qq == 0.999 else None,
                unit=" ms",
            )
            for qq in ALL_QUANTILES
        ]
        for p in points:
            chart.rows.append(
                [
                    _iso(p["start"], q.tz),
                    "all",
                    p[count_col],
                    *(_ms(p[which][qq]) for qq in ALL_QUANTILES),
                ]
            )
    else:
        qq = q.compared_quantile
        s = _series(q, group_by=column, quantiles=(qq,), hists=(hist,))
        chart = Chart(
            name,
            f"{title}, {q_label(qq)} by {GROUP_NOUNS[column]}",
            columns=["bucket_start", "series", "calls", f"{q_label(qq)}_ms"],
        )
        if not s.total(count_col):
            chart.empty = _empty_calls(q)
            return chart
        shown, rest = _top(s.groups)
        traces = []
        x = _x(q, s.groups[shown[0]])
        for i, group in enumerate(shown):
            points = s.groups[group]
            label = q.names.label(column, group)
            traces.append(
                line(
                    label,
                    q.names.colour(column, group, i),
                    x,
                    [_ms(p[which][qq]) for p in points],
                    unit=" ms",
                )
            )
            for p in points:
                chart.rows.append([_iso(p["start"], q.tz), label, p[count_col], _ms(p[which][qq])])
        if rest:
            chart.note = f"The {len(shown)} busiest of {len(s.groups)} are drawn."
    chart.figure = figure(traces, x_title=_time_title(q), y_title=y_title)
    return chart


def ttft(q: Query) -> Chart:
    return latency(q, which="ttft_ms")


# --- cache -------------------------------------------------------------------


def _hit_rate(p: dict) -> float | None:
    prompt = p["input_tokens"] + p["cache_read_tokens"] + p["cache_write_tokens"]
    return _pct(p["cache_read_tokens"], prompt)


def _prefix_hits(p: dict) -> int:
    """Calls with a prefix-cache hit: any cache hit but a response-cache one."""
    return p["cache_hit_calls"] - p["response_cache_calls"]


def cache_hit(q: Query) -> Chart:
    column = q.group_column("compare")
    s = _series(q, group_by=column)
    chart = Chart(
        "cache_hit",
        "Prefix-cache hit rate" + (f" by {GROUP_NOUNS[column]}" if column else ""),
        columns=[
            "bucket_start",
            "series",
            "calls",
            "calls_with_cache_hit",
            "prompt_tokens",
            "cached_prompt_tokens",
            "token_hit_rate_pct",
            "call_hit_share_pct",
            "prefix_hit_calls",
            "response_cache_calls",
            "prefix_hit_share_pct",
            "response_hit_share_pct",
        ],
    )
    if not s.total("calls"):
        chart.empty = _empty_calls(q)
        return chart
    shown, rest = _top(s.groups)
    x = _x(q, s.groups[shown[0]])
    traces = []
    for i, group in enumerate(shown):
        points = s.groups[group]
        label = q.names.label(column, group)
        colour = q.names.colour(column, group, i)
        if column is None:
            traces.append(
                line(
                    "Prompt tokens served from cache",
                    colour,
                    x,
                    [_hit_rate(p) for p in points],
                    unit=" %",
                )
            )
            traces.append(
                line(
                    "Calls with a prefix-cache hit",
                    "#E69F00",
                    x,
                    [_pct(_prefix_hits(p), p["calls"]) for p in points],
                    dash="dot",
                    unit=" %",
                )
            )
            traces.append(
                line(
                    "Calls answered from the response cache",
                    "#009E73",
                    x,
                    [_pct(p["response_cache_calls"], p["calls"]) for p in points],
                    dash="dash",
                    unit=" %",
                )
            )
        else:
            traces.append(line(label, colour, x, [_hit_rate(p) for p in points], unit=" %"))
        for p in points:
            prompt = p["input_tokens"] + p["cache_read_tokens"] + p["cache_write_tokens"]
            chart.rows.append(
                [
                    _iso(p["start"], q.tz),
                    label,
                    p["calls"],
                    p["cache_hit_calls"],
                    prompt,
                    p["cache_read_tokens"],
                    _hit_rate(p),
                    _pct(p["cache_hit_calls"], p["calls"]),
                    _prefix_hits(p),
                    p["response_cache_calls"],
                    _pct(_prefix_hits(p), p["calls"]),
                    _pct(p["response_cache_calls"], p["calls"]),
                ]
            )
    if rest:
        chart.note = f"The {len(shown)} busiest of {len(s.groups)} are drawn."
    chart.figure = figure(traces, x_title=_time_title(q), y_title="Hit rate (%)", y_suffix=" %")
    return chart


def cache_savings(q: Query) -> Chart:
    saved = analytics.cache_savings(
        q.organization_id,
        q.start,
        q.end,
        discount_ppm=discount_ppm_for(q.org.discount_rate),
        filters=q.filters,
        bucket=q.bucket,
        tz=q.tz,
    )
    cur = q.currency
    chart = Chart(
        "cache_savings",
        "Saved by prefix caching",
        columns=[
            "bucket_start",
            "model",
            "cached_prompt_tokens",
            f"saved_{cur}",
            "unpriced_cached_tokens",
        ],
    )
    if not saved:
        chart.empty = (
            _empty_calls(q)
            if not _series(q, bucket=None).total("calls")
            else "No cached prompt tokens in this range, so nothing was saved. Calls that "
            "share a prompt prefix (a system prompt, say) are served from the prefix cache."
        )
        return chart
    traces = []
    x = None
    total = 0
    for model, points in saved.items():
        x = x or _x(q, points)
        traces.append(
            bar(
                model,
                q.names.colour("model", model),
                x,
                [_money(p["saved"]) for p in points],
                unit=f" {cur}",
            )
        )
        for p in points:
            total += p["saved"]
            chart.rows.append(
                [
                    _iso(p["start"], q.tz),
                    model,
                    p["cache_read_tokens"],
                    micro_to_decimal(p["saved"]),
                    p["unpriced_tokens"],
                ]
            )
    chart.note = (
        f"{micro_to_decimal(total).quantize(Decimal('0.01'))} {cur} in all: cached prompt tokens "
        "priced at the input price minus the cache-read price of the price book, at your rates."
    )
    chart.figure = figure(traces, x_title=_time_title(q), y_title=f"Saved ({cur})", barmode="stack")
    return chart


# --- spend -------------------------------------------------------------------


STACK_TITLES = {"model": "model", "sub_account": "sub-account", "key": "API key"}


def spend(q: Query) -> Chart:
    stack = q.option("stack", "model")
    column = q.group_column("stack", "model")
    cur = q.currency
    s = _series(q, group_by=column)
    chart = Chart(
        "spend",
        f"Spend by {STACK_TITLES[stack]}",
        columns=["bucket_start", "series", "calls", f"spend_{cur}"],
    )
    if not s.total("calls"):
        chart.empty = _empty_calls(q)
        return chart
    groups = sorted(s.groups, key=lambda g: -sum(p["cost"] for p in s.groups[g]))
    shown, rest = groups[:MAX_GROUPS], groups[MAX_GROUPS:]
    x = _x(q, s.groups[groups[0]])
    traces = []
    for i, group in enumerate(shown):
        points = s.groups[group]
        label = q.names.label(column, group)
        traces.append(
            bar(
                label,
                q.names.colour(column, group, i),
                x,
                [_money(p["cost"]) for p in points],
                unit=f" {cur}",
            )
        )
    if rest:
        other = [sum(s.groups[g][i]["cost"] for g in rest) for i in range(len(s.buckets))]
        traces.append(bar("Other", "#BAB0AC", x, [_money(v) for v in other], unit=f" {cur}"))
    for group in groups:
        label = q.names.label(column, group)
        for p in s.groups[group]:
            chart.rows.append(
                [_iso(p["start"], q.tz), label, p["calls"], micro_to_decimal(p["cost"])]
            )
    chart.figure = figure(traces, x_title=_time_title(q), y_title=f"Spend ({cur})", barmode="stack")
    return chart


TOKEN_CLASSES = (
    ("input_tokens", "Input (uncached)"),
    ("cache_read_tokens", "Cache read"),
    ("cache_write_tokens", "Cache write"),
    ("output_tokens", "Output (incl. reasoning)"),
)


def tokens(q: Query) -> Chart:
    s = _series(q)
    points = s.groups[None]
    chart = Chart(
        "tokens",
        "Token volume by class",
        columns=["bucket_start", "calls", *(c for c, _ in TOKEN_CLASSES), "reasoning_tokens"],
    )
    if not s.total("calls"):
        chart.empty = _empty_calls(q)
        return chart
    x = _x(q, points)
    traces = [
        bar(label, TOKEN_COLOURS[col], x, [p[col] for p in points], unit=" tokens")
        for col, label in TOKEN_CLASSES
    ]
    for p in points:
        chart.rows.append(
            [
                _iso(p["start"], q.tz),
                p["calls"],
                *(p[c] for c, _ in TOKEN_CLASSES),
                p["reasoning_tokens"],
            ]
        )
    chart.figure = figure(traces, x_title=_time_title(q), y_title="Tokens", barmode="stack")
    return chart


def top_spenders(q: Query) -> Chart:
    cur = q.currency
    s = _series(q, group_by="api_key_id", bucket=None)
    chart = Chart(
        "top_spenders",
        "Top spenders (API keys)",
        columns=[
            "api_key_id",
            "api_key",
            "sub_account",
            "calls",
            "tokens",
            f"spend_{cur}",
            "share_pct",
        ],
    )
    if not s.total("calls"):
        chart.empty = _empty_calls(q)
        return chart
    from accounts.models import ApiKey

    subs = dict(ApiKey.objects.filter(pk__in=list(s.groups)).values_list("pk", "sub_account_id"))
    total = s.total("cost")
    ranked = sorted(s.groups.items(), key=lambda kv: -kv[1][0]["cost"])[:MAX_GROUPS]
    rows = []
    for key_id, (p,) in ranked:
        toks = sum(p[c] for c, _ in TOKEN_CLASSES)
        label = q.names.label("api_key_id", key_id)
        sub = q.names.label("sub_account_id", subs.get(key_id) or 0)
        share = _pct(p["cost"], total)
        chart.rows.append(
            [key_id, label, sub, p["calls"], toks, micro_to_decimal(p["cost"]), share]
        )
        rows.append(
            [
                (label, q.calls_url(key=key_id)),
                (sub, None),
                (f"{p['calls']:,}", None),
                (f"{toks:,}", None),
                (f"{micro_to_decimal(p['cost']).quantize(Decimal('0.01')):,} {cur}", None),
                (f"{share:.1f} %" if share is not None else "—", None),
            ]
        )
    chart.table = {
        "headers": ["API key", "Sub-account", "Calls", "Tokens", "Spend", "Share"],
        "numeric": [False, False, True, True, True, True],
        "rows": rows,
    }
    return chart


# --- errors ------------------------------------------------------------------

STATUS_CLASSES = (
    ("2xx", "2xx success", lambda p: p["calls_2xx"]),
    ("4xx", "4xx client error (not 429)", lambda p: p["calls_4xx"] - p["calls_429"]),
    ("429", "429 rate limited", lambda p: p["calls_429"]),
    ("5xx", "5xx server error", lambda p: p["calls_5xx"]),
)


def error_rate(q: Query) -> Chart:
    s = _series(q)
    points = s.groups[None]
    chart = Chart(
        "error_rate",
        "Error rate by status class",
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
        chart.empty = _empty_calls(q)
        return chart
    x = _x(q, points)
    traces = []
    for key, label, fn in STATUS_CLASSES[1:]:
        traces.append(
            line(
                label, STATUS_COLOURS[key], x, [_pct(fn(p), p["calls"]) for p in points], unit=" %"
            )
        )
    traces.append(
        line(
            "All errors (4xx and 5xx)",
            "#1d2330",
            x,
            [_pct(p["calls_4xx"] + p["calls_5xx"], p["calls"]) for p in points],
            dash="dot",
            unit=" %",
        )
    )
    for p in points:
        counts = [fn(p) for _k, _l, fn in STATUS_CLASSES]
        chart.rows.append(
            [
                _iso(p["start"], q.tz),
                p["calls"],
                *counts,
                _pct(p["calls_4xx"] + p["calls_5xx"], p["calls"]),
                _pct(counts[1], p["calls"]),
                _pct(counts[2], p["calls"]),
                _pct(counts[3], p["calls"]),
            ]
        )
    chart.figure = figure(
        traces, x_title=_time_title(q), y_title="Share of calls (%)", y_suffix=" %"
    )
    return chart


def status_counts(q: Query) -> Chart:
    s = _series(q)
    points = s.groups[None]
    chart = Chart(
        "status_counts",
        "Calls by status class",
        columns=["bucket_start", "calls", *(f"calls_{k}" for k, _l, _f in STATUS_CLASSES)],
    )
    if not s.total("calls"):
        chart.empty = _empty_calls(q)
        return chart
    x = _x(q, points)
    traces = [
        bar(label, STATUS_COLOURS[key], x, [fn(p) for p in points], unit=" calls")
        for key, label, fn in STATUS_CLASSES
    ]
    for p in points:
        chart.rows.append(
            [_iso(p["start"], q.tz), p["calls"], *(fn(p) for _k, _l, fn in STATUS_CLASSES)]
        )
    chart.figure = figure(traces, x_title=_time_title(q), y_title="Calls", barmode="stack")
    return chart


# --- billing -----------------------------------------------------------------


def _months(end: datetime, tz, count: int = 12) -> list[datetime]:
    local = (end - timedelta(microseconds=1)).astimezone(tz)
    y, m = local.year, local.month
    out = []
    for _ in range(count):
        out.append(datetime.combine(datetime(y, m, 1).date(), time.min, tzinfo=tz))  # noqa: DTZ001
        y, m = (y, m - 1) if m > 1 else (y - 1, 12)
    return out[::-1]


def billing(q: Query) -> Chart:
    """Invoiced (finalized invoices' totals by period), paid (succeeded
    invoice payments by month) and refunded (credit notes' refunds by
    month), for the twelve months up to the range's end. Read-only."""
    from invoicing.models import (
        CreditNote,
        Invoice,
        InvoiceStatus,
        Payment,
        PaymentKind,
        PaymentStatus,
    )

    cur = q.currency
    months = _months(q.end, q.tz)
    keys = [m.strftime("%Y-%m") for m in months]
    first = months[0]
    org_id = q.organization_id
    invoiced = dict.fromkeys(keys, 0)
    for period, total in (
        Invoice.objects.filter(organization_id=org_id, period__in=keys, currency=cur)
        .exclude(status__in=[InvoiceStatus.DRAFT, InvoiceStatus.VOID])
        .values_list("period")
        .annotate(t=Sum("total"))
    ):
        invoiced[period] = total or 0
    scale = Decimal(10) ** minor_units(cur)

    def monthly(qs, column):
        out = dict.fromkeys(keys, Decimal(0))
        rows = (
            qs.filter(organization_id=org_id, currency=cur, created_at__gte=first)
            .annotate(month=TruncMonth("created_at", tzinfo=q.tz))
            .values_list("month")
            .annotate(t=Sum(column))
        )
        for month, total in rows:
            k = month.astimezone(q.tz).strftime("%Y-%m")
            if k in out:
                out[k] += Decimal(total or 0) / scale
        return out

    paid = monthly(
        Payment.objects.filter(kind=PaymentKind.INVOICE, status=PaymentStatus.SUCCEEDED),
        "amount_minor",
    )
    refunded = monthly(CreditNote.objects.all(), "refund_minor")
    chart = Chart(
        "billing",
        "Invoiced, paid and refunded per month",
        columns=["month", f"invoiced_{cur}", f"paid_{cur}", f"refunded_{cur}"],
    )
    for k in keys:
        chart.rows.append([k, micro_to_decimal(invoiced[k]), paid[k], refunded[k]])
    if not any(invoiced.values()) and not any(paid.values()) and not any(refunded.values()):
        chart.empty = (
            "No invoices, payments or refunds in the twelve months up to "
            f"{keys[-1]}. Invoices appear here once a month is invoiced (Billing)."
        )
        return chart
    traces = [
        bar("Invoiced", "#4E79A7", keys, [_money(invoiced[k]) for k in keys], unit=f" {cur}"),
        bar("Paid", "#59A14F", keys, [float(paid[k]) for k in keys], unit=f" {cur}"),
        bar("Refunded", "#E15759", keys, [float(refunded[k]) for k in keys], unit=f" {cur}"),
    ]
    chart.figure = figure(
        traces, x_title="Month", y_title=f"Amount ({cur})", barmode="group", x_type="category"
    )
    return chart


# --- overview ----------------------------------------------------------------

KPIS = (
    ("spend", "Spend"),
    ("calls", "Requests"),
    ("error_rate", "Error rate"),
    ("p50", "Latency p50"),
    ("p99", "Latency p99"),
    ("ttft_p50", "TTFT p50"),
    ("hit_rate", "Cache hit rate"),
)


def _kpi_values(p: dict) -> dict:
    return {
        "spend": p["cost"],
        "calls": p["calls"],
        "error_rate": _pct(p["calls_4xx"] + p["calls_5xx"], p["calls"]),
        "p50": _ms(p["latency_ms"][0.5]),
        "p99": _ms(p["latency_ms"][0.99]),
        "ttft_p50": _ms(p["ttft_ms"][0.5]),
        "hit_rate": _hit_rate(p),
    }


def _kpi_text(kind: str, value, cur: str) -> str:
    if value is None:
        return "—"
    if kind == "spend":
        return f"{micro_to_decimal(value).quantize(Decimal('0.01')):,} {cur}"
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


def overview_kpis(q: Query) -> Chart:
    """Today and this month: each figure with a small trend chart."""
    cur = q.currency
    chart = Chart(
        "overview_kpis",
        "Usage today and this month",
        columns=["period", "bucket_start", *(k for k, _ in KPIS)],
    )
    kpis = []
    any_calls = False
    for label, start, end, bucket in overview_periods(q):
        kw = {"filters": q.filters, "tz": q.tz, "quantiles": (0.5, 0.99)}
        whole = analytics.series(q.organization_id, start, end, bucket=None, **kw).groups[None][0]
        trend = analytics.series(q.organization_id, start, end, bucket=bucket, **kw).groups[None]
        any_calls = any_calls or whole["calls"] > 0
        totals = _kpi_values(whole)
        points = [_kpi_values(p) for p in trend]
        fmt = "%H:%M" if bucket == "hour" else "%Y-%m-%d"
        x = [p["start"].astimezone(q.tz).strftime(fmt) for p in trend]
        tiles = []
        for kind, title in KPIS:
            ys = [_money(v[kind]) if kind == "spend" else v[kind] for v in points]
            trace = go.Scatter(
                # Markers too: a day or hour alone between gaps is still seen.
                mode="lines+markers",
                marker={"size": 3, "color": "#3056d3"},
                line={"color": "#3056d3", "width": 1.5},
                fill="tozeroy",
                fillcolor="rgba(48,86,211,0.12)",
                connectgaps=False,
                hoverinfo="x+y",
                name=title,
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
            fig = go.Figure(data=[trace], layout=layout).to_plotly_json()
            fig["data"][0].update({"x": x, "y": ys})
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
                    _iso(t["start"], q.tz),
                    *(micro_to_decimal(v[k]) if k == "spend" else v[k] for k, _ in KPIS),
                ]
            )
        kpis.append({"label": label, "tiles": tiles, "bucket": bucket})
    chart.kpis = kpis
    if not any_calls:
        chart.empty = (
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
        "Top models and keys this month",
        columns=["kind", "id", "name", "calls", f"spend_{cur}"],
    )
    tables = []
    for column, title in (("model", "Top models"), ("api_key_id", "Top keys")):
        s = analytics.series(
            q.organization_id, start, end, filters=q.filters, group_by=column, bucket=None, tz=q.tz
        )
        ranked = sorted(s.groups.items(), key=lambda kv: -kv[1][0]["cost"])[:5]
        rows = []
        for value, (p,) in ranked:
            label = q.names.label(column, value)
            chart.rows.append([column, value, label, p["calls"], micro_to_decimal(p["cost"])])
            dim = {"model" if column == "model" else "key": value}
            link = q.calls_url(start=start, end=end, **dim)
            rows.append(
                [
                    (label, link),
                    (f"{p['calls']:,}", None),
                    (f"{micro_to_decimal(p['cost']).quantize(Decimal('0.01')):,} {cur}", None),
                ]
            )
        tables.append(
            {
                "title": title,
                "headers": [title[4:].capitalize()[:-1], "Calls", "Spend"],
                "numeric": [False, True, True],
                "rows": rows,
            }
        )
    chart.table = {"tables": tables}
    if not any(t["rows"] for t in tables):
        chart.empty = "No calls this month yet."
    return chart
