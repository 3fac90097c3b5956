"""Collecting invoices by card and prepaid top-ups, against localstripe:
one charge per invoice whatever retries or outages do, declines leave the
invoice open, top-ups are validated and credit the balance only on the
webhook."""

from __future__ import annotations

from unittest import mock

import pytest
from celery.exceptions import Retry

from accounts.errors import NotFound, PermissionDenied, ValidationFailed
from accounts.models import Role
from invoicing import stripe_adapter
from invoicing.models import (
    Invoice,
    InvoiceStatus,
    LedgerEntry,
    LedgerKind,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
)
from invoicing.selectors import prepaid_balance
from invoicing.services import (
    invoice_collect,
    payments_retry_pending,
    topup_client_secret,
    topup_create,
    topup_record_manual,
)
from invoicing.tasks import collect_invoice

pytestmark = pytest.mark.django_db


def _charges(invoice):
    return Payment.objects.filter(invoice=invoice, kind=PaymentKind.INVOICE).order_by("pk")


# --- collection -------------------------------------------------------------------


def test_collect_charges_the_card_on_file_once(card_invoice, stripe_on):
    due = card_invoice.amount_due_minor
    assert card_invoice.status == InvoiceStatus.FINALIZED and due > 0
    assert invoice_collect(invoice_id=card_invoice.pk) == "succeeded"
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.PAID
    assert card_invoice.paid_minor == due and card_invoice.amount_due_minor == 0
    (payment,) = _charges(card_invoice)
    assert (payment.method, payment.status, payment.amount_minor, payment.attempts) == (
        PaymentMethod.STRIPE,
        PaymentStatus.SUCCEEDED,
        due,
        1,
    )
    intent = stripe_on.intent(payment.stripe_payment_intent_id)
    assert (intent["amount"], intent["currency"], intent["status"]) == (due, "usd", "succeeded")
    assert intent["metadata"] == {
        "kind": "invoice",
        "payment_id": str(payment.pk),
        "invoice_id": str(card_invoice.pk),
        "invoice_number": card_invoice.number,
        "organization_id": str(card_invoice.organization_id),
    }
    assert "payment_succeeded" in set(card_invoice.events.values_list("type", flat=True))
    # Again (a redelivered task): nothing to do, no second charge.
    assert invoice_collect(invoice_id=card_invoice.pk) == "not_open"
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1


def test_a_declined_card_leaves_the_invoice_open(org, month_calls, stripe_on):
    from invoicing.services import invoice_draft, invoice_finalize

    stripe_on.card_for(org, number="4000000000000341")  # attaches, then declines charges
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    due = invoice.amount_due_minor
    assert invoice_collect(invoice_id=invoice.pk) == "failed"
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.FINALIZED and invoice.amount_due_minor == due
    (payment,) = _charges(invoice)
    assert payment.status == PaymentStatus.FAILED
    assert "declined" in payment.failure_message.lower()
    assert "payment_failed" in set(invoice.events.values_list("type", flat=True))


def test_no_card_on_file_is_a_failed_attempt_not_an_error(org, month_calls, stripe_on):
    from invoicing.services import invoice_draft, invoice_finalize

    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    assert invoice_collect(invoice_id=invoice.pk) == "no_payment_method"
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.FINALIZED
    assert _charges(invoice).get().failure_message.startswith("No card on file")


def test_an_outage_during_collection_retries_and_never_charges_twice(card_invoice, stripe_on):
    # Given Stripe is down when the invoice is collected
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable):
        invoice_collect(invoice_id=card_invoice.pk)
    # Then the invoice stays finalized with one pending payment
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.FINALIZED
    (payment,) = _charges(card_invoice)
    assert payment.status == PaymentStatus.PENDING and payment.attempts == 1
    assert "unreachable" in payment.failure_message

    # When the Celery task runs, it asks to be retried with a backoff
    with (
        mock.patch.object(collect_invoice, "retry", side_effect=Retry("again")) as retry,
        pytest.raises(Retry),
    ):
        collect_invoice.apply(args=[card_invoice.pk], throw=True)
    assert retry.call_count == 1
    assert isinstance(retry.call_args.kwargs["exc"], stripe_adapter.StripeUnavailable)
    assert retry.call_args.kwargs["countdown"] == 30
    # and left by its real retries (eager here), still the same one payment
    result = collect_invoice.apply(args=[card_invoice.pk])
    assert result.failed() and isinstance(result.result, stripe_adapter.StripeUnavailable)
    (payment,) = _charges(card_invoice)
    assert payment.status == PaymentStatus.PENDING
    assert payment.attempts == 1 + 1 + 1 + collect_invoice.max_retries
    assert Invoice.objects.get(pk=card_invoice.pk).status == InvoiceStatus.FINALIZED

    # When Stripe is back, the next retry charges it, once
    stripe_on.restore()
    assert collect_invoice.apply(args=[card_invoice.pk]).get() == "succeeded"
    assert invoice_collect(invoice_id=card_invoice.pk) == "not_open"
    (payment,) = _charges(card_invoice)
    assert payment.status == PaymentStatus.SUCCEEDED and payment.failure_message == ""
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.PAID


