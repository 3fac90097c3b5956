"""The Stripe adapter and card refunds, against localstripe on loopback:
Stripe off without a key, one customer per organization, errors sorted into
retryable and not, partial refunds of a card-paid invoice that run once."""

from __future__ import annotations

import pytest

from accounts.errors import DomainError, ValidationFailed
from accounts.models import Role
from invoicing import stripe_adapter
from invoicing.models import (
    BillingProfile,
    CreditNoteEffect,
    InvoiceStatus,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
)
from invoicing.services import (
    credit_note_create,
    invoice_collect,
    invoice_draft,
    invoice_finalize,
    invoice_mark_paid,
    payments_retry_pending,
    refund_execute,
    topup_create,
)

pytestmark = pytest.mark.django_db


def test_stripe_is_off_without_a_secret_key(settings, org, month_calls, members, actor_for):
    settings.STRIPE_SECRET_KEY = ""
    assert not stripe_adapter.enabled()
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    # Nothing reaches for Stripe: collection, retries and refunds are no-ops.
    assert invoice_collect(invoice_id=invoice.pk) == "stripe_off"
    assert payments_retry_pending(older_than_seconds=0)["refunds"] == 0
    with pytest.raises(stripe_adapter.StripeDisabled):
        stripe_adapter.client()
    # Finance records the payment by hand and everything else works.
    finance = actor_for(members[Role.FINANCE])
    payment = invoice_mark_paid(invoice_id=invoice.pk, actor=finance, reference="TX-1")
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.PAID
    assert payment.method == PaymentMethod.BANK_TRANSFER
    assert not Payment.objects.filter(method=PaymentMethod.STRIPE).exists()


def test_card_top_ups_are_refused_while_stripe_is_off(settings, prepaid, members, actor_for):
    settings.STRIPE_SECRET_KEY = ""
    with pytest.raises(ValidationFailed) as exc:
        topup_create(actor=actor_for(members[Role.FINANCE]), amount_minor=5_000)
    assert "Stripe is not configured" in exc.value.message
    assert not Payment.objects.exists()


def test_one_stripe_customer_per_organization(org, other_org, stripe_on):
    first = stripe_adapter.customer_ensure(organization_id=org.pk)
    assert first.startswith("cus_")
    assert stripe_adapter.customer_ensure(organization_id=org.pk) == first
    assert BillingProfile.objects.get(organization=org).stripe_customer_id == first
    other = stripe_adapter.customer_ensure(organization_id=other_org.pk)
    assert other != first
    customer = stripe_on.client.v1.customers.retrieve(first)
    assert customer.metadata["organization_id"] == str(org.pk)
    assert customer.name == org.name


def test_errors_are_retryable_or_not(stripe_on):
    # A 404 is Stripe refusing the request: no point retrying it.
    with pytest.raises(stripe_adapter.StripeRejected) as rejected:
        stripe_adapter.payment_intent_retrieve("pi_doesnotexist")
    assert isinstance(rejected.value, DomainError)
    assert not isinstance(rejected.value, stripe_adapter.StripeUnavailable)
    # Nobody listening: retry later.
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable) as down:
        stripe_adapter.payment_intent_retrieve("pi_doesnotexist")
    assert down.value.http_status == 503
    assert "unreachable" in down.value.message


def test_amounts_are_integers(stripe_on, org):
    customer = stripe_adapter.customer_ensure(organization_id=org.pk)
    for bad in (0, -1, 12.5, "100", True):
        with pytest.raises(ValueError, match="positive int"):
            stripe_adapter.payment_intent_create(
                amount_minor=bad,
                currency="USD",
                customer_id=customer,
                idempotency_key="never-sent",
                metadata={},
            )


def _refunds(payment_intent_id):
    return Payment.objects.filter(
        kind=PaymentKind.REFUND, stripe_payment_intent_id=payment_intent_id
    ).order_by("pk")


