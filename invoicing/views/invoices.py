"""Invoices: the list (filtered, sorted, reconciling; the running month's
preview below it and a form to draft a month now), one invoice and its
actions (refresh, finalize, void, mark uncollectible, record a payment, pay
now with the card on file), its printable page and its PDF."""

from __future__ import annotations

import logging
from dataclasses import asdict
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop
from django.views.decorators.http import require_GET, require_POST

from accounts.facade import DomainError, NotFound, apply_errors, org_view
from console.kernel.crypto import no_store
from console.kernel.money import format_amount
from invoicing import breakdown as usage_breakdown
from invoicing import exports, lists, selectors, services
from invoicing.forms.invoices import PaymentForm, ReasonForm
from invoicing.forms.lists import DraftForm, InvoiceListForm
from invoicing.models import InvoiceStatus
from invoicing.money import from_minor
from invoicing.pdf import invoice_pdf as invoice_pdf_with
from invoicing.views._shared import (
    INVOICE_MINOR,
    MANAGE,
    VIEW,
    invoice_or_404,
    pdf_response,
    redirect_to_detail,
    stripe_enabled,
    stripe_js_context,
    with_micro,
)

logger = logging.getLogger(__name__)


def _preview(actor):
    """The running month as it stands; never a reason for the page to fail."""
    try:
        return services.invoice_preview(organization_id=actor.organization_id)
    except Exception:  # a preview is a convenience: log it, show the rest
        logger.exception("invoice preview failed for org %s", actor.organization_id)
        return None


def _list_filters(form) -> lists.InvoiceFilters:
    d = form.cleaned_data
    return lists.InvoiceFilters(
        status=d["status"] or None,
        period_from=d["period_from"] or None,
        period_to=d["period_to"] or None,
        currency=d["currency"] or None,
        sort=d["sort"] or lists.DEFAULT_SORT,
    )


def _list_params(filters: lists.InvoiceFilters) -> dict[str, str]:
    """The filters as GET parameters (the default order left out)."""
    params = {k: v for k, v in asdict(filters).items() if v}
    if params.get("sort") == lists.DEFAULT_SORT:
        del params["sort"]
    return params


def _export_params(filters: lists.InvoiceFilters) -> dict[str, str]:
    """What the CSV exports can take of the filters: one month, an invoice status."""
    out = {}
    if filters.period_from and filters.period_from == filters.period_to:
        out["period"] = filters.period_from
    if filters.status in InvoiceStatus.values:
        out["status"] = filters.status
    return out


def _sort_links(params: dict, current: str) -> dict[str, dict]:
    """Per sortable column: the link that sorts by it (descending first, then
    flipping) and the arrow that says it is the current order."""
    links = {}
    for column in ("period", "total", "due"):
        desc = f"-{column}"
        arrow = "↓" if current == desc else "↑" if current == column else ""
        nxt = column if current == desc else desc
        links[column] = {"query": urlencode({**params, "sort": nxt}), "arrow": arrow}
    return links


@org_view(VIEW)
def invoice_list(request):
    """The invoices first (filters and order in the query string, columns
    that reconcile, totals per currency), then a one-line summary of the
    running month (its preview folded below), then a form to draft a month
    now (managers)."""
    actor = request.actor
    draft_form = DraftForm(request.POST or None, timezone_name=actor.organization.timezone)
    if request.method == "POST":
        if not actor.can(MANAGE):
            return render(
                request, "403.html", {"reason": _("Your role cannot draft invoices.")}, status=403
            )
        if draft_form.is_valid():
            try:
                invoice = services.invoice_draft(
                    organization_id=actor.organization_id,
                    period=draft_form.cleaned_data["period"],
                    actor=actor,
                )
            except DomainError as exc:
                apply_errors(draft_form, exc)
            else:
                messages.success(
                    request, _("Invoice for %(period)s drafted.") % {"period": invoice.period}
                )
                return redirect_to_detail(invoice)
    form = InvoiceListForm(
        request.GET or None,
        statuses=lists.ListStatus.choices,
        sorts=[(k, label) for k, (label, _) in lists.SORTS.items()],
        currencies=lists.invoice_currencies(actor=actor),
    )
    valid = not form.is_bound or form.is_valid()
    filters = _list_filters(form) if form.is_bound and valid else lists.InvoiceFilters()
    table = lists.invoice_table(actor=actor, filters=filters)
    page = Paginator(table.invoices if valid else table.invoices.none(), 50).get_page(
        request.GET.get("page")
    )
    for invoice in page.object_list:
        lists.decorate(invoice)
    params = _list_params(filters)
    context = {
        "form": form,
        "page": page,
        "totals": table.totals if valid else [],
        "params": _export_params(filters),
        "list_params": params,
        "pager_query": urlencode(params),
        "sort": filters.sort,
        "sort_label": lists.SORTS[filters.sort][0],
        "sort_links": _sort_links(params, filters.sort),
        "exports": exports.EXPORTS.values(),
    }
    if request.htmx:
        return render(request, "invoicing/_invoice_table.html", context)
    context.update(draft_form=draft_form, preview=_preview(actor))
    return render(request, "invoicing/invoices.html", context)


