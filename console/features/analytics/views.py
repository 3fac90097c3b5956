"""Analytics pages and their chart partials.

A page renders the filter form and one placeholder per chart; htmx loads
each chart from its own partial URL (``analytics/charts/<name>/``, with the
page's query string), so the page itself answers quickly and a slow chart
never holds up the others. A chart's ``?format=csv`` is the numbers behind
it. Changing a filter swaps the form and the placeholders (``#analytics``)
and pushes the new URL, so every view can be shared as a link."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import orjson
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from accounts.facade import Perm, org_view
from console.features.analytics import (
    billing,
    breakdowns,
    cache,
    circuits,
    errors,
    latency,
    nodes,
    overview,
    spend,
)
from console.features.analytics.chart import Chart, mark_partial
from console.features.analytics.csv_labels import CSV_LABELS
from console.features.analytics.forms import CACHE_COMPARE, COMPARE, AnalyticsForm
from console.features.analytics.query import Query
from console.kernel.crypto import no_store
from console.kernel.csv_header import header_line
from console.kernel.db_router import replica_reads
from usage.facade import model_names, tag_keys

USAGE = (Perm.USAGE_VIEW_ALL, Perm.USAGE_VIEW_OWN)
BILLING = (Perm.BILLING_VIEW,)


@dataclass(frozen=True)
class ChartSpec:
    build: Callable[[Query], Chart]
    perms: tuple[Perm, ...] = USAGE
    kind: str = "figure"  # figure, table or kpis


CHARTS: dict[str, ChartSpec] = {
    "latency": ChartSpec(latency.latency),
    "ttft": ChartSpec(latency.ttft),
    "time_breakdown": ChartSpec(breakdowns.time_breakdown),
    "cache_hit": ChartSpec(cache.cache_hit),
    "cache_savings": ChartSpec(cache.cache_savings),
    "spend": ChartSpec(spend.spend),
    "tokens": ChartSpec(spend.tokens),
    "top_spenders": ChartSpec(spend.top_spenders, kind="table"),
    "spend_attribution": ChartSpec(spend.attribution_chart),
    "error_rate": ChartSpec(errors.error_rate),
    "status_counts": ChartSpec(errors.status_counts),
    "refusals": ChartSpec(breakdowns.refusals),
    "node_table": ChartSpec(nodes.node_table, kind="table"),
    "node_latency": ChartSpec(nodes.node_latency),
    "node_cache": ChartSpec(nodes.node_cache),
    "node_health": ChartSpec(nodes.node_health),
    "node_load": ChartSpec(nodes.node_load, kind="table"),
    "circuit_openings": ChartSpec(circuits.circuit_openings),
    "billing": ChartSpec(billing.billing, perms=BILLING),
    "overview_kpis": ChartSpec(overview.overview_kpis, kind="kpis"),
    "overview_top": ChartSpec(overview.overview_top, kind="tables"),
    "overview_sla": ChartSpec(overview.overview_sla, perms=BILLING, kind="table"),
}


@dataclass(frozen=True)
class PageSpec:
    """A page's title, intro and notes are lazy: translated when shown (issue 18)."""

    title: str
    charts: tuple[str, ...]
    fields: tuple[str, ...]
    perms: tuple[Perm, ...] = USAGE
    intro: str = ""
    notes: tuple[str, ...] = ()
    # Said only while one of these filters is set: ((fields, note), ...).
    filter_notes: tuple[tuple[tuple[str, ...], str], ...] = ()
    compare: Sequence[tuple[str, Any]] = ()  # the compare field's choices on this page


