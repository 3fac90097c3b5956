"""The billing events an organization's own systems may follow, handed to
``console.kernel.hooks.OUTBOUND_EVENT`` (the outbound webhooks app delivers them
after the caller's transaction commits). Each event id is stable
(``invoice.paid:<id>``), so a transition recorded twice is delivered once.
``invoice.overdue`` is sent by the hourly overdue sweep
(``invoicing.services.overdue``)."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from console.kernel import hooks


def _link(name: str, *args) -> str:
    """The console page an event is about, absolute (``CONSOLE_BASE_URL``)."""
    return settings.CONSOLE_BASE_URL + reverse(name, args=args)


def _fire(organization_id: int, event_type: str, event_id: str, data: dict) -> None:
    hooks.OUTBOUND_EVENT.fire(
        organization_id=organization_id,
        event_type=event_type,
        data=data,
        event_id=event_id,
    )


def invoice_event(invoice, event_type: str) -> None:
    """``invoice.finalized``, ``invoice.paid`` or ``invoice.overdue`` (its
    ``amount_minor`` is what is still due)."""
    amount = invoice.paid_minor if event_type == "invoice.paid" else invoice.amount_due_minor
    _fire(
        invoice.organization_id,
        event_type,
        f"{event_type}:{invoice.pk}",
        {
            "invoice_id": invoice.pk,
            "number": invoice.number,
            "period": invoice.period,
            "currency": invoice.currency,
            "amount_minor": int(amount),
            "total_micro": int(invoice.total),
            "due_at": invoice.due_at.isoformat() if invoice.due_at else None,
            "console_url": _link("invoicing:invoice_detail", invoice.pk),
        },
    )


def credit_note_issued(note) -> None:
    _fire(
        note.organization_id,
        "credit_note.issued",
        f"credit_note.issued:{note.pk}",
        {
            "credit_note_id": note.pk,
            "number": note.number,
            "invoice_number": note.invoice.number,
            "currency": note.currency,
            "amount_minor": int(note.amount_minor),
            "reason": note.reason[:500],
            "console_url": _link("invoicing:invoice_detail", note.invoice_id),
        },
    )


def topup_succeeded(payment) -> None:
    _fire(
        payment.organization_id,
        "topup.succeeded",
        f"topup.succeeded:{payment.pk}",
        {
            "payment_id": payment.pk,
            "method": payment.method,
            "currency": payment.currency,
            "amount_minor": int(payment.amount_minor),
            "console_url": _link("invoicing:balance"),
        },
    )