def _breakdown(request, invoice) -> tuple[usage_breakdown.Breakdown | None, str]:
    """The ``?breakdown=`` section asked for (``invoicing.breakdown.invoice_breakdown``)
    and, when it is malformed, why."""
    try:
        return usage_breakdown.invoice_breakdown(invoice, request.GET.get("breakdown")), ""
    except ValueError as exc:
        return None, str(exc)


def _detail_context(request, invoice):
    actor = request.actor
    breakdown, breakdown_error = _breakdown(request, invoice)
    lines = selectors.invoice_lines(invoice=invoice)
    with_micro(invoice, *INVOICE_MINOR)
    notes = [
        with_micro(n, "amount_minor", "due_reduction_minor", "refund_minor")
        for n in selectors.credit_note_list(actor=actor, invoice_id=invoice.pk)
    ]
    payments = [
        with_micro(p, "amount_minor")
        for p in selectors.payment_list(actor=actor, invoice_id=invoice.pk)
    ]
    refunds = {p.credit_note_id: p for p in payments if p.kind == "refund" and p.credit_note_id}
    for note in notes:  # how each note's refund stands (pending, paid on a day)
        note.refund_payment = refunds.get(note.pk)
    context = {
        "invoice": invoice,
        "lines": lines,
        "usage_lines": [ln for ln in lines if ln.kind in ("usage", "adjustment")],
        "total_lines": [ln for ln in lines if ln.kind in ("discount", "tax")],
        "credit_lines": [ln for ln in lines if ln.kind == "credits"],
        "credit_notes": notes,
        "payments": payments,
        "events": invoice.events.select_related("actor").order_by("created_at", "id"),
        "may_manage": actor.can(MANAGE),
        "creditable": invoice.status
        in (InvoiceStatus.FINALIZED, InvoiceStatus.PAID, InvoiceStatus.UNCOLLECTIBLE),
        "remaining": invoice.total - invoice.credited,
        "finalize_blocker": selectors.finalize_blocker(invoice),
        "breakdown": breakdown,
        "breakdown_error": breakdown_error,
        "breakdown_choices": usage_breakdown.breakdown_choices(invoice),
        "breakdown_query": urlencode({"breakdown": breakdown.choice}) if breakdown else "",
        "pay_now": actor.can(MANAGE)
        and invoice.status == InvoiceStatus.FINALIZED
        and invoice.amount_due_minor > 0
        and stripe_enabled(),
    }
    return context


@require_GET
@org_view(VIEW)
def invoice_detail(request, invoice_id: int):
    invoice = invoice_or_404(request, invoice_id)
    context = _detail_context(request, invoice)
    if request.GET.get("format") == "csv" and context["breakdown"] is not None:
        return _breakdown_csv(request, invoice, context["breakdown"])
    if request.GET.get("authenticate") and context["pay_now"]:
        # "Pay now" met 3-D Secure: the page finishes it with Stripe.js.
        try:
            secret = services.invoice_payment_client_secret(
                actor=request.actor, invoice_id=invoice.pk
            )
        except DomainError as exc:
            messages.error(request, exc.message)
            secret = ""
        if secret:
            context.update(stripe_js_context(), client_secret=secret)
    return render(request, "invoicing/invoice_detail.html", context)