_DIMS = ("model", "node", "key", "sub_account", "protocol", "stream")
_RANGE = ("range", "from", "to")
PAGES: dict[str, PageSpec] = {
    "latency": PageSpec(
        gettext_lazy("Latency"),
        ("latency", "ttft", "time_breakdown"),
        (*_RANGE, *_DIMS, "compare", "pct", "refresh"),
        intro=gettext_lazy(
            "Percentiles of total latency and of time to first token, from the hourly "
            "latency sketches (within one percent of the exact values), and where the time of "
            "a call goes: queue, gateway overhead, upstream to first token and decode."
        ),
        filter_notes=(
            (
                ("protocol", "stream"),
                gettext_lazy(
                    "Protocol and streaming are known for calls made since they began to be "
                    "recorded: older calls do not appear under these two filters."
                ),
            ),
        ),
        compare=COMPARE,
    ),
    "cache": PageSpec(
        gettext_lazy("Cache"),
        ("cache_hit", "cache_savings"),
        (*_RANGE, *_DIMS, "compare", "refresh"),
        intro=gettext_lazy(
            "Prefix-cache hit rate (cached prompt tokens over all prompt tokens, and the "
            "share of calls with a prefix-cache hit), the share of calls answered from the "
            "response cache, and what caching saved at your price-book rates."
        ),
        notes=(
            gettext_lazy(
                "A response-cache hit bills its whole prompt as cache reads, so it counts in the "
                "share of prompt tokens served from cache (and in what caching saved) too."
            ),
        ),
        compare=CACHE_COMPARE,
    ),
    "spend": PageSpec(
        gettext_lazy("Spend"),
        ("spend", "tokens", "top_spenders", "spend_attribution"),
        (*_RANGE, *_DIMS, "stack", "attribute", "tag_key", "refresh"),
        intro=gettext_lazy(
            "Spend as rated at ingest, stacked by model, sub-account or key; token volume "
            "by billed class; the keys that spent most, linked to their calls; and spend "
            "grouped by a tag's value or by end user, as your callers tagged their calls."
        ),
    ),
    "errors": PageSpec(
        gettext_lazy("Errors"),
        ("error_rate", "status_counts", "refusals", "circuit_openings"),
        (*_RANGE, *_DIMS, "refresh"),
        intro=gettext_lazy(
            "Share of calls per status class in each time bucket, the calls the "
            "gateway refused by cause (a rate limit, a spend cap or the prepaid balance, or a "
            "full queue), and each time a gateway opened a node's circuit breaker."
        ),
    ),
    "nodes": PageSpec(
        gettext_lazy("Nodes"),
        ("node_load", "node_health", "node_table", "node_latency", "node_cache"),
        (*_RANGE, "model", "key", "sub_account", "pct", "refresh"),
        intro=gettext_lazy(
            "Each inference node's load as last probed, its health over the range, and "
            "its latency percentiles and prefix-cache hit rate."
        ),
    ),
    "billing": PageSpec(
        gettext_lazy("Billing"),
        ("billing",),
        (*_RANGE,),
        perms=BILLING,
        intro=gettext_lazy(
            "Invoiced (by issue date), paid (by payment date) and refunded (by refund date, "
            "completed refunds only) in the selected range, per day, or per month for ranges "
            "longer than five weeks. Read-only; invoices and refunds are managed under Billing."
        ),
    ),
}


def _form(request) -> AnalyticsForm:
    return AnalyticsForm(request.GET, actor=request.actor, now=timezone.now())


def _tabs(actor) -> list[tuple[str, str, str]]:
    tabs = [
        (name, spec.title, reverse(f"analytics:{name}"))
        for name, spec in PAGES.items()
        if any(actor.can(p) for p in spec.perms)
    ]
    user = actor.user
    # Platform staff only (see console.features.analytics.margin): no role shows it.
    if user.is_active and user.is_staff:
        tabs.append(("margin", _("Margin"), reverse("analytics:margin")))
    return tabs


def _page(request, name: str):
    spec = PAGES[name]
    form = _form(request)
    valid = form.is_valid()
    form.prepare_choices()
    if spec.compare:
        form.fields["compare"].choices = spec.compare
    params = form.params()
    query = f"?{urlencode(params)}" if params else ""
    charts = []
    if valid:
        for chart in spec.charts:
            if any(request.actor.can(p) for p in CHARTS[chart].perms):
                charts.append({"name": chart, "url": reverse(f"analytics:chart_{chart}") + query})
    context = {
        "page": name,
        "spec": spec,
        "form": form,
        "fields": [form[f] for f in spec.fields],
        "charts": charts,
        "params": params,
        "query": query,
        "tabs": _tabs(request.actor),
        "refresh": params.get("refresh") == "1",
        "model_names": model_names(),
        "tag_keys": _tag_keys(request.actor, form) if valid and "tag_key" in spec.fields else [],
        "range_text": _range_text(form, name) if valid else "",
        "sees_all": request.actor.can(Perm.USAGE_VIEW_ALL),
        "notes": [
            *spec.notes,
            *(note for wanted, note in spec.filter_notes if any(params.get(f) for f in wanted)),
        ],
    }
    template = "console/analytics/page.html"
    if request.htmx and request.htmx.target == "analytics":
        template = "console/analytics/_body.html"
    return render(request, template, context)