def test_a_pending_charge_is_looked_up_not_repeated(card_invoice, stripe_on):
    # A card that needs its holder: the PaymentIntent waits (requires_action).
    stripe_on.card_for(card_invoice.organization, number="4000002500003155")
    assert invoice_collect(invoice_id=card_invoice.pk) == "requires_action"
    assert invoice_collect(invoice_id=card_invoice.pk) == "requires_action"
    (payment,) = _charges(card_invoice)
    assert payment.status == PaymentStatus.PENDING and payment.attempts == 2
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1


def test_the_beat_retry_collects_what_an_outage_left(card_invoice, stripe_on):
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable):
        invoice_collect(invoice_id=card_invoice.pk)
    assert payments_retry_pending(older_than_seconds=0)["unavailable"] is True
    stripe_on.restore()
    # Rows touched a moment ago are left to whoever is working on them.
    assert payments_retry_pending(older_than_seconds=600)["collections"] == 0
    assert payments_retry_pending(older_than_seconds=0)["collections"] == 1
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.PAID
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1


def test_finalizing_with_stripe_on_enqueues_the_collection(
    org, month_calls, stripe_on, django_capture_on_commit_callbacks
):
    from invoicing.services import invoice_draft, invoice_finalize

    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    with (
        mock.patch.object(collect_invoice, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        invoice_finalize(invoice_id=draft.pk)
    delay.assert_called_once_with(draft.pk)


# --- top-ups --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "says"),
    [
        (0, "positive"),
        (-500, "positive"),
        (50, "at least"),
        (10_000_000_001, "at most"),
        (12.5, "whole number"),
        ("1000", "whole number"),
        (True, "whole number"),
        (None, "whole number"),
    ],
)
def test_bad_top_ups_are_refused_clearly(prepaid, members, actor_for, stripe_on, amount, says):
    with pytest.raises(ValidationFailed) as exc:
        topup_create(actor=actor_for(members[Role.FINANCE]), amount_minor=amount)
    assert list(exc.value.fields) == ["amount"]
    assert says in exc.value.fields["amount"][0]
    assert not Payment.objects.exists()


def test_top_up_limits_follow_the_setting(prepaid, members, actor_for, stripe_on, settings):
    settings.INVOICING_MAX_TOP_UP = 500  # currency units
    finance = actor_for(members[Role.FINANCE])
    with pytest.raises(ValidationFailed) as exc:
        topup_create(actor=finance, amount_minor=50_001)
    assert exc.value.fields["amount"] == ["A single top-up is at most 500.00 USD."]
    assert topup_create(actor=finance, amount_minor=50_000).amount_minor == 50_000


def test_top_ups_are_for_prepaid_organizations_and_billing_roles(
    org, members, actor_for, stripe_on
):
    with pytest.raises(ValidationFailed) as exc:
        topup_create(actor=actor_for(members[Role.FINANCE]), amount_minor=5_000)
    assert "prepaid" in exc.value.message
    with pytest.raises(PermissionDenied):
        topup_create(actor=actor_for(members[Role.DEVELOPER]), amount_minor=5_000)


def test_a_top_up_credits_the_balance_only_on_the_webhook(
    client, prepaid, members, actor_for, stripe_on
):
    finance = actor_for(members[Role.FINANCE])
    # Given a top-up of $25.00
    payment = topup_create(actor=finance, amount_minor=2_500)
    assert (payment.kind, payment.status) == (PaymentKind.TOP_UP, PaymentStatus.PENDING)
    pi = payment.stripe_payment_intent_id
    assert payment.client_secret.startswith(f"{pi}_secret_")
    assert topup_client_secret(actor=finance, payment_id=payment.pk) == payment.client_secret
    intent = stripe_on.intent(pi)
    assert (intent["amount"], intent["currency"], intent["status"]) == (
        2_500,
        "usd",
        "requires_payment_method",
    )
    assert intent["customer"] == prepaid.billing_profile.stripe_customer_id
    assert prepaid_balance(prepaid.pk) == 0

    # When the customer pays on the page, the balance does not move yet
    assert stripe_on.confirm_on_page(pi)["status"] == "succeeded"
    assert prepaid_balance(prepaid.pk) == 0

    # Then the webhook credits it, once, in micro-units
    event = stripe_on.event("payment_intent.succeeded", stripe_on.intent(pi))
    assert stripe_on.deliver(client, event).status_code == 200
    assert prepaid_balance(prepaid.pk) == 25_000_000
    entry = LedgerEntry.objects.get(organization=prepaid)
    assert (entry.kind, entry.reference, entry.amount) == (LedgerKind.TOP_UP, pi, 25_000_000)
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.SUCCEEDED
    # A replay, or another event saying the same, changes nothing.
    assert stripe_on.deliver(client, event).json()["duplicate"] is True
    again = stripe_on.event("payment_intent.succeeded", stripe_on.intent(pi))
    assert stripe_on.deliver(client, again).json()["outcome"] == "already_succeeded"
    assert prepaid_balance(prepaid.pk) == 25_000_000
    with pytest.raises(Exception, match="succeeded already"):
        topup_client_secret(actor=finance, payment_id=payment.pk)


def test_a_lost_top_up_webhook_is_made_up_by_the_beat_sync(prepaid, members, actor_for, stripe_on):
    payment = topup_create(actor=actor_for(members[Role.FINANCE]), amount_minor=10_000)
    assert payments_retry_pending(older_than_seconds=0)["topups"] == 1  # still waiting
    assert prepaid_balance(prepaid.pk) == 0
    stripe_on.confirm_on_page(payment.stripe_payment_intent_id)
    payments_retry_pending(older_than_seconds=0)
    assert prepaid_balance(prepaid.pk) == 100_000_000
    payments_retry_pending(older_than_seconds=0)
    assert prepaid_balance(prepaid.pk) == 100_000_000


def test_top_up_during_an_outage_leaves_nothing_behind(prepaid, members, actor_for, stripe_on):
    finance = actor_for(members[Role.FINANCE])
    stripe_adapter.customer_ensure(organization_id=prepaid.pk)
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable) as exc:
        topup_create(actor=finance, amount_minor=5_000)
    assert exc.value.http_status == 503
    assert not Payment.objects.exists()