# The names of an invoice event's parameters as its History table shows them
# (``invoicing.services._common.event``); marked here, translated there.
EVENT_PARAM_NAMES = (
    gettext_noop("number"),
    gettext_noop("total"),
    gettext_noop("effect"),
    gettext_noop("amount"),
    gettext_noop("reduces_due"),
    gettext_noop("refund"),
    gettext_noop("reason"),
    gettext_noop("message"),
    gettext_noop("reference"),
    gettext_noop("paid_on"),
    gettext_noop("payment_id"),
    gettext_noop("credit_note"),
)

PAY_NOW_MESSAGES = {
    "not_open": gettext_lazy("This invoice is not open any more; nothing was charged."),
    "nothing_due": gettext_lazy("Nothing is due on this invoice; nothing was charged."),
    "already_succeeded": gettext_lazy("This invoice is paid already; nothing was charged again."),
    "processing": gettext_lazy(
        "The card payment is processing; the invoice is paid once Stripe confirms it."
    ),
}


@require_POST
@org_view(MANAGE)
def invoice_pay(request, invoice_id: int):
    """The "Pay now with the card on file" button: the invoice's collection, run now.
    A second press finds the invoice paid (or its pending payment): one charge."""
    invoice = invoice_or_404(request, invoice_id)
    try:
        outcome = services.invoice_pay_now(actor=request.actor, invoice_id=invoice.pk)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect_to_detail(invoice)
    if outcome == "succeeded":
        messages.success(request, _("Paid with the card on file."))
    elif outcome == "no_payment_method":
        messages.error(
            request,
            format_html(
                _('No card on file: <a href="{}">add a card</a>, or pay by bank transfer.'),
                reverse("invoicing:payment_method"),
            ),
        )
    elif outcome == "failed":
        payment = selectors.payment_list(actor=request.actor, invoice_id=invoice.pk).first()
        reason = payment.failure_message if payment is not None else ""
        messages.error(
            request,
            _("The card was not charged: %(reason)s") % {"reason": reason or _("declined")},
        )
    elif outcome == "requires_action":
        messages.info(request, _("The bank asks the cardholder to confirm this payment."))
        return redirect(reverse("invoicing:invoice_detail", args=[invoice.pk]) + "?authenticate=1")
    else:
        messages.info(
            request,
            PAY_NOW_MESSAGES.get(outcome) or _("Card payment: %(outcome)s.") % {"outcome": outcome},
        )
    return redirect_to_detail(invoice)


def _button(request, invoice, action, success: str):
    """Run one service call for a POST button; the outcome is a message."""
    try:
        action()
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, success)
    return redirect_to_detail(invoice)


@require_POST
@org_view(MANAGE)
def invoice_refresh(request, invoice_id: int):
    invoice = invoice_or_404(request, invoice_id)
    return _button(
        request,
        invoice,
        lambda: services.invoice_refresh(invoice_id=invoice.pk, actor=request.actor),
        _("The draft was recomputed from the calls."),
    )


@org_view(MANAGE)
def invoice_finalize(request, invoice_id: int):
    """A confirmation page; the POST numbers the invoice and freezes it."""
    invoice = invoice_or_404(request, invoice_id)
    if request.method != "POST":
        if invoice.status != InvoiceStatus.DRAFT:
            messages.error(
                request,
                _("This invoice is already %(status)s.") % {"status": invoice.get_status_display()},
            )
            return redirect_to_detail(invoice)
        return render(request, "invoicing/invoice_finalize.html", {"invoice": invoice})
    try:  # the service refuses an open month, with the reason
        invoice = services.invoice_finalize(invoice_id=invoice.pk, actor=request.actor)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Invoice %(number)s finalized.") % {"number": invoice.number})
    return redirect_to_detail(invoice)


