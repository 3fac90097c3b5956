"""The beat retry (``services.retries``): a finalized invoice whose collection
task was lost before it wrote a payment is collected once, invoices it
should not charge are left alone, and an outage stops the sweep."""

from __future__ import annotations

import pytest

from accounts.models import Role
from invoicing.models import InvoiceStatus
from invoicing.services import invoice_draft, invoice_finalize

pytestmark = pytest.mark.django_db


def test_the_beat_collects_an_invoice_whose_collection_task_was_lost(
    org, month_calls, stripe_on, django_capture_on_commit_callbacks
):
    from unittest import mock

    from invoicing.models import Invoice, Payment, PaymentStatus
    from invoicing.services import payments_retry_pending
    from invoicing.tasks import collect_invoice

    stripe_on.card_for(org)
    # Given the broker is down when the invoice is finalized: no task, no payment row
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    with (
        mock.patch.object(collect_invoice, "delay", side_effect=ConnectionError("broker down")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        invoice_finalize(invoice_id=draft.pk)  # no error for whoever finalized it
    invoice = Invoice.objects.get(pk=draft.pk)
    assert invoice.status == InvoiceStatus.FINALIZED and not Payment.objects.exists()
    # When the beat runs within the grace for a late task, it waits
    assert payments_retry_pending(older_than_seconds=0)["lost_collections"] == 0
    # Then later it charges the card, once, and never again
    done = payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)
    assert done["lost_collections"] == 1 and done["unavailable"] is False
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.PAID
    assert Payment.objects.get(invoice=invoice).status == PaymentStatus.SUCCEEDED
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    assert len(stripe_on.payment_intents(org)) == 1


def test_the_beat_leaves_invoices_it_should_not_collect(
    org, other_org, month_calls, stripe_on, members, actor_for
):
    from invoicing import stripe_adapter
    from invoicing.models import Payment
    from invoicing.services import invoice_collect, invoice_mark_paid, payments_retry_pending

    # A customer without a card: nothing is tried (no failed payment every beat)
    stripe_adapter.customer_ensure(organization_id=org.pk)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    assert not Payment.objects.exists()
    # A declined attempt is not charged again by the beat
    stripe_on.card_for(org, number="4000000000000341")
    assert invoice_collect(invoice_id=invoice.pk) == "failed"
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    # A (partial) payment recorded by hand: finance is on it
    Payment.objects.all().delete()
    invoice_mark_paid(
        invoice_id=invoice.pk, actor=actor_for(members[Role.FINANCE]), reference="T", amount_minor=1
    )
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    assert len(stripe_on.payment_intents(org)) == 1  # the declined one only


def test_the_lost_collection_sweep_stops_at_an_outage(org, month_calls, stripe_on):
    from invoicing.models import Payment
    from invoicing.services import payments_retry_pending

    stripe_on.card_for(org)
    invoice_finalize(invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk)
    stripe_on.outage()
    done = payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)
    assert done["unavailable"] is True and done["lost_collections"] == 0
    assert not Payment.objects.exists()
