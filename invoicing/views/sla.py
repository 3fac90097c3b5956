"""The SLA page (billing): the month's availability against the target, the
failure budget and what is left of it, a daily chart, and the ledger of
evaluated months with their credits. Finance approves or dismisses a
drafted credit here; platform staff set an organization's target and
evaluate a closed month now. The failed calls of a month are a CSV."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import orjson
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import pgettext, pgettext_lazy
from django.views.decorators.http import require_GET, require_POST

from accounts.facade import DomainError, NotFound, ValidationFailed, org_view
from console.kernel import timezones
from console.kernel.crypto import no_store
from console.kernel.csv_header import header_line
from invoicing.models import SlaMonth, SlaStatus, SlaTarget
from invoicing.models.sla import percent_text
from invoicing.services import sla
from invoicing.services._common import parse_period, period_bounds
from invoicing.views._shared import MANAGE, VIEW

# The failed-calls CSV's header for people reading another language (console.kernel.csv_header).
FAILED_CSV_LABELS = {
    "request_id": pgettext_lazy("CSV header", "Request ID"),
    "started_at ({zone})": pgettext_lazy("CSV header", "Started at (%(zone)s)"),
    "model": pgettext_lazy("CSV header", "Model"),
    "status_code": pgettext_lazy("CSV header", "Status"),
    "error_type": pgettext_lazy("CSV header", "Error type"),
}


def _period(request, org) -> str:
    raw = request.GET.get("period") or request.POST.get("period") or ""
    if not raw:
        return sla.current_period(org)
    try:
        parse_period(raw)
    except ValidationFailed:
        return sla.current_period(org)
    return raw


def _is_staff(request) -> bool:
    user = request.user
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def _json(data) -> str:
    raw = orjson.dumps(data).decode()
    return raw.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _figure(figures: sla.SlaFigures, tz) -> dict | None:
    days = [d for d in figures.days if d.calls]
    if not days:
        return None

    def pct(ppm: int) -> float:  # drawn, never billed
        return float(Decimal(ppm) / 10_000)

    x = [d.start.astimezone(tz).strftime("%Y-%m-%d") for d in days]
    return {
        "data": [
            {
                "type": "bar",
                "x": x,
                "y": [pct(d.availability_ppm) for d in days],
                "name": _("Availability"),
                "marker": {"color": "#3056d3"},
                "customdata": [[d.calls, d.failed] for d in days],
                "hovertemplate": "%{x}: %{y:.4f} %<br>"
                + _("%(calls)s calls, %(failed)s failed")
                % {"calls": "%{customdata[0]}", "failed": "%{customdata[1]}"}
                + "<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "lines",
                "x": x,
                "y": [pct(figures.target_ppm)] * len(x),
                "name": pgettext("SLA", "Target"),
                "line": {"color": "#b54708", "dash": "dash"},
            },
        ],
        "layout": {
            "template": "none",
            "height": 280,
            "margin": {"l": 56, "r": 12, "t": 12, "b": 40},
            "xaxis": {"type": "category"},
            "yaxis": {
                "title": {"text": _("Availability (%)")},
                "range": [min(pct(min(d.availability_ppm for d in days)), 99.0) - 0.5, 100.05],
            },
            "legend": {"orientation": "h"},
        },
    }


def _ledger(request, org) -> list[dict]:
    rows = []
    for month in SlaMonth.objects.filter(organization=org).select_related("credit_note")[:24]:
        invoice = sla.month_invoice(org.pk, month.period)
        amount = (
            month.credit_amount
            if month.status == SlaStatus.APPROVED
            else sla.credit_amount(month, invoice)
        )
        rows.append(
            {
                "month": month,
                "availability": percent_text(month.availability_ppm),
                "target": percent_text(month.target_ppm),
                "rate": percent_text(month.credit_rate_ppm),
                "amount": amount,
                "invoice": invoice,
                "csv_url": reverse("invoicing:sla_failed_calls") + f"?period={month.period}",
            }
        )
    return rows


@require_GET
@org_view(VIEW)
def sla_page(request):
    actor = request.actor
    org = actor.organization
    period = _period(request, org)
    figures = sla.sla_figures(org, period)
    zone = timezones.org_zone(org)
    figure = _figure(figures, zone)
    override = SlaTarget.objects.filter(organization=org).first()
    context = {
        "org": org,
        "period": period,
        "figures": figures,
        "availability": percent_text(figures.availability_ppm),
        "target": percent_text(figures.target_ppm),
        "target_is_default": override is None,
        "ttft_override": override.ttft_p99_ms if override is not None else None,
        "ttft_share": percent_text(sla.TTFT_CREDIT_PPM),
        "over_budget": -figures.budget_left if figures.budget_left < 0 else 0,
        "figure_json": _json(figure) if figure else "",
        "csv_url": reverse("invoicing:sla_failed_calls") + f"?period={period}",
        "ledger": _ledger(request, org),
        "may_manage": actor.can(MANAGE),
        "is_staff": _is_staff(request),
        "schedule": [
            (percent_text(figures.target_ppm), percent_text(100_000)),
            (percent_text(990_000), percent_text(250_000)),
            (percent_text(950_000), percent_text(500_000)),
        ],
        "zone": zone.key,
    }
    return render(request, "invoicing/sla.html", context)


@require_GET
@org_view(VIEW)
def sla_failed_calls(request):
    """The month's calls failed by the platform or an upstream, as CSV."""
    org = request.actor.organization
    period = _period(request, org)
    start, end = period_bounds(period, org.timezone)
    zone = timezones.org_zone(org)
    columns = ["request_id", "started_at", "model", "status_code", "error_type"]
    out = io.StringIO()
    out.write(
        header_line(
            [*columns[:1], timezones.heading("started_at", zone), *columns[2:]],
            FAILED_CSV_LABELS,
            request=request,
        )
    )
    writer = csv.writer(out)
    for rid, started, model, status, error in sla.failed_calls(org.pk, start, end):
        writer.writerow(
            [
                rid,
                started.astimezone(zone).strftime(timezones.DATETIME_FORMAT),
                model,
                status,
                error,
            ]
        )
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{org.slug}-sla-failed-{period}.csv"'
    return no_store(response)


