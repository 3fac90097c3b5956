"""Credit notes and refunds: a credit note on an invoice (its refund, to the
card or by hand, follows from the services), one for every call of an
incident at once, marking a manual refund paid, and a credit note's PDF.

A credit note is never issued by the first POST: that one shows a preview
(lines, amounts, the effect, the invoice's new amount due) with the form's
values in hidden fields and the preview's signed ``confirm`` token; the
second POST, carrying it, issues exactly that note, or, when the invoice
changed in between, says so and shows the new preview to review again."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from accounts.facade import Conflict, DomainError, NotFound, apply_errors, org_view
from console.kernel.money import format_amount
from invoicing import selectors, services
from invoicing.forms.credit_notes import CreditNoteForm, IncidentCreditForm
from invoicing.forms.invoices import RefundPaidForm
from invoicing.models import PaymentKind, PaymentMethod, PaymentStatus
from invoicing.money import from_minor
from invoicing.pdf import credit_note_pdf as render_pdf
from invoicing.views._shared import (
    MANAGE,
    VIEW,
    invoice_or_404,
    pdf_response,
    redirect_to_detail,
    with_micro,
)


def _preview_or_issue(request, invoice, form, *, preview, issue, issued, page, title):
    """The two steps of a credit note: ``preview()`` renders what it would
    do; ``issue(token)`` (the POST with ``confirm``) issues it. Otherwise the
    form, with the errors."""
    plan, stale = None, ""
    if request.method == "POST" and "edit" not in request.POST and form.is_valid():
        token = request.POST.get("confirm", "")
        try:
            if token:
                note = issue(token)
                messages.success(request, issued(note))
                return redirect_to_detail(invoice)
            plan = preview()
        except Conflict as exc:
            if exc.code != "preview_stale":
                apply_errors(form, exc)
            else:  # the invoice moved: the up-to-date preview, to review again
                stale = exc.message
                try:
                    plan = preview()
                except DomainError as again:
                    apply_errors(form, again)
        except DomainError as exc:
            apply_errors(form, exc)
    if plan is None:
        return render(request, page, _form_context(invoice, form))
    cur = plan.currency
    context = {
        "invoice": invoice,
        "form": form,
        "plan": plan,
        "stale": stale,
        "title": title,
        "action": request.path,
        "calls": sum(line.calls for line in plan.lines),
        # The split and the amounts due are minor units; the tags take micro-units.
        "due_before": from_minor(plan.amount_due_minor, cur),
        "due_after": from_minor(plan.new_amount_due_minor, cur),
        "due_reduction": from_minor(plan.due_reduction_minor, cur),
        "refund": from_minor(plan.refund_minor, cur),
        "credited": from_minor(plan.amount_minor, cur),
    }
    return render(request, "invoicing/credit_note_preview.html", context)


def _form_context(invoice, form):
    return {"invoice": invoice, "form": form, "remaining": invoice.total - invoice.credited}


@org_view(MANAGE)
def credit_note_create(request, invoice_id: int):
    invoice = invoice_or_404(request, invoice_id)
    lines = selectors.invoice_lines(invoice=invoice)
    form = CreditNoteForm(request.POST or None, invoice=invoice, lines=lines)

    def kwargs():
        return {"invoice_id": invoice.pk, "actor": request.actor, **form.service_kwargs()}

    return _preview_or_issue(
        request,
        invoice,
        form,
        preview=lambda: services.credit_note_preview(**kwargs()),
        issue=lambda token: services.credit_note_create(**kwargs(), confirmation=token),
        issued=lambda note: _("Credit note %(number)s issued.") % {"number": note.number},
        page="invoicing/credit_note_form.html",
        title=_("credit note"),
    )


@org_view(MANAGE)
def incident_credit(request, invoice_id: int):
    """Credit every call of an incident (node, window, status class) at once."""
    actor = request.actor
    invoice = invoice_or_404(request, invoice_id)
    form = IncidentCreditForm(
        request.POST or None,
        nodes=selectors.incident_nodes(actor=actor),
        timezone_name=actor.organization.timezone,
    )

    def kwargs():
        return {"invoice_id": invoice.pk, "actor": actor, **form.service_kwargs()}

    def issued(note):
        calls = sum(len(line.request_ids or []) for line in note.lines.all())
        return _("Credit note %(number)s issued for %(calls)s calls.") % {
            "number": note.number,
            "calls": calls,
        }

    return _preview_or_issue(
        request,
        invoice,
        form,
        preview=lambda: services.incident_credit_preview(**kwargs()),
        issue=lambda token: services.credit_note_for_incident(**kwargs(), confirmation=token),
        issued=issued,
        page="invoicing/incident_credit.html",
        title=_("incident credit"),
    )


@org_view(MANAGE)
def refund_mark_paid(request, payment_id: int):
    """A pending refund by bank transfer, paid out by finance: its reference
    and the day it was paid."""
    actor = request.actor
    payment = (
        selectors.payment_list(actor=actor, kind=PaymentKind.REFUND)
        .filter(pk=selectors.parse_id(payment_id), method=PaymentMethod.BANK_TRANSFER)
        .first()
    )
    if payment is None or payment.invoice is None:
        raise Http404("No such refund in this organization.")
    invoice = payment.invoice
    with_micro(payment, "amount_minor")
    form = RefundPaidForm(request.POST or None, timezone_name=actor.organization.timezone)
    if payment.status != PaymentStatus.PENDING:
        messages.info(request, _("This refund is recorded as paid already."))
        return redirect_to_detail(invoice)
    if request.method == "POST" and form.is_valid():
        try:
            paid = services.refund_mark_paid(
                actor=actor,
                payment_id=payment.pk,
                reference=form.cleaned_data["reference"],
                paid_on=form.cleaned_data["paid_on"],
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            amount = format_amount(payment.amount_micro, payment.currency)
            messages.success(
                request,
                _("Refund of %(amount)s marked paid on %(day)s (%(reference)s).")
                % {"amount": amount, "day": paid.paid_on.isoformat(), "reference": paid.reference},
            )
            return redirect_to_detail(invoice)
    return render(
        request,
        "invoicing/refund_mark_paid.html",
        {"invoice": invoice, "payment": payment, "note": payment.credit_note, "form": form},
    )


@require_GET
@org_view(VIEW)
def credit_note_pdf(request, credit_note_id: int):
    try:
        note = selectors.credit_note_get(actor=request.actor, credit_note_id=credit_note_id)
    except NotFound:
        raise Http404("No such credit note in this organization.") from None
    return pdf_response(render_pdf(note), f"{note.number}.pdf")
