"""Stripe's webhook endpoint: signed with Stripe's real scheme and checked by
stripe-python; replays, unknown types and foreign objects change nothing;
each handled type moves our rows, and only when the object matches them."""

from __future__ import annotations

import json
import time

import pytest
import requests

from accounts.models import AuditEvent, Role
from invoicing.models import (
    Invoice,
    InvoiceStatus,
    LedgerEntry,
    Payment,
    PaymentKind,
    PaymentStatus,
    StripeEvent,
)
from invoicing.selectors import prepaid_balance
from invoicing.services import credit_note_create, invoice_collect, topup_create

pytestmark = pytest.mark.django_db

URL = "/billing/stripe/webhook/"


def _snapshot():
    """Everything money-shaped a webhook could change."""
    return (
        list(Payment.objects.order_by("pk").values_list("pk", "status", "failure_message")),
        list(LedgerEntry.objects.order_by("pk").values_list("pk", "amount")),
        list(Invoice.objects.order_by("pk").values_list("pk", "status", "paid_minor")),
    )


@pytest.fixture
def topup(prepaid, members, actor_for, stripe_on):
    """A $40.00 top-up the customer has paid on the page (no webhook yet)."""
    payment = topup_create(actor=actor_for(members[Role.FINANCE]), amount_minor=4_000)
    stripe_on.confirm_on_page(payment.stripe_payment_intent_id)
    return payment


# --- the door -----------------------------------------------------------------------


