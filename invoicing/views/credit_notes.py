"""Credit notes and refunds: a credit note on an invoice (its refund, to the
card or by hand, follows from the services), one for every call of an
incident at once, and a credit note's PDF."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts.facade import DomainError, NotFound, apply_errors, org_view
from invoicing import selectors, services
from invoicing.forms import (
    CreditNoteForm,
    IncidentCreditForm,
)
from invoicing.pdf import credit_note_pdf as render_pdf
from invoicing.views._shared import (
    MANAGE,
    VIEW,
    invoice_or_404,
    pdf_response,
    redirect_to_detail,
)


@org_view(MANAGE)
def credit_note_create(request, invoice_id: int):
    invoice = invoice_or_404(request, invoice_id)
    lines = selectors.invoice_lines(invoice=invoice)
    form = CreditNoteForm(request.POST or None, invoice=invoice, lines=lines)
    if request.method == "POST" and form.is_valid():
        try:
            note = services.credit_note_create(
                invoice_id=invoice.pk, actor=request.actor, **form.service_kwargs()
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Credit note {note.number} issued.")
            return redirect_to_detail(invoice)
    return render(
        request,
        "invoicing/credit_note_form.html",
        {"invoice": invoice, "form": form, "remaining": invoice.total - invoice.credited},
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
    if request.method == "POST" and form.is_valid():
        try:
            note = services.credit_note_for_incident(
                invoice_id=invoice.pk, actor=actor, **form.service_kwargs()
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            calls = sum(len(line.request_ids or []) for line in note.lines.all())
            messages.success(request, f"Credit note {note.number} issued for {calls} calls.")
            return redirect_to_detail(invoice)
    return render(request, "invoicing/incident_credit.html", {"invoice": invoice, "form": form})


@require_GET
@org_view(VIEW)
def credit_note_pdf(request, credit_note_id: int):
    try:
        note = selectors.credit_note_get(actor=request.actor, credit_note_id=credit_note_id)
    except NotFound:
        raise Http404("No such credit note in this organization.") from None
    return pdf_response(render_pdf(note), f"{note.number}.pdf")