def _back(period: str):
    return redirect(reverse("invoicing:sla") + f"?period={period}")


@require_POST
@org_view(MANAGE)
def sla_decide(request):
    """Finance approves (a credit note is issued) or dismisses a drafted credit."""
    org = request.actor.organization
    try:
        month_id = int(request.POST.get("month", ""))
    except ValueError:
        messages.error(request, _("Choose a month to decide on."))
        return _back(_period(request, org))
    action = request.POST.get("action")
    try:
        if action == "approve":
            note = sla.sla_credit_approve(month_id=month_id, actor=request.actor)
            messages.success(
                request,
                _("Credit note %(number)s issued for the SLA breach.") % {"number": note.number},
            )
        elif action == "dismiss":
            sla.sla_credit_dismiss(month_id=month_id, actor=request.actor)
            messages.success(request, _("The SLA credit was dismissed; nothing was credited."))
        else:
            messages.error(request, _("Approve or dismiss the credit."))
    except NotFound:
        raise Http404("No such SLA month in this organization.") from None
    except DomainError as exc:
        messages.error(request, exc.message)
    month = SlaMonth.objects.filter(pk=month_id, organization=org).first()
    return _back(month.period if month else _period(request, org))


def _staff_only(request):
    if not _is_staff(request) or request.actor is None:
        raise Http404


@require_POST
def sla_staff_evaluate(request):
    """Platform staff: evaluate a closed month of the current organization now."""
    _staff_only(request)
    org = request.actor.organization
    period = _period(request, org)
    try:
        month = sla.sla_evaluate(organization_id=org.pk, period=period, actor=request.actor)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            _("%(period)s evaluated: %(status)s.")
            % {"period": period, "status": month.get_status_display().lower()},
        )
    return _back(period)


@require_POST
def sla_staff_target(request):
    """Platform staff: the organization's availability target, in percent
    (empty: the platform default)."""
    _staff_only(request)
    org = request.actor.organization
    raw = (request.POST.get("target") or "").strip().rstrip("%").strip()
    raw_ttft = (request.POST.get("ttft") or "").strip()
    try:
        if raw:
            value = Decimal(raw) * 10_000
            if value != value.to_integral_value():
                raise ValueError
            ppm = int(value)
        else:
            ppm = None
        if raw_ttft and not raw_ttft.isascii():
            raise ValueError
        ttft = int(raw_ttft) if raw_ttft else None
        sla.sla_target_set(
            organization_id=org.pk, availability_ppm=ppm, ttft_p99_ms=ttft, actor=request.actor
        )
    except (ValueError, ArithmeticError):
        messages.error(
            request, _("Give the target in percent, e.g. 99.9, and the bound in milliseconds.")
        )
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("The SLA target was saved."))
    return _back(_period(request, org))