def _reason_action(request, invoice_id, *, prefix, service, success, template, title):
    invoice = invoice_or_404(request, invoice_id)
    form = ReasonForm(request.POST or None, prefix=prefix)
    if request.method == "POST" and form.is_valid():
        try:
            service(invoice_id=invoice.pk, actor=request.actor, reason=form.cleaned_data["reason"])
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, success)
            return redirect_to_detail(invoice)
    return render(
        request, template, {"invoice": invoice, "form": form, "title": title, "prefix": prefix}
    )


@org_view(MANAGE)
def invoice_void(request, invoice_id: int):
    return _reason_action(
        request,
        invoice_id,
        prefix="void",
        service=services.invoice_void,
        success=_("Invoice voided."),
        template="invoicing/invoice_reason.html",
        title=_("Void"),
    )


@org_view(MANAGE)
def invoice_uncollectible(request, invoice_id: int):
    return _reason_action(
        request,
        invoice_id,
        prefix="uncollectible",
        service=services.invoice_mark_uncollectible,
        success=_("Invoice marked uncollectible."),
        template="invoicing/invoice_reason.html",
        title=_("Mark uncollectible"),
    )


@org_view(MANAGE)
def invoice_payment(request, invoice_id: int):
    """Record a payment received by hand (a bank transfer, with its reference
    and the day it arrived). A reference already recorded in the
    organization is refused on the form, with what it was recorded for."""
    invoice = with_micro(invoice_or_404(request, invoice_id), *INVOICE_MINOR)
    zone = request.actor.organization.timezone
    form = PaymentForm(request.POST or None, invoice=invoice, timezone_name=zone)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            payment = services.invoice_mark_paid(
                invoice_id=invoice.pk,
                actor=request.actor,
                reference=data["reference"],
                method=data["method"],
                amount_minor=data["amount"],
                paid_on=data["paid_on"],
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            amount = format_amount(
                from_minor(payment.amount_minor, payment.currency), invoice.currency
            )
            messages.success(
                request,
                _("Payment %(reference)s of %(amount)s received on %(day)s recorded.")
                % {
                    "reference": payment.reference,
                    "amount": amount,
                    "day": payment.paid_on.isoformat(),
                },
            )
            return redirect_to_detail(invoice)
    return render(request, "invoicing/invoice_payment.html", {"invoice": invoice, "form": form})


@require_GET
@org_view(VIEW)
def invoice_print(request, invoice_id: int):
    invoice = invoice_or_404(request, invoice_id)
    context = _detail_context(request, invoice)
    context["seller"] = _seller()
    context["buyer"] = invoice.buyer or {"name": invoice.organization.name}
    return render(request, "invoicing/invoice_print.html", context)


def _seller():
    seller = dict(settings.INVOICING_SELLER)
    seller["address_lines"] = [s for s in seller.get("address", "").splitlines() if s]
    return seller


def _breakdown_csv(request, invoice, breakdown) -> HttpResponse:
    response = HttpResponse(
        usage_breakdown.breakdown_csv(breakdown, request=request),
        content_type="text/csv; charset=utf-8",
    )
    name = invoice.number or f"draft-{invoice.period}-{invoice.pk}"
    choice = breakdown.choice.replace(":", "-")
    response["Content-Disposition"] = f'attachment; filename="{name}-usage-by-{choice}.csv"'
    return no_store(response)


@require_GET
@org_view(VIEW)
def invoice_pdf(request, invoice_id: int):
    try:
        if request.GET.get("breakdown"):
            # With a breakdown: drawn now, the stored document plus its section.
            invoice = selectors.invoice_get(actor=request.actor, invoice_id=invoice_id)
            breakdown, problem = _breakdown(request, invoice)
            if problem:
                raise Http404(problem)
            data = invoice_pdf_with(invoice, breakdown=breakdown)
        else:
            invoice, data = selectors.invoice_pdf_bytes(actor=request.actor, invoice_id=invoice_id)
    except NotFound:
        raise Http404("No such invoice in this organization.") from None
    name = invoice.number or f"draft-{invoice.period}-{invoice.pk}"
    return pdf_response(data, f"{name}.pdf")