def test_a_bad_signature_is_refused(client, stripe_on, topup):
    event = stripe_on.event(
        "payment_intent.succeeded", stripe_on.intent(topup.stripe_payment_intent_id)
    )
    before = _snapshot()
    response = stripe_on.deliver(client, event, secret="whsec_someone_else")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_signature"
    assert "signature" in response.json()["error"]["message"].lower()
    # A tampered body under a good signature is refused too.
    payload = json.dumps(event)
    header = stripe_on.sign(payload)
    tampered = payload.replace('"amount": 4000', '"amount": 400000')
    response = client.post(
        URL, data=tampered, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )
    assert response.status_code == 400
    # No header at all.
    response = client.post(URL, data=payload, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_signature"
    assert _snapshot() == before and not StripeEvent.objects.exists()
    assert prepaid_balance(topup.organization_id) == 0


def test_a_stale_timestamp_is_refused(client, stripe_on, topup):
    event = stripe_on.event(
        "payment_intent.succeeded", stripe_on.intent(topup.stripe_payment_intent_id)
    )
    response = stripe_on.deliver(client, event, timestamp=int(time.time()) - 301)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "stale_timestamp"
    assert "older than 300 seconds" in error["message"]
    assert not StripeEvent.objects.exists()
    assert prepaid_balance(topup.organization_id) == 0
    # Within the tolerance it goes through.
    response = stripe_on.deliver(client, event, timestamp=int(time.time()) - 200)
    assert response.status_code == 200
    assert prepaid_balance(topup.organization_id) == 40_000_000


def test_only_post(client, stripe_on):
    assert client.get(URL).status_code == 405


def test_refused_while_no_webhook_secret_is_configured(client, stripe_on, settings):
    event = stripe_on.event("payment_intent.succeeded", {"id": "pi_x"})
    settings.STRIPE_WEBHOOK_SECRET = ""
    response = stripe_on.deliver(client, event)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "not_configured"


def test_a_body_that_is_not_an_event_is_refused(client, stripe_on):
    payload = json.dumps({"hello": "world"})
    response = client.post(
        URL,
        data=payload,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=stripe_on.sign(payload),
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_payload"


# --- what comes in ---------------------------------------------------------------------


def test_a_replayed_event_changes_nothing(client, stripe_on, topup):
    event = stripe_on.event(
        "payment_intent.succeeded", stripe_on.intent(topup.stripe_payment_intent_id)
    )
    first = stripe_on.deliver(client, event)
    assert first.status_code == 200 and first.json()["outcome"] == "succeeded"
    after_first = _snapshot()
    for _ in range(2):
        replay = stripe_on.deliver(client, event)
        assert replay.status_code == 200 and replay.json()["duplicate"] is True
    assert _snapshot() == after_first
    assert prepaid_balance(topup.organization_id) == 40_000_000
    assert StripeEvent.objects.get().handled is True


def test_an_unknown_event_type_is_acknowledged_and_changes_nothing(client, stripe_on, topup):
    before = _snapshot()
    obj = stripe_on.intent(topup.stripe_payment_intent_id)
    response = stripe_on.deliver(
        client, stripe_on.event("payment_intent.amount_capturable_updated", obj)
    )
    assert response.status_code == 200
    assert response.json()["outcome"] == "ignored: unhandled type"
    response = stripe_on.deliver(client, stripe_on.event("customer.created", {"id": "cus_x"}))
    assert response.status_code == 200
    assert _snapshot() == before
    assert not StripeEvent.objects.filter(handled=True).exists()


def test_an_object_that_is_not_ours_is_acknowledged(client, stripe_on, topup):
    before = _snapshot()
    foreign = {
        "id": "pi_somebody_elses",
        "object": "payment_intent",
        "amount": 4_000,
        "currency": "usd",
        "status": "succeeded",
        "customer": "cus_somebody",
        "metadata": {},
    }
    response = stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", foreign))
    assert response.status_code == 200
    assert response.json()["outcome"] == "unknown_payment_intent"
    refund = {"id": "re_somebody", "object": "refund", "amount": 5, "status": "succeeded"}
    response = stripe_on.deliver(client, stripe_on.event("refund.updated", refund))
    assert response.json()["outcome"] == "unknown_refund"
    assert _snapshot() == before


def test_a_webhook_cannot_credit_another_organization(
    client, stripe_on, topup, other_org, other_members, actor_for
):
    from accounts.models import BillingMode

    other_org.billing_mode = BillingMode.PREPAID
    other_org.save(update_fields=["billing_mode"])
    theirs = topup_create(actor=actor_for(other_members[Role.FINANCE]), amount_minor=9_000)
    ours = stripe_on.intent(topup.stripe_payment_intent_id)
    before = _snapshot()

    # Our paid intent, its metadata pointing at the other organization's row
    forged = dict(ours, metadata={**ours["metadata"], "organization_id": str(other_org.pk)})
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", forged))
    assert r.status_code == 200 and r.json()["outcome"] == "mismatch: metadata organization_id"
    forged = dict(
        ours,
        metadata={"payment_id": str(theirs.pk), "organization_id": str(other_org.pk)},
    )
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", forged))
    assert r.json()["outcome"] == "mismatch: metadata payment_id"
    # An intent we never made, dressed up as theirs in every field but the id
    forged = dict(
        ours,
        id="pi_forged",
        amount=9_000,
        customer=other_org.billing_profile.stripe_customer_id,
        metadata={"payment_id": str(theirs.pk), "organization_id": str(other_org.pk)},
    )
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", forged))
    assert r.json()["outcome"] == "mismatch: another PaymentIntent"
    # Our intent with the amount changed
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", dict(ours, amount=1)))
    assert r.json()["outcome"] == "mismatch: amount or currency"

    assert _snapshot() == before
    assert prepaid_balance(other_org.pk) == 0 and prepaid_balance(topup.organization_id) == 0
    # The real one credits our organization, and only it.
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", ours))
    assert r.json()["outcome"] == "succeeded"
    assert prepaid_balance(topup.organization_id) == 40_000_000
    assert prepaid_balance(other_org.pk) == 0


# --- invoice payments, refunds, disputes ---------------------------------------------------


@pytest.fixture
def waiting_charge(card_invoice, stripe_on):
    """An invoice charge waiting for its card holder (3-D Secure)."""
    stripe_on.card_for(card_invoice.organization, number="4000002500003155")
    assert invoice_collect(invoice_id=card_invoice.pk) == "requires_action"
    return Payment.objects.get(invoice=card_invoice, kind=PaymentKind.INVOICE)


def test_payment_failed_marks_the_payment_and_keeps_the_invoice_open(
    client, stripe_on, waiting_charge
):
    obj = dict(
        stripe_on.intent(waiting_charge.stripe_payment_intent_id),
        status="requires_payment_method",
        last_payment_error={"code": "card_declined", "message": "Your card was declined."},
    )
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.payment_failed", obj))
    assert r.status_code == 200 and r.json()["outcome"] == "failed"
    waiting_charge.refresh_from_db()
    assert waiting_charge.status == PaymentStatus.FAILED
    assert waiting_charge.failure_message == "Your card was declined."
    invoice = waiting_charge.invoice
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.FINALIZED and invoice.amount_due_minor > 0


def test_payment_succeeded_pays_the_invoice(client, stripe_on, waiting_charge, settings):
    pi = waiting_charge.stripe_payment_intent_id
    # The card holder authenticates; Stripe charges and tells us.
    requests.post(
        f"{stripe_on.url}/v1/payment_intents/{pi}/_authenticate",
        data={"client_secret": stripe_on.intent(pi)["client_secret"], "success": "true"},
        auth=(settings.STRIPE_SECRET_KEY, ""),
        timeout=5,
    ).raise_for_status()
    obj = stripe_on.intent(pi)
    assert obj["status"] == "succeeded"
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", obj))
    assert r.json()["outcome"] == "succeeded"
    invoice = Invoice.objects.get(pk=waiting_charge.invoice_id)
    assert invoice.status == InvoiceStatus.PAID
    assert invoice.paid_minor == waiting_charge.amount_minor
    # A late payment_failed for the same intent cannot undo it.
    late = dict(obj, status="requires_payment_method", last_payment_error={"message": "no"})
    r = stripe_on.deliver(client, stripe_on.event("payment_intent.payment_failed", late))
    assert r.json()["outcome"] == "already_succeeded"
    assert Invoice.objects.get(pk=invoice.pk).status == InvoiceStatus.PAID


@pytest.fixture
def pending_refund(card_invoice, stripe_on, members, actor_for):
    """A card refund of a credit note, not settled yet (its Payment row is
    pending; the webhook says how it ended)."""
    invoice_collect(invoice_id=card_invoice.pk)
    credit_note_create(
        invoice_id=card_invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        amount=3_000_000,
        reason="incident",
    )
    return Payment.objects.get(kind=PaymentKind.REFUND)


def _refund_object(payment, **overrides):
    obj = {
        "id": "re_pending_1",
        "object": "refund",
        "amount": payment.amount_minor,
        "currency": payment.currency.lower(),
        "payment_intent": payment.stripe_payment_intent_id,
        "metadata": {
            "payment_id": str(payment.pk),
            "organization_id": str(payment.organization_id),
        },
        "status": "succeeded",
    }
    obj.update(overrides)
    return obj


def test_refund_updated_settles_a_refund(client, stripe_on, pending_refund):
    r = stripe_on.deliver(client, stripe_on.event("refund.updated", _refund_object(pending_refund)))
    assert r.json()["outcome"] == "succeeded"
    pending_refund.refresh_from_db()
    assert pending_refund.status == PaymentStatus.SUCCEEDED
    assert pending_refund.stripe_refund_id == "re_pending_1"
    # The refund then fails at the bank: finance sees it.
    failed = _refund_object(
        pending_refund, status="failed", failure_reason="expired_or_canceled_card"
    )
    r = stripe_on.deliver(client, stripe_on.event("refund.updated", failed))
    assert r.json()["outcome"] == "failed"
    pending_refund.refresh_from_db()
    assert pending_refund.status == PaymentStatus.FAILED
    assert pending_refund.failure_message == "expired_or_canceled_card"


def test_charge_refunded_settles_the_embedded_refunds(client, stripe_on, pending_refund):
    charge = {
        "id": "ch_1",
        "object": "charge",
        "payment_intent": pending_refund.stripe_payment_intent_id,
        "refunds": {"object": "list", "data": [_refund_object(pending_refund)]},
    }
    r = stripe_on.deliver(client, stripe_on.event("charge.refunded", charge))
    assert r.json()["outcome"] == "succeeded"
    pending_refund.refresh_from_db()
    assert pending_refund.status == PaymentStatus.SUCCEEDED


def test_a_refund_for_the_wrong_amount_changes_nothing(client, stripe_on, pending_refund):
    wrong = _refund_object(pending_refund, amount=pending_refund.amount_minor + 1)
    r = stripe_on.deliver(client, stripe_on.event("refund.updated", wrong))
    assert r.json()["outcome"] == "mismatch: amount or currency"
    pending_refund.refresh_from_db()
    assert pending_refund.status == PaymentStatus.PENDING


def test_a_dispute_marks_the_payment_and_is_audited(client, stripe_on, card_invoice):
    invoice_collect(invoice_id=card_invoice.pk)
    payment = Payment.objects.get(invoice=card_invoice, kind=PaymentKind.INVOICE)
    dispute = {
        "id": "dp_1",
        "object": "dispute",
        "amount": payment.amount_minor,
        "charge": stripe_on.intent(payment.stripe_payment_intent_id)["latest_charge"]["id"],
        "payment_intent": payment.stripe_payment_intent_id,
        "reason": "fraudulent",
        "status": "needs_response",
    }
    r = stripe_on.deliver(client, stripe_on.event("charge.dispute.created", dispute))
    assert r.json()["outcome"] == "disputed"
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.DISPUTED
    audit = AuditEvent.objects.get(action="payment.disputed")
    assert audit.organization_id == card_invoice.organization_id
    assert audit.params["dispute"] == "dp_1" and audit.params["reason"] == "fraudulent"
    assert "payment_disputed" in set(card_invoice.events.values_list("type", flat=True))
    # Without the intent id, the charge leads to it.
    again = dict(dispute, id="dp_2", payment_intent=None)
    r = stripe_on.deliver(client, stripe_on.event("charge.dispute.created", again))
    assert r.json()["outcome"] == "already_disputed"


# --- the service behind the door -----------------------------------------------------------


def test_receiving_an_event_stores_it_applies_it_once_and_says_a_replay_is_one(stripe_on, topup):
    from invoicing.services import stripe_event_receive

    event = stripe_on.event(
        "payment_intent.succeeded", stripe_on.intent(topup.stripe_payment_intent_id)
    )
    # Given a verified event, received without any view in front
    first = stripe_event_receive(event=event)
    # Then it is stored, handled, and the balance rose once
    assert not first.duplicate and first.outcome == "succeeded"
    stored = StripeEvent.objects.get(event_id=event["id"])
    assert stored.handled and stored.outcome == "succeeded"
    assert prepaid_balance(topup.organization_id) == 40_000_000
    # When the same id comes again, nothing moves
    again = stripe_event_receive(event=event)
    assert again.duplicate
    assert StripeEvent.objects.count() == 1
    assert prepaid_balance(topup.organization_id) == 40_000_000
    # An unhandled type is stored and acknowledged, changing nothing
    other = stripe_event_receive(event={"id": "evt_other", "type": "customer.created"})
    assert other.outcome == "ignored: unhandled type"
    assert not StripeEvent.objects.get(event_id="evt_other").handled


# --- hostile but correctly signed ---------------------------------------------------


def test_a_signature_dated_in_the_future_is_refused(client, stripe_on, topup):
    event = stripe_on.event(
        "payment_intent.succeeded", stripe_on.intent(topup.stripe_payment_intent_id)
    )
    # Signed "tomorrow": the replay window would otherwise start a day late.
    response = stripe_on.deliver(client, event, timestamp=int(time.time()) + 86_400)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "future_timestamp"
    assert "in the future" in error["message"]
    # Six minutes ahead is beyond the 5 minutes of clock skew allowed.
    response = stripe_on.deliver(client, event, timestamp=int(time.time()) + 360)
    assert response.status_code == 400
    assert not StripeEvent.objects.exists()
    assert prepaid_balance(topup.organization_id) == 0
    # A clock a minute ahead is tolerated.
    response = stripe_on.deliver(client, event, timestamp=int(time.time()) + 60)
    assert response.status_code == 200
    assert prepaid_balance(topup.organization_id) == 40_000_000


MALFORMED = [
    # (type, data) pairs: each is signed correctly but its shape is wrong.
    ("payment_intent.succeeded", {"object": {"id": "pi_x", "amount": "lots"}}),
    ("payment_intent.succeeded", {"object": {"id": "pi_x", "metadata": "not a map"}}),
    ("payment_intent.payment_failed", {"object": {"id": "pi_x", "last_payment_error": "x"}}),
    ("payment_intent.succeeded", {"object": {"id": ["pi_x"], "amount": 1}}),
    ("payment_intent.succeeded", {"object": {"id": "pi_x", "customer": 12}}),
    ("refund.updated", {"object": {"id": "re_x", "amount": {"value": 5}}}),
    ("charge.refunded", {"object": {"id": "ch_x", "refunds": ["re_x"]}}),
    ("charge.refunded", {"object": {"id": "ch_x", "refunds": {"data": "re_x"}}}),
    ("charge.dispute.created", {"object": {"id": "dp_x", "payment_intent": "pi_x", "amount": "?"}}),
    ("charge.dispute.created", {"object": {"id": "dp_x", "charge": {"no": "id"}}}),
    ("setup_intent.succeeded", {"object": {"id": "seti_x", "metadata": [1, 2]}}),
    ("payment_intent.succeeded", ["not", "a", "map"]),
    ("payment_intent.succeeded", {"object": "pi_x"}),
    ("payment_intent.succeeded", "data"),
]


@pytest.mark.parametrize(("type_", "data"), MALFORMED)
def test_a_correctly_signed_malformed_event_is_a_400_and_stores_nothing(
    client, stripe_on, topup, type_, data
):
    before = _snapshot()
    event = stripe_on.event(type_, {"id": "x"})
    event["data"] = data
    response = stripe_on.deliver(client, event)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_payload"
    assert _snapshot() == before
    assert not StripeEvent.objects.exists()


@pytest.mark.parametrize("event", [{"id": {"a": 1}, "type": "x"}, {"id": "evt_1", "type": 5}, []])
def test_an_event_whose_id_or_type_is_not_a_string_is_a_400(client, stripe_on, event):
    payload = json.dumps(event)
    response = client.post(
        URL,
        data=payload,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=stripe_on.sign(payload),
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_payload"
    assert not StripeEvent.objects.exists()
