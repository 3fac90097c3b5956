"""Incident credits: one credit note for every call of an invoice's period
that an incident spoiled (a node, a range of statuses, a time window, a
model) and that no note has credited yet; the note lists the calls.
Previewed and confirmed like any credit note (``invoicing.services.credit_notes``)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction
from django.utils.translation import gettext as _

from accounts.facade import Perm, ValidationFailed
from invoicing.models import CreditNote, CreditNoteLine, Invoice
from invoicing.services.credit_notes import (
    CreditNotePlan,
    check_confirmation,
    draft_note,
    grossed_lines,
    issue_note,
    lock_creditable_invoice,
    plan_of,
)
from usage.facade import costly_billed_calls


def _incident_lines(
    invoice: Invoice,
    *,
    start: datetime,
    end: datetime,
    node_id: int | None,
    status_min: int,
    status_max: int,
    model: str | None,
) -> list[tuple]:
    calls = costly_billed_calls(
        invoice.organization_id,
        invoice.currency,
        max(start, invoice.period_start),
        min(end, invoice.period_end),
        status_min=status_min,
        status_max=status_max,
        node_id=node_id,
        model=model,
    )
    done: set[str] = set()
    for ids in CreditNoteLine.objects.filter(credit_note__invoice=invoice).values_list(
        "request_ids", flat=True
    ):
        done.update(ids or [])
    found = [(rid, cost) for rid, cost in calls if rid not in done]
    if not found:
        raise ValidationFailed.from_fields(
            {"__all__": _("No uncredited calls with a cost match this incident.")}
        )
    net = sum(c for _, c in found)
    where = f"node {node_id}" if node_id is not None else "all nodes"
    desc = (
        f"Incident credit: {len(found)} calls, status {status_min}-{status_max}, {where}, "
        f"{start.astimezone(UTC):%Y-%m-%d %H:%M} to {end.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    )
    lines = [(desc, net, None, sorted(r for r, _ in found))]
    return lines + [(d, a, None, None) for d, a in grossed_lines(invoice, net)]


def _incident_checks(actor, start: datetime, end: datetime) -> None:
    if actor is not None:
        actor.require(Perm.BILLING_MANAGE)
    if start >= end:
        raise ValidationFailed.from_fields({"end": _("The window must end after it starts.")})


def incident_credit_preview(
    *,
    invoice_id: int,
    actor=None,
    reason: str,
    start: datetime,
    end: datetime,
    node_id: int | None = None,
    status_min: int = 500,
    status_max: int = 599,
    model: str | None = None,
) -> CreditNotePlan:
    """What ``credit_note_for_incident`` with the same arguments would issue
    (the calls it would credit among its lines), and its confirmation token."""
    _incident_checks(actor, start, end)
    with transaction.atomic():
        invoice = lock_creditable_invoice(invoice_id, actor)
        lines = _incident_lines(
            invoice,
            start=start,
            end=end,
            node_id=node_id,
            status_min=status_min,
            status_max=status_max,
            model=model,
        )
        return plan_of(invoice, draft_note(invoice, reason=reason, lines=lines), reason)


def credit_note_for_incident(
    *,
    invoice_id: int,
    actor=None,
    reason: str,
    start: datetime,
    end: datetime,
    node_id: int | None = None,
    status_min: int = 500,
    status_max: int = 599,
    model: str | None = None,
    confirmation: str | None = None,
) -> CreditNote:
    """Credit every call of the invoice's period that matches the incident
    (node, status range, time window, model) and has not been credited yet,
    in one credit note that lists the calls. ``confirmation``: as for
    ``credit_note_create`` (a call credited or added meanwhile changes it)."""
    _incident_checks(actor, start, end)
    with transaction.atomic():
        invoice = lock_creditable_invoice(invoice_id, actor)
        lines = _incident_lines(
            invoice,
            start=start,
            end=end,
            node_id=node_id,
            status_min=status_min,
            status_max=status_max,
            model=model,
        )
        draft = draft_note(invoice, reason=reason, lines=lines)
        if confirmation is not None:
            check_confirmation(invoice, draft, reason, confirmation)
        return issue_note(invoice, draft, actor=actor, reason=reason)
