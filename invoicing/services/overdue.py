"""The overdue transition's one visible effect: a finalized invoice past its
due date with something still to pay sends ``invoice.overdue`` to the
organization's subscribed destinations, once per invoice. Beat runs
``invoices_notify_overdue`` hourly (``invoicing.notify_overdue``).

The invoice keeps its ``finalized`` status (overdue is finalized and late,
not a status of its own); the ``overdue`` entry in its history, written
under the invoice's row lock with the event, is what makes it once."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone as tz

from console.kernel.money import format_amount
from invoicing.models import Invoice, InvoiceEvent, InvoiceStatus
from invoicing.selectors import past_due_invoices
from invoicing.services import outbound
from invoicing.services._common import event

logger = logging.getLogger(__name__)

OVERDUE = "overdue"


def invoice_notify_overdue(*, invoice_id: int, now=None) -> bool:
    """Record and announce one invoice as overdue; False when it is not (paid,
    voided, not yet due, nothing left to pay) or was announced already."""
    now = now or tz.now()
    with transaction.atomic():
        invoice = (
            Invoice.objects.select_for_update()
            .defer("pdf")
            .filter(pk=invoice_id, status=InvoiceStatus.FINALIZED, due_at__lt=now)
            .first()
        )
        if invoice is None or invoice.amount_due_minor <= 0:
            return False
        if InvoiceEvent.objects.filter(invoice=invoice, type=OVERDUE).exists():
            return False
        event(
            invoice,
            OVERDUE,
            amount_due=format_amount(invoice.amount_due_minor, invoice.currency, unit="minor"),
            due_at=invoice.due_at.isoformat(),
        )
        outbound.invoice_event(invoice, "invoice.overdue")
    return True


def invoices_notify_overdue(*, now=None) -> int:
    """Beat: every finalized invoice past due with an amount due and not yet
    announced, announced (one transaction each; one failing invoice does not
    stop the others). The number announced."""
    now = now or tz.now()
    candidates = (
        past_due_invoices(now=now).exclude(events__type=OVERDUE).values_list("pk", flat=True)
    )
    announced = 0
    for invoice_id in list(candidates):
        try:
            announced += invoice_notify_overdue(invoice_id=invoice_id, now=now)
        except Exception:
            logger.exception("could not announce invoice %s as overdue", invoice_id)
    return announced
