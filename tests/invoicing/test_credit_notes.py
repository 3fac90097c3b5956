"""Credit notes: by amount, by line, full, for an incident; never more than
the invoice total; on an unpaid invoice they reduce what is due, on a paid
one they refund (to the prepaid balance here; the card in test_stripe)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from accounts.errors import NotFound, PermissionDenied, ValidationFailed
from accounts.models import BillingMode, Role
from console.kernel.money import format_amount
from invoicing.models import (
    BillingProfile,
    CreditNoteEffect,
    InvoiceStatus,
    LedgerEntry,
    LedgerKind,
    LineKind,
    Payment,
    PaymentKind,
)
from invoicing.selectors import prepaid_balance
from invoicing.services import (
    credit_note_create,
    credit_note_for_incident,
    invoice_draft,
    invoice_finalize,
    invoice_mark_paid,
)
from tests.usage.factories import event
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def invoice(org, month_calls):
    return invoice_finalize(invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk)


def test_partial_credit_by_amount_reduces_what_is_due(invoice, members, actor_for):
    finance = actor_for(members[Role.FINANCE])
    due = invoice.amount_due_minor
    note = credit_note_create(invoice_id=invoice.pk, actor=finance, amount=100_000, reason="slow")
    assert note.number == f"{invoice.number}-CN01"
    assert (note.amount_minor, note.due_reduction_minor, note.refund_minor) == (10, 10, 0)
    assert note.effect == CreditNoteEffect.REDUCE_DUE
    invoice.refresh_from_db()
    assert invoice.amount_due_minor == due - 10
    second = credit_note_create(invoice_id=invoice.pk, actor=finance, amount=5, reason="again")
    assert second.number.endswith("-CN02")
    assert not Payment.objects.filter(kind=PaymentKind.REFUND).exists()


def test_credits_never_exceed_the_total(invoice, members, actor_for):
    finance = actor_for(members[Role.FINANCE])
    with pytest.raises(ValidationFailed) as exc:
        credit_note_create(
            invoice_id=invoice.pk, actor=finance, amount=invoice.total + 1, reason="x"
        )
    assert "more than" in exc.value.message
    credit_note_create(invoice_id=invoice.pk, actor=finance, amount=invoice.total - 7, reason="x")
    with pytest.raises(ValidationFailed):
        credit_note_create(invoice_id=invoice.pk, actor=finance, amount=8, reason="x")
    full = credit_note_create(invoice_id=invoice.pk, actor=finance, full=True, reason="rest")
    assert full.amount == 7
    invoice.refresh_from_db()
    # Fully credited: the minor amounts of the notes add up to the amount due exactly.
    assert invoice.credited == invoice.total
    assert invoice.credited_minor == invoice.amount_due_initial_minor
    assert invoice.status == InvoiceStatus.PAID and invoice.amount_due_minor == 0
    with pytest.raises(ValidationFailed):
        credit_note_create(invoice_id=invoice.pk, actor=finance, full=True, reason="again")


def test_bad_credit_notes_are_refused(org, month_calls, invoice, members, other_members, actor_for):
    finance = actor_for(members[Role.FINANCE])
    for kwargs in ({"amount": 0}, {"amount": -5}, {"amount": 1.5}, {"full": True, "amount": 3}):
        with pytest.raises(ValidationFailed):
            credit_note_create(invoice_id=invoice.pk, actor=finance, reason="x", **kwargs)
    with pytest.raises(ValidationFailed):
        credit_note_create(invoice_id=invoice.pk, actor=finance, amount=5, reason=" ")
    with pytest.raises(PermissionDenied):
        credit_note_create(
            invoice_id=invoice.pk, actor=actor_for(members[Role.DEVELOPER]), amount=5, reason="x"
        )
    with pytest.raises(NotFound):
        credit_note_create(
            invoice_id=invoice.pk, actor=actor_for(other_members[Role.OWNER]), amount=5, reason="x"
        )
    draft = invoice_draft(organization_id=org.pk, period="2025-04")
    with pytest.raises(ValidationFailed) as exc:
        credit_note_create(invoice_id=draft.pk, actor=finance, amount=5, reason="x")
    assert "draft" in exc.value.message
    assert not invoice.credit_notes.exists()


def test_credit_by_line_adds_the_invoices_tax(org, month_calls, members, actor_for):
    BillingProfile.objects.create(organization=org, tax_rate_ppm=200_000)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    finance = actor_for(members[Role.FINANCE])
    line = invoice.lines.filter(kind=LineKind.USAGE).order_by("-amount").first()
    with pytest.raises(ValidationFailed):
        credit_note_create(
            invoice_id=invoice.pk,
            actor=finance,
            line_amounts={line.pk: line.amount + 1},
            reason="x",
        )
    note = credit_note_create(
        invoice_id=invoice.pk, actor=finance, line_amounts={line.pk: line.amount}, reason="bug"
    )
    tax = (line.amount * 200_000 + 500_000) // 1_000_000
    assert note.amount == line.amount + tax
    assert [ln.amount for ln in note.lines.all()] == [line.amount, tax]
    # That line is used up.
    with pytest.raises(ValidationFailed):
        credit_note_create(
            invoice_id=invoice.pk, actor=finance, line_amounts={line.pk: 1}, reason="x"
        )


def test_paid_prepaid_invoice_refunds_to_the_balance(org, month_calls, members, actor_for):
    org.billing_mode = BillingMode.PREPAID
    org.save(update_fields=["billing_mode"])
    BillingProfile.objects.create(organization=org, tax_rate_ppm=100_000)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    # The usage was paid from the balance; the tax is what is still due.
    assert invoice.credits_applied == invoice.usage_amount
    invoice_mark_paid(invoice_id=invoice.pk, reference="wire-9")
    balance = prepaid_balance(org.pk)
    note = credit_note_create(
        invoice_id=invoice.pk, actor=actor_for(members[Role.FINANCE]), amount=2_000_000, reason="x"
    )
    assert note.effect == CreditNoteEffect.REFUND_BALANCE and note.refund_minor == 200
    assert prepaid_balance(org.pk) == balance + 2_000_000
    entry = LedgerEntry.objects.get(kind=LedgerKind.CREDIT_NOTE)
    assert entry.reference == note.number


def test_paid_postpaid_invoice_records_a_manual_refund(invoice, members, actor_for):
    invoice_mark_paid(invoice_id=invoice.pk, reference="wire-1")
    note = credit_note_create(
        invoice_id=invoice.pk, actor=actor_for(members[Role.FINANCE]), amount=10_000, reason="x"
    )
    assert note.effect == CreditNoteEffect.REFUND_MANUAL
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    assert refund.amount_minor == 1 and refund.reference == note.number


def test_incident_credit_lists_every_matching_call_once(org, key, catalog, members, actor_for):
    t = datetime(2025, 6, 10, 12, tzinfo=UTC)
    bad = [
        event(key, started_at=t, node_id=7, status_code=502, input_tokens=900_000) for _ in range(3)
    ]
    other_node = [event(key, started_at=t, node_id=8, status_code=502, input_tokens=900_000)]
    ok = [event(key, started_at=t, node_id=7, input_tokens=900_000)]
    late = [event(key, started_at=datetime(2025, 6, 11, tzinfo=UTC), node_id=7, status_code=500)]
    ingest_events(bad + other_node + ok + late)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-06").pk
    )
    finance = actor_for(members[Role.FINANCE])
    window = {
        "start": datetime(2025, 6, 10, 11, tzinfo=UTC),
        "end": datetime(2025, 6, 10, 13, tzinfo=UTC),
    }
    note = credit_note_for_incident(
        invoice_id=invoice.pk, actor=finance, node_id=7, reason="node 7 outage", **window
    )
    line = note.lines.get()
    assert line.request_ids == sorted(e["request_id"] for e in bad)
    assert "3 calls" in line.description
    from usage.models import CallRecord

    assert note.amount == sum(
        CallRecord.objects.filter(request_id__in=line.request_ids).values_list("cost", flat=True)
    )
    # The same incident again: those calls are credited already.
    with pytest.raises(ValidationFailed):
        credit_note_for_incident(
            invoice_id=invoice.pk, actor=finance, node_id=7, reason="again", **window
        )


# --- an incident window labelled UTC is printed in UTC --------------------------------


def test_incident_window_is_printed_in_utc_whatever_zone_it_came_in(
    org, key, catalog, members, actor_for
):
    from invoicing.services import credit_note_for_incident
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    t = datetime(2025, 6, 10, 12, tzinfo=UTC)
    ingest_events([event(key, started_at=t, node_id=7, status_code=502, input_tokens=900_000)])
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-06").pk
    )
    berlin = ZoneInfo("Europe/Berlin")  # UTC+2 in June
    note = credit_note_for_incident(
        invoice_id=invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        reason="node 7 outage",
        start=datetime(2025, 6, 10, 13, 0, tzinfo=berlin),
        end=datetime(2025, 6, 10, 15, 30, tzinfo=berlin),
    )
    description = note.lines.order_by("pk").first().description
    assert "2025-06-10 11:00 to 2025-06-10 13:30 UTC" in description


# --- limits are said in money, not in micro- or minor units ---------------------------


def test_credit_and_payment_limits_are_said_in_money(finalized, members, actor_for):
    from accounts.errors import ValidationFailed
    from invoicing.services import credit_note_create, invoice_mark_paid

    finance = actor_for(members[Role.FINANCE])
    remaining = finalized.total - finalized.credited
    with pytest.raises(ValidationFailed) as too_much:
        credit_note_create(invoice_id=finalized.pk, actor=finance, amount=remaining + 1, reason="x")
    assert format_amount(remaining, "USD", exact=True) in too_much.value.fields["amount"][0]
    line = finalized.lines.filter(kind="usage").first()
    with pytest.raises(ValidationFailed) as line_much:
        credit_note_create(
            invoice_id=finalized.pk,
            actor=finance,
            line_amounts={line.pk: line.amount + 1},
            reason="x",
        )
    assert (
        format_amount(line.amount, "USD", exact=True)
        in line_much.value.fields[f"line_{line.pk}"][0]
    )
    due = finalized.amount_due_minor
    with pytest.raises(ValidationFailed) as overpaid:
        invoice_mark_paid(
            invoice_id=finalized.pk, actor=finance, reference="T", amount_minor=due + 1
        )
    assert format_amount(due, "USD", unit="minor") in overpaid.value.fields["amount"][0]
    for exc in (too_much, line_much, overpaid):
        text = " ".join(m for msgs in exc.value.fields.values() for m in msgs)
        assert "micro" not in text and "minor unit" not in text