def _tag_keys(actor, form: AnalyticsForm) -> list[str]:
    """The tag keys the organization's calls carried in the range (the tag key's choices)."""
    d = form.cleaned_data
    return tag_keys(organization_id=actor.organization_id, start=d["start"], end=d["end"])


def _range_text(form: AnalyticsForm, page: str = "") -> str:
    d = form.cleaned_data
    tz = form.tz
    fmt = "%Y-%m-%d %H:%M"
    per = "hour" if d["bucket"] == "hour" else "day"
    if page == "billing":  # money is drawn per day or month, never per hour
        per = "day" if d["end"] - d["start"] <= billing.DAILY_UP_TO else "month"
    text = {
        "hour": _("%(start)s to %(end)s (%(zone)s), per hour"),
        "day": _("%(start)s to %(end)s (%(zone)s), per day"),
        "month": _("%(start)s to %(end)s (%(zone)s), per month"),
    }[per]
    return text % {
        "start": d["start"].astimezone(tz).strftime(fmt),
        "end": d["end"].astimezone(tz).strftime(fmt),
        "zone": tz.key,
    }


def filter_problems(form) -> str:
    """A form's errors in one line, each after its field's (translated) label."""
    parts = []
    for name, problems in form.errors.items():
        field = form.fields.get(name)
        label = field.label if field is not None and field.label else name
        parts.append(
            _("%(field)s: %(errors)s")
            % {"field": label, "errors": " ".join(str(e) for e in problems)}
        )
    return _("; ").join(parts)


def _page_view(name: str):
    spec = PAGES[name]

    @require_GET
    @vary_on_headers("HX-Request", "HX-Target")
    @org_view(*spec.perms, any_of=True)
    @replica_reads
    def view(request):
        return _page(request, name)

    view.__name__ = f"{name}_page"
    return view


@require_GET
@org_view(*USAGE, *BILLING, any_of=True)
def index(request):
    first = _tabs(request.actor)
    return redirect(first[0][2] if first else reverse("console:overview"))


def _json_for_script(data) -> str:
    """JSON safe inside ``<script type="application/json">``."""
    raw = orjson.dumps(data).decode()
    return raw.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _csv_cell(value) -> str:
    text = "" if value is None else str(value)
    # Spreadsheets run cells that start with these as formulas.
    return "'" + text if text[:1] in ("=", "+", "-", "@") and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_response(chart: Chart, request) -> HttpResponse:
    out = io.StringIO()
    out.write(header_line(chart.columns, CSV_LABELS, request=request))
    writer = csv.writer(out)
    for row in chart.rows:
        writer.writerow([_csv_cell(v) for v in row])
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    slug = request.actor.organization.slug
    response["Content-Disposition"] = f'attachment; filename="{slug}-{chart.name}-{stamp}.csv"'
    return no_store(response)


def _chart_view(name: str):
    spec = CHARTS[name]

    @require_GET
    @org_view(*spec.perms, any_of=True)
    @replica_reads
    def view(request):
        form = _form(request)
        if not form.is_valid():
            problems = filter_problems(form)
            return render(
                request,
                "console/analytics/_chart_error.html",
                {"name": name, "errors": problems},
                status=400,
            )
        q = Query.of(request.actor, form)
        chart = spec.build(q)
        mark_partial(q, chart)
        if request.GET.get("format") == "csv":
            return _csv_response(chart, request)
        params = form.params()
        url = reverse(f"analytics:chart_{name}")
        query = urlencode(params)
        context = {
            "chart": chart,
            "kind": spec.kind,
            "url": f"{url}?{query}" if query else url,
            "csv_url": f"{url}?{urlencode({**params, 'format': 'csv'})}",
            "refresh": params.get("refresh") == "1",
            "figure_json": _json_for_script(chart.figure) if chart.figure else "",
            "kpis": [
                {**p, "tiles": [{**t, "json": _json_for_script(t["figure"])} for t in p["tiles"]]}
                for p in (chart.kpis or [])
            ],
        }
        return render(request, "console/analytics/_chart.html", context)

    view.__name__ = f"chart_{name}"
    return view


PAGE_VIEWS = {name: _page_view(name) for name in PAGES}
CHART_VIEWS = {name: _chart_view(name) for name in CHARTS}
