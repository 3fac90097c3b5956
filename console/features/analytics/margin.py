"""The margin page: what customers were charged, what the upstream vendors
charge for the same calls, and the difference, by model, by channel and by
organization, across every organization, with a CSV for finance.

Platform staff only (``user.is_staff``): a reseller's costs are no
organization's business, so everyone else, organization owners and finance
included, gets a 404 (the page does not exist for them), not a 403, and it
is in no organization's navigation. The figures are ``usage.facade.margin_report``'s,
read from the rollups, per currency; amounts are formatted by ``console.kernel.money``
with as many decimals as they need (``format_amount``, exact: calls cost fractions of
a cent, and rounding to cents would show a model's margin as 0.00), so the
page and the CSV show the same figures to the micro-unit; the margin share
is integer basis points, shown with two decimals.

Ranges are whole UTC hours (the rollups' grain): presets like the other
analytics pages, or a custom range whose start is floored and end ceiled to
the hour, said on the page. The chart (revenue and vendor cost per UTC day,
per currency) is drawn by plotly.js from a figure built here, as on the
other analytics pages.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, time, timedelta
from urllib.parse import urlencode

from django import forms
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from console.features.analytics.chart import figure, line, money_axis
from console.features.analytics.csv_labels import MARGIN_CSV_LABELS
from console.features.analytics.forms import MAX_RANGE, RANGES
from console.features.analytics.views import _json_for_script, _tabs
from console.kernel.crypto import no_store
from console.kernel.csv_header import header_line
from console.kernel.money import format_amount, micro_to_decimal
from usage.facade import MarginLine, MarginReport, csv_text, margin_report

MARGIN_RANGES = [*RANGES[:-1], ("last_month", gettext_lazy("Last month")), RANGES[-1]]
DEFAULT_RANGE = "30d"
_HOUR = timedelta(hours=1)
TABLES = (
    ("by_model", gettext_lazy("By model"), gettext_lazy("Model")),
    ("by_channel", gettext_lazy("By channel"), gettext_lazy("Channel")),
    ("by_organization", gettext_lazy("By organization"), gettext_lazy("Organization")),
)
CSV_COLUMNS = [
    "table",
    "key",
    "name",
    "currency",
    "calls",
    "revenue",
    "vendor_cost",
    "margin",
    "margin_pct",
    "calls_without_comparable_cost",
]
HEADERS = [
    gettext_lazy("Calls"),
    gettext_lazy("Revenue"),
    gettext_lazy("Vendor cost"),
    gettext_lazy("Margin"),
    gettext_lazy("Margin %"),
    gettext_lazy("Without a comparable cost"),
]
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


def is_platform_staff(user) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def _floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil_hour(t: datetime) -> datetime:
    f = _floor_hour(t)
    return f if f == t else f + _HOUR


class MarginForm(forms.Form):
    """The range: a preset, or a custom start and end (UTC), in whole hours."""

    range = forms.ChoiceField(
        required=False, choices=MARGIN_RANGES, label=gettext_lazy("Time range")
    )

    def __init__(self, data=None, *, now: datetime | None = None, **kwargs):
        self.given = data if data is not None else {}
        if data is not None:
            data = data.copy()
            if not data.get("range") and not (data.get("from") or data.get("to")):
                data["range"] = DEFAULT_RANGE
        super().__init__(data, **kwargs)
        self.now = now or timezone.now()
        for name in ("from", "to"):
            self.fields[name].help_text = "UTC"
            self.fields[name].widget = forms.DateTimeInput(
                attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"
            )

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        start, end = data.get("from"), data.get("to")
        preset = data.get("range") or ("custom" if start or end else DEFAULT_RANGE)
        data["range"] = preset
        if preset == "custom":
            if start is None:
                self.add_error("from", _("Give the start of a custom range."))
                return data
            start = _floor_hour(start.replace(tzinfo=UTC) if start.tzinfo is None else start)
            end = end or self.now
            end = _ceil_hour(end.replace(tzinfo=UTC) if end.tzinfo is None else end)
            if start >= end:
                self.add_error("to", _("The end of the time range must be after its start."))
                return data
            if end - start > MAX_RANGE:
                self.add_error("to", _("A range can be at most 93 days; narrow it."))
                return data
        else:
            start, end = self._preset(preset)
        data["start"], data["end"] = start, end
        return data

    def _preset(self, preset: str) -> tuple[datetime, datetime]:
        end = _floor_hour(self.now) + _HOUR
        today = datetime.combine(self.now.astimezone(UTC).date(), time.min, tzinfo=UTC)
        first = today.replace(day=1)
        if preset == "1h":
            return end - _HOUR, end
        if preset == "24h":
            return end - timedelta(hours=24), end
        if preset == "month":
            return first, end
        if preset == "last_month":
            return (first - timedelta(days=1)).replace(day=1), first
        days = 7 if preset == "7d" else 30
        return today - timedelta(days=days - 1), end

    def params(self) -> dict[str, str]:
        return {k: self.given[k] for k in ("range", "from", "to") if self.given.get(k)}


MarginForm.base_fields = {
    "range": MarginForm.base_fields["range"],
    "from": forms.DateTimeField(required=False, label=gettext_lazy("From")),
    "to": forms.DateTimeField(required=False, label=gettext_lazy("To")),
}


def percent_text(bp: int | None) -> str:
    """Basis points as a percentage with two decimals ("12.34 %"); "—" for none."""
    if bp is None:
        return "—"
    sign = "-" if bp < 0 else ""
    whole, frac = divmod(abs(bp), 100)
    return f"{sign}{whole}.{frac:02d} %"


def _exact(micro: int) -> str:
    # Full micro-unit precision: the CSV's columns add up to the totals exactly.
    return f"{micro_to_decimal(micro):.6f}"


def _table(lines: list[MarginLine], title: str, noun: str, *, totals: bool = False) -> dict:
    return {
        "title": str(title),
        "headers": [str(noun), *(str(h) for h in HEADERS)],
        "numeric": [False, True, True, True, True, True, True],
        "rows": [
            [
                (_("All calls") if totals else m.label, None),
                (f"{m.calls:,}", None),
                (format_amount(m.revenue, m.currency, exact=True), None),
                (format_amount(m.cost, m.currency, exact=True), None),
                (format_amount(m.margin, m.currency, exact=True), None),
                (percent_text(m.margin_bp), None),
                (f"{m.uncosted_calls:,}", None),
            ]
            for m in lines
        ],
    }


def _chart(report: MarginReport) -> dict | None:
    if not report.days:
        return None
    traces = []
    currencies = sorted({d.currency for d in report.days})
    for i, cur in enumerate(currencies):
        days = [d for d in report.days if d.currency == cur]
        x = [d.day.isoformat() for d in days]
        colour = COLOURS[i % len(COLOURS)]
        revenue = [money_axis(d.revenue) for d in days]
        cost = [money_axis(d.cost) for d in days]
        names = {"currency": cur}
        traces.append(line(_("Revenue (%(currency)s)") % names, colour, x, revenue, currency=cur))
        traces.append(
            line(_("Vendor cost (%(currency)s)") % names, colour, x, cost, dash="dot", currency=cur)
        )
    one = currencies[0] if len(currencies) == 1 else None
    y_title = _("Amount (%(currency)s)") % {"currency": one} if one else _("Amount")
    return figure(traces, x_title=_("Day (UTC)"), y_title=y_title, y_currency=one)


def _csv_rows(report: MarginReport) -> list[list]:
    rows = []
    sections = [("total", report.totals), *((t, getattr(report, t)) for t, _, _ in TABLES)]
    for name, lines in sections:
        for m in lines:
            bp = m.margin_bp
            rows.append(
                [
                    name.removeprefix("by_"),
                    csv_text(str(m.key)),
                    csv_text(m.label),
                    m.currency,
                    m.calls,
                    _exact(m.revenue),
                    _exact(m.cost),
                    _exact(m.margin),
                    "" if bp is None else percent_text(bp).removesuffix(" %"),
                    m.uncosted_calls,
                ]
            )
    return rows


def _csv_response(report: MarginReport, request) -> HttpResponse:
    out = io.StringIO()
    out.write(header_line(CSV_COLUMNS, MARGIN_CSV_LABELS, request=request))
    writer = csv.writer(out)
    writer.writerows(_csv_rows(report))
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    span = f"{report.start:%Y%m%d%H}-{report.end:%Y%m%d%H}"
    response["Content-Disposition"] = f'attachment; filename="margin-{span}.csv"'
    return no_store(response)


def _report(request) -> tuple[MarginForm, MarginReport | None]:
    if not is_platform_staff(request.user):
        raise Http404
    form = MarginForm(request.GET)
    if not form.is_valid():
        return form, None
    d = form.cleaned_data
    return form, margin_report(start=d["start"], end=d["end"])


@require_GET
@vary_on_headers("HX-Request", "HX-Target")
def margin_page(request):
    form, report = _report(request)
    params = form.params()
    query = f"?{urlencode(params)}" if params else ""
    context = {
        "page": "margin",
        "form": form,
        "fields": [form[f] for f in ("range", "from", "to")],
        "tabs": _tabs(request.actor) if request.actor is not None else [],
        "report": report,
        "csv_url": reverse("analytics:margin_csv") + query,
    }
    if report is not None:
        fmt = "%Y-%m-%d %H:%M"
        context["range_text"] = _("%(start)s to %(end)s UTC") % {
            "start": f"{report.start:{fmt}}",
            "end": f"{report.end:{fmt}}",
        }
        context["totals"] = _table(report.totals, _("All calls"), _("Total"), totals=True)
        context["tables"] = [
            {"id": name, **_table(getattr(report, name), title, noun)}
            for name, title, noun in TABLES
        ]
        fig = _chart(report)
        context["figure_json"] = _json_for_script(fig) if fig else ""
    template = "console/analytics/margin.html"
    if request.htmx and request.htmx.target == "analytics":
        template = "console/analytics/_margin_body.html"
    return render(request, template, context)


@require_GET
def margin_csv(request):
    form, report = _report(request)
    if report is None:
        problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())  # plain text
        return HttpResponse(problems, status=400, content_type="text/plain; charset=utf-8")
    return _csv_response(report, request)