def test_client_secret_is_only_for_the_own_organization(
    prepaid, members, other_members, actor_for, stripe_on
):
    payment = topup_create(actor=actor_for(members[Role.FINANCE]), amount_minor=5_000)
    with pytest.raises(NotFound):
        topup_client_secret(actor=actor_for(other_members[Role.OWNER]), payment_id=payment.pk)


def test_manual_top_up_credits_at_once_and_once(prepaid, members, actor_for, settings):
    settings.STRIPE_SECRET_KEY = ""  # works without Stripe
    finance = actor_for(members[Role.FINANCE])
    first = topup_record_manual(actor=finance, amount_minor=12_345, reference=" BANK-77 ")
    again = topup_record_manual(actor=finance, amount_minor=12_345, reference="BANK-77")
    assert first.pk == again.pk
    assert (first.method, first.status) == (PaymentMethod.BANK_TRANSFER, PaymentStatus.SUCCEEDED)
    assert prepaid_balance(prepaid.pk) == 123_450_000
    with pytest.raises(ValidationFailed):
        topup_record_manual(actor=finance, amount_minor=12_345, reference="  ")


# --- real concurrency (PostgreSQL) ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_collections_and_refunds_each_happen_once(
    org, month_calls, stripe_on, members, actor_for
):
    from django.db import connection

    from invoicing.services import (
        credit_note_create,
        invoice_draft,
        invoice_finalize,
        refund_execute,
    )
    from tests.invoicing.test_concurrency_pg import _in_threads
    from tests.services import require

    require(connection.vendor == "postgresql", "needs PostgreSQL (set DATABASE_URL)")
    stripe_on.card_for(org)
    with mock.patch.object(collect_invoice, "delay"):  # committed for real here: no broker
        invoice = invoice_finalize(
            invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
        )
    # Six workers collect the same invoice at once: one charge.
    results = _in_threads(6, lambda i: invoice_collect(invoice_id=invoice.pk))
    assert sorted(results, key=str).count("succeeded") == 1, results
    assert set(results) <= {"succeeded", "not_open", "already_succeeded"}, results
    assert len(stripe_on.payment_intents(org)) == 1
    assert _charges(invoice).get().status == PaymentStatus.SUCCEEDED
    # A refund left pending by an outage, then six retries at once: one refund.
    stripe_on.outage()
    credit_note_create(
        invoice_id=invoice.pk, actor=actor_for(members[Role.FINANCE]), amount=2_000_000, reason="x"
    )
    stripe_on.restore()
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    assert refund.status == PaymentStatus.PENDING
    results = _in_threads(6, lambda i: refund_execute(payment_id=refund.pk))
    assert results.count("succeeded") == 1, results
    assert set(results) <= {"succeeded", "already_succeeded"}, results
    assert [r["amount"] for r in stripe_on.refunds(refund.stripe_payment_intent_id)] == [200]