def test_partial_refunds_of_a_card_paid_invoice(
    card_invoice, stripe_on, members, actor_for, django_capture_on_commit_callbacks
):
    finance = actor_for(members[Role.FINANCE])
    # Given an invoice paid by card through Stripe
    assert invoice_collect(invoice_id=card_invoice.pk) == "succeeded"
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.PAID
    charge = Payment.objects.get(invoice=card_invoice, kind=PaymentKind.INVOICE)
    pi = charge.stripe_payment_intent_id
    assert stripe_on.intent(pi)["amount"] == charge.amount_minor == card_invoice.paid_minor

    # When finance credits part of it, twice
    with django_capture_on_commit_callbacks(execute=True):
        first = credit_note_create(
            invoice_id=card_invoice.pk, actor=finance, amount=1_234_567, reason="slow node"
        )
    with django_capture_on_commit_callbacks(execute=True):
        second = credit_note_create(
            invoice_id=card_invoice.pk, actor=finance, amount=2_000_001, reason="outage"
        )

    # Then each note is refunded to the card, for its own minor amount
    assert first.effect == second.effect == CreditNoteEffect.REFUND_CARD
    assert (first.refund_minor, second.refund_minor) == (123, 200)  # 123.4567 + 200.0001 → 323
    refunds = list(_refunds(pi))
    assert [r.amount_minor for r in refunds] == [123, 200]
    assert all(r.status == PaymentStatus.SUCCEEDED and r.stripe_refund_id for r in refunds)
    at_stripe = {r["id"]: r for r in stripe_on.refunds(pi)}
    assert sorted(r["amount"] for r in at_stripe.values()) == [123, 200]
    for r in refunds:
        assert at_stripe[r.stripe_refund_id]["metadata"]["payment_id"] == str(r.pk)
    assert stripe_on.intent(pi)["latest_charge"]["amount_refunded"] == 323

    # And running them again is a no-op
    for r in refunds:
        assert refund_execute(payment_id=r.pk) == "already_succeeded"
    assert payments_retry_pending(older_than_seconds=0)["refunds"] == 0
    assert len(stripe_on.refunds(pi)) == 2


def test_a_refund_during_an_outage_waits_for_the_retry(
    card_invoice, stripe_on, members, actor_for, django_capture_on_commit_callbacks
):
    finance = actor_for(members[Role.FINANCE])
    invoice_collect(invoice_id=card_invoice.pk)
    pi = Payment.objects.get(kind=PaymentKind.INVOICE).stripe_payment_intent_id
    stripe_on.outage()
    with django_capture_on_commit_callbacks(execute=True):
        note = credit_note_create(
            invoice_id=card_invoice.pk, actor=finance, amount=5_000_000, reason="refund"
        )
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    assert refund.status == PaymentStatus.PENDING and not refund.stripe_refund_id
    with pytest.raises(stripe_adapter.StripeUnavailable):
        refund_execute(payment_id=refund.pk)
    stripe_on.restore()
    assert payments_retry_pending(older_than_seconds=0)["refunds"] == 1
    refund.refresh_from_db()
    assert refund.status == PaymentStatus.SUCCEEDED
    assert [r["amount"] for r in stripe_on.refunds(pi)] == [note.refund_minor] == [500]


def test_a_refund_stripe_made_before_a_crash_is_found_not_repeated(
    card_invoice, stripe_on, members, actor_for
):
    invoice_collect(invoice_id=card_invoice.pk)
    credit_note_create(
        invoice_id=card_invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        amount=3_000_000,
        reason="x",
    )
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    # Given Stripe made the refund but we crashed before saving its id
    made = stripe_adapter.refund_create(
        payment_intent_id=refund.stripe_payment_intent_id,
        amount_minor=refund.amount_minor,
        idempotency_key=f"refund-payment-{refund.pk}",
        metadata={"payment_id": refund.pk, "organization_id": refund.organization_id},
    )
    # When the refund runs again, it adopts that refund instead of making another
    assert refund_execute(payment_id=refund.pk) == "succeeded"
    refund.refresh_from_db()
    assert refund.stripe_refund_id == made.id
    assert len(stripe_on.refunds(refund.stripe_payment_intent_id)) == 1
