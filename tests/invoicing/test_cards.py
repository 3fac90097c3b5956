"""The card on file against localstripe: a SetupIntent confirmed on the page
becomes the customer's default card once (by the page's post-back or the
``setup_intent.succeeded`` webhook, whichever comes first), only for the
organization's own customer; top-ups charge it and credit the balance only on
the webhook; "Pay now" charges an invoice once however often it is pressed;
Stripe off or down is a clear error, never a half-saved card."""

from __future__ import annotations

from unittest import mock

import pytest

from accounts.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from accounts.models import AuditEvent, Role
from invoicing import stripe_adapter
from invoicing.models import (
    CardSetup,
    CardSetupStatus,
    InvoiceStatus,
    LedgerEntry,
    LedgerKind,
    Payment,
    PaymentKind,
    PaymentStatus,
)
from invoicing.selectors import card_on_file, prepaid_balance
from invoicing.services import (
    card_remove,
    card_setup_complete,
    card_setup_start,
    invoice_pay_now,
    payments_retry_pending,
    topup_charge_card,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def manager(members, actor_for):
    return actor_for(members[Role.FINANCE])


def save_card(stripe_on, actor, number: str = "4242424242424242") -> CardSetup:
    """The whole page flow: start, Stripe.js confirms, the page posts back."""
    setup = card_setup_start(actor=actor)
    stripe_on.confirm_setup(setup.stripe_setup_intent_id, number=number)
    assert card_setup_complete(actor=actor, setup_intent_id=setup.stripe_setup_intent_id) in (
        "succeeded",
        "already_succeeded",
    )
    setup.refresh_from_db()
    return setup


def default_card(stripe_on, organization) -> str | None:
    settings_ = stripe_on.customer(organization).get("invoice_settings") or {}
    return settings_.get("default_payment_method") or None


# --- saving a card ------------------------------------------------------------------------


def test_a_confirmed_setup_intent_becomes_the_default_card(org, manager, stripe_on):
    # Given a manager starts saving a card
    setup = card_setup_start(actor=manager)
    seti = setup.stripe_setup_intent_id
    assert setup.client_secret.startswith(f"{seti}_secret_")
    intent = stripe_on.client.v1.setup_intents.retrieve(seti).to_dict()
    customer = org.billing_profile.stripe_customer_id
    assert (intent["customer"], intent["usage"], intent["status"]) == (
        customer,
        "off_session",
        "requires_payment_method",
    )
    assert intent["metadata"] == {
        "kind": "card_setup",
        "card_setup_id": str(setup.pk),
        "organization_id": str(org.pk),
    }
    # Nothing changes before Stripe says the card is confirmed
    assert card_setup_complete(actor=manager, setup_intent_id=seti) == "requires_payment_method"
    assert default_card(stripe_on, org) is None

    # When Stripe.js confirms the card and the page posts the id back
    stripe_on.confirm_setup(seti)
    assert card_setup_complete(actor=manager, setup_intent_id=seti) == "succeeded"

    # Then it is the customer's default card, attached to the customer
    setup.refresh_from_db()
    assert setup.status == CardSetupStatus.SUCCEEDED and setup.stripe_payment_method_id
    assert default_card(stripe_on, org) == setup.stripe_payment_method_id
    assert stripe_on.payment_method(setup.stripe_payment_method_id)["customer"] == customer
    card = card_on_file(actor=manager)
    assert (card.brand, card.last4, card.exp_month, card.exp_year) == ("visa", "4242", 12, 2034)
    assert AuditEvent.objects.filter(organization=org, action="card.saved").count() == 1
    # Posting it back again changes nothing.
    assert card_setup_complete(actor=manager, setup_intent_id=seti) == "already_succeeded"
    assert AuditEvent.objects.filter(organization=org, action="card.saved").count() == 1


def test_a_second_click_reuses_the_waiting_setup_intent(org, manager, stripe_on):
    first = card_setup_start(actor=manager)
    again = card_setup_start(actor=manager)
    assert again.pk == first.pk and again.client_secret == first.client_secret
    assert CardSetup.objects.count() == 1
    # Once it is used, the next start makes a new one.
    stripe_on.confirm_setup(first.stripe_setup_intent_id)
    assert card_setup_start(actor=manager).pk != first.pk


def test_replacing_the_card_detaches_the_old_one(org, manager, stripe_on):
    old = save_card(stripe_on, manager)
    new = save_card(stripe_on, manager, number="5555555555554444")
    assert default_card(stripe_on, org) == new.stripe_payment_method_id
    assert stripe_on.payment_method(old.stripe_payment_method_id)["customer"] is None
    assert card_on_file(actor=manager).last4 == "4444"


def test_a_declined_card_is_not_saved(org, manager, stripe_on):
    setup = card_setup_start(actor=manager)
    with pytest.raises(Exception, match="declined"):  # what Stripe.js shows on the page
        stripe_on.confirm_setup(setup.stripe_setup_intent_id, number="4000000000000002")
    with pytest.raises(ValidationFailed) as exc:
        card_setup_complete(actor=manager, setup_intent_id=setup.stripe_setup_intent_id)
    assert "canceled" in exc.value.message
    setup.refresh_from_db()
    assert setup.status == CardSetupStatus.FAILED
    assert default_card(stripe_on, org) is None and card_on_file(actor=manager) is None


def test_removing_the_card(org, manager, stripe_on):
    setup = save_card(stripe_on, manager)
    assert card_remove(actor=manager) is True
    assert default_card(stripe_on, org) is None and card_on_file(actor=manager) is None
    assert stripe_on.payment_method(setup.stripe_payment_method_id)["customer"] is None
    assert card_remove(actor=manager) is False
    assert AuditEvent.objects.filter(organization=org, action="card.removed").count() == 1


def test_only_billing_managers_save_or_remove_cards(members, actor_for, stripe_on):
    for role in (Role.DEVELOPER, Role.VIEWER):
        with pytest.raises(PermissionDenied):
            card_setup_start(actor=actor_for(members[role]))
        with pytest.raises(PermissionDenied):
            card_remove(actor=actor_for(members[role]))
        with pytest.raises(PermissionDenied):
            card_setup_complete(actor=actor_for(members[role]), setup_intent_id="seti_x")
    assert not CardSetup.objects.exists()


# --- tenancy ------------------------------------------------------------------------------


def test_another_organizations_setup_intent_is_refused(
    org, other_org, manager, other_members, actor_for, stripe_on
):
    globex = actor_for(other_members[Role.OWNER])
    # Given Acme's manager has a SetupIntent, confirmed with a card
    ours = card_setup_start(actor=manager)
    stripe_on.confirm_setup(ours.stripe_setup_intent_id)
    # When Globex's owner posts Acme's SetupIntent id back on its own page
    with pytest.raises(NotFound):
        card_setup_complete(actor=globex, setup_intent_id=ours.stripe_setup_intent_id)
    # Then nothing is saved anywhere, and Acme's own post-back still works
    assert CardSetup.objects.get(pk=ours.pk).status == CardSetupStatus.PENDING
    assert card_on_file(actor=globex) is None
    assert card_setup_complete(actor=manager, setup_intent_id=ours.stripe_setup_intent_id) == (
        "succeeded"
    )
    assert card_on_file(actor=globex) is None
    assert card_on_file(actor=manager).last4 == "4242"


def test_a_setup_intent_of_another_customer_is_never_applied(
    org, other_org, manager, other_members, actor_for, stripe_on, client
):
    globex = actor_for(other_members[Role.OWNER])
    theirs = card_setup_start(actor=globex)
    stripe_on.confirm_setup(theirs.stripe_setup_intent_id, number="5555555555554444")
    ours = card_setup_start(actor=manager)
    confirmed = stripe_on.confirm_setup(ours.stripe_setup_intent_id)
    globex_customer = other_org.billing_profile.stripe_customer_id
    # When an event names Acme's SetupIntent but Globex's customer
    forged = stripe_on.event("setup_intent.succeeded", {**confirmed, "customer": globex_customer})
    response = stripe_on.deliver(client, forged)
    # Then it is acknowledged and changes nothing, for either organization
    assert response.status_code == 200 and response.json()["outcome"] == "mismatch: customer"
    assert CardSetup.objects.get(pk=ours.pk).status == CardSetupStatus.PENDING
    assert card_on_file(actor=manager) is None and card_on_file(actor=globex) is None
    # And when Acme's row names Globex's SetupIntent (a confused id), the post-back is refused
    CardSetup.objects.filter(pk=theirs.pk).update(stripe_setup_intent_id="seti_moved")
    CardSetup.objects.filter(pk=ours.pk).update(
        stripe_setup_intent_id=theirs.stripe_setup_intent_id
    )
    with pytest.raises(Conflict):
        card_setup_complete(actor=manager, setup_intent_id=theirs.stripe_setup_intent_id)
    assert card_on_file(actor=manager) is None and card_on_file(actor=globex) is None


# --- the webhook ----------------------------------------------------------------------------


def test_setup_intent_succeeded_webhook_saves_the_card_once(org, manager, stripe_on, client):
    setup = card_setup_start(actor=manager)
    seti = setup.stripe_setup_intent_id
    confirmed = stripe_on.confirm_setup(seti)
    # The webhook comes first (the page was closed before it posted back)
    event = stripe_on.event("setup_intent.succeeded", confirmed)
    first = stripe_on.deliver(client, event)
    assert first.status_code == 200 and first.json()["outcome"] == "succeeded"
    pm = CardSetup.objects.get(pk=setup.pk).stripe_payment_method_id
    assert default_card(stripe_on, org) == pm
    # A replay, another event saying the same, and the late post-back change nothing
    assert stripe_on.deliver(client, event).json()["duplicate"] is True
    again = stripe_on.event("setup_intent.succeeded", confirmed)
    assert stripe_on.deliver(client, again).json()["outcome"] == "already_succeeded"
    assert card_setup_complete(actor=manager, setup_intent_id=seti) == "already_succeeded"
    assert AuditEvent.objects.filter(organization=org, action="card.saved").count() == 1
    # After the card is removed, a late event does not bring it back
    card_remove(actor=manager)
    late = stripe_on.event("setup_intent.succeeded", confirmed)
    assert stripe_on.deliver(client, late).json()["outcome"] == "already_succeeded"
    assert card_on_file(actor=manager) is None


def test_an_older_setup_succeeding_late_does_not_replace_a_newer_card(
    org, manager, stripe_on, client
):
    older = card_setup_start(actor=manager)
    stripe_on.confirm_setup(older.stripe_setup_intent_id, number="5555555555554444")
    newer = save_card(stripe_on, manager)
    event = stripe_on.event(
        "setup_intent.succeeded",
        stripe_on.client.v1.setup_intents.retrieve(older.stripe_setup_intent_id).to_dict(),
    )
    assert stripe_on.deliver(client, event).json()["outcome"] == "superseded"
    assert default_card(stripe_on, org) == newer.stripe_payment_method_id


def test_a_setup_webhook_during_an_outage_is_sent_again(org, manager, stripe_on, client):
    setup = card_setup_start(actor=manager)
    confirmed = stripe_on.confirm_setup(setup.stripe_setup_intent_id)
    event = stripe_on.event("setup_intent.succeeded", confirmed)
    stripe_on.outage()
    assert stripe_on.deliver(client, event).status_code == 503  # nothing stored: Stripe resends
    assert CardSetup.objects.get(pk=setup.pk).status == CardSetupStatus.PENDING
    stripe_on.restore()
    assert stripe_on.deliver(client, event).json()["outcome"] == "succeeded"
    assert card_on_file(actor=manager).last4 == "4242"


# --- Stripe off, Stripe down -------------------------------------------------------------------


def test_with_stripe_off_cards_are_refused_clearly(org, manager, settings):
    settings.STRIPE_SECRET_KEY = ""
    for call in (
        lambda: card_setup_start(actor=manager),
        lambda: card_setup_complete(actor=manager, setup_intent_id="seti_1"),
        lambda: card_remove(actor=manager),
    ):
        with pytest.raises(ValidationFailed, match="bank transfer"):
            call()
    assert card_on_file(actor=manager) is None
    assert not CardSetup.objects.exists()


def test_with_stripe_down_nothing_is_half_saved(org, manager, stripe_on):
    stripe_adapter.customer_ensure(organization_id=org.pk)
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable):
        card_setup_start(actor=manager)
    assert CardSetup.objects.get().status == CardSetupStatus.FAILED  # no SetupIntent was made
    with pytest.raises(stripe_adapter.StripeUnavailable):
        card_on_file(actor=manager)
    stripe_on.restore()
    setup = card_setup_start(actor=manager)  # a new one once Stripe is back
    stripe_on.confirm_setup(setup.stripe_setup_intent_id)
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable):
        card_setup_complete(actor=manager, setup_intent_id=setup.stripe_setup_intent_id)
    stripe_on.restore()
    assert CardSetup.objects.get(pk=setup.pk).status == CardSetupStatus.PENDING
    assert card_setup_complete(actor=manager, setup_intent_id=setup.stripe_setup_intent_id) == (
        "succeeded"
    )


# --- top-ups charged to the card -------------------------------------------------------------


def test_a_top_up_charges_the_saved_card_and_credits_only_on_the_webhook(
    prepaid, manager, stripe_on, client
):
    # Given a card saved through a SetupIntent
    setup = save_card(stripe_on, manager)
    # When the manager tops up $30.00
    payment = topup_charge_card(actor=manager, amount_minor=3_000, request_key="form-1")
    # Then Stripe charged the saved card at once, but the balance has not moved
    pi = payment.stripe_payment_intent_id
    intent = stripe_on.intent(pi)
    assert (intent["status"], intent["amount"], intent["payment_method"]) == (
        "succeeded",
        3_000,
        setup.stripe_payment_method_id,
    )
    assert intent["metadata"]["payment_id"] == str(payment.pk)
    assert payment.requires_action is False and payment.client_secret == ""
    assert Payment.objects.get(pk=payment.pk).status == PaymentStatus.PENDING
    assert prepaid_balance(prepaid.pk) == 0
    # When Stripe's webhook arrives, the balance rises, once
    event = stripe_on.event("payment_intent.succeeded", stripe_on.intent(pi))
    assert stripe_on.deliver(client, event).json()["outcome"] == "succeeded"
    assert prepaid_balance(prepaid.pk) == 30_000_000
    assert stripe_on.deliver(client, event).json()["duplicate"] is True
    again = stripe_on.event("payment_intent.succeeded", stripe_on.intent(pi))
    assert stripe_on.deliver(client, again).json()["outcome"] == "already_succeeded"
    payments_retry_pending(older_than_seconds=0)
    entry = LedgerEntry.objects.get(organization=prepaid)
    assert (entry.kind, entry.reference, entry.amount) == (LedgerKind.TOP_UP, pi, 30_000_000)


def test_the_same_top_up_form_sent_twice_charges_once(prepaid, manager, stripe_on):
    save_card(stripe_on, manager)
    first = topup_charge_card(actor=manager, amount_minor=2_000, request_key="form-7")
    second = topup_charge_card(actor=manager, amount_minor=2_000, request_key="form-7")
    assert second.pk == first.pk and second.duplicate is True
    assert len(stripe_on.payment_intents(prepaid)) == 1
    third = topup_charge_card(actor=manager, amount_minor=2_000, request_key="form-8")
    assert third.pk != first.pk and len(stripe_on.payment_intents(prepaid)) == 2


def test_a_top_up_needing_3d_secure_is_finished_on_the_page(prepaid, manager, stripe_on, client):
    stripe_on.card_for(prepaid, number="4000002500003155")
    payment = topup_charge_card(actor=manager, amount_minor=1_500)
    assert payment.requires_action is True
    pi = payment.stripe_payment_intent_id
    assert payment.client_secret.startswith(f"{pi}_secret_")
    assert stripe_on.intent(pi)["status"] == "requires_action"
    # The page's stripe.confirmCardPayment; then the webhook credits it
    assert stripe_on.authenticate(pi)["status"] == "succeeded"
    assert prepaid_balance(prepaid.pk) == 0
    stripe_on.deliver(client, stripe_on.event("payment_intent.succeeded", stripe_on.intent(pi)))
    assert prepaid_balance(prepaid.pk) == 15_000_000


def test_a_declined_top_up_fails_and_credits_nothing(prepaid, manager, stripe_on):
    stripe_on.card_for(prepaid, number="4000000000000341")
    payment = topup_charge_card(actor=manager, amount_minor=1_500)
    assert payment.status == PaymentStatus.FAILED
    assert "declined" in payment.failure_message.lower()
    assert Payment.objects.get(pk=payment.pk).status == PaymentStatus.FAILED
    assert prepaid_balance(prepaid.pk) == 0


def test_a_top_up_without_a_card_on_file_is_refused(prepaid, manager, stripe_on):
    with pytest.raises(ValidationFailed, match="No card on file"):
        topup_charge_card(actor=manager, amount_minor=1_500)
    assert not Payment.objects.exists()


def test_a_top_up_when_stripe_goes_down_charges_nothing(prepaid, manager, stripe_on, client):
    save_card(stripe_on, manager)
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable):
        topup_charge_card(actor=manager, amount_minor=1_500)
    assert not Payment.objects.exists()
    stripe_on.restore()
    # Down between our row and the charge: the row says so, nothing credited
    down = stripe_adapter.StripeUnavailable("Stripe is unreachable just now: timeout")
    with (
        mock.patch.object(stripe_adapter, "payment_intent_create", side_effect=down),
        pytest.raises(stripe_adapter.StripeUnavailable),
    ):
        topup_charge_card(actor=manager, amount_minor=1_500)
    payment = Payment.objects.get()
    assert payment.status == PaymentStatus.FAILED and "unreachable" in payment.failure_message
    assert prepaid_balance(prepaid.pk) == 0


def test_top_ups_by_card_are_for_billing_managers(prepaid, members, actor_for, stripe_on):
    with pytest.raises(PermissionDenied):
        topup_charge_card(actor=actor_for(members[Role.DEVELOPER]), amount_minor=1_500)


def test_with_stripe_off_card_top_ups_are_refused(prepaid, manager, settings):
    settings.STRIPE_SECRET_KEY = ""
    with pytest.raises(ValidationFailed, match="bank transfer"):
        topup_charge_card(actor=manager, amount_minor=1_500)


# --- paying an invoice now --------------------------------------------------------------------


def _charges(invoice):
    return Payment.objects.filter(invoice=invoice, kind=PaymentKind.INVOICE)


def test_pay_now_charges_the_card_once_however_often_it_is_pressed(
    card_invoice, members, actor_for, stripe_on
):
    manager = actor_for(members[Role.FINANCE])
    assert invoice_pay_now(actor=manager, invoice_id=card_invoice.pk) == "succeeded"
    with pytest.raises(Conflict, match="paid"):
        invoice_pay_now(actor=manager, invoice_id=card_invoice.pk)
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.PAID and card_invoice.amount_due_minor == 0
    assert _charges(card_invoice).get().status == PaymentStatus.SUCCEEDED
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1


def test_pay_now_reuses_the_pending_payment(card_invoice, members, actor_for, stripe_on):
    # A card that needs its holder: the first press leaves a pending payment
    stripe_on.card_for(card_invoice.organization, number="4000002500003155")
    manager = actor_for(members[Role.FINANCE])
    assert invoice_pay_now(actor=manager, invoice_id=card_invoice.pk) == "requires_action"
    assert invoice_pay_now(actor=manager, invoice_id=card_invoice.pk) == "requires_action"
    assert _charges(card_invoice).count() == 1
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1


def test_pay_now_without_a_card_says_so(org, finalized, members, actor_for, stripe_on):
    manager = actor_for(members[Role.FINANCE])
    assert invoice_pay_now(actor=manager, invoice_id=finalized.pk) == "no_payment_method"
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.FINALIZED


def test_pay_now_is_for_the_own_organizations_billing_managers(
    card_invoice, members, other_members, actor_for, stripe_on
):
    with pytest.raises(NotFound):
        invoice_pay_now(actor=actor_for(other_members[Role.OWNER]), invoice_id=card_invoice.pk)
    with pytest.raises(PermissionDenied):
        invoice_pay_now(actor=actor_for(members[Role.DEVELOPER]), invoice_id=card_invoice.pk)
    assert not _charges(card_invoice).exists()


def test_pay_now_with_stripe_down_leaves_one_pending_payment(
    card_invoice, members, actor_for, stripe_on
):
    manager = actor_for(members[Role.FINANCE])
    stripe_on.outage()
    with pytest.raises(stripe_adapter.StripeUnavailable):
        invoice_pay_now(actor=manager, invoice_id=card_invoice.pk)
    stripe_on.restore()
    assert invoice_pay_now(actor=manager, invoice_id=card_invoice.pk) == "succeeded"
    assert _charges(card_invoice).count() == 1
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1


@pytest.mark.django_db(transaction=True)
def test_pay_now_pressed_at_once_from_many_tabs_charges_once(
    org, month_calls, members, actor_for, stripe_on
):
    from django.db import connection

    from invoicing.services import invoice_draft, invoice_finalize
    from invoicing.tasks import collect_invoice
    from tests.invoicing.test_concurrency_pg import _in_threads
    from tests.services import require

    require(connection.vendor == "postgresql", "needs PostgreSQL (set DATABASE_URL)")
    stripe_on.card_for(org)
    with mock.patch.object(collect_invoice, "delay"):  # committed for real here: no broker
        invoice = invoice_finalize(
            invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
        )
    manager = actor_for(members[Role.FINANCE])

    def press(i):
        try:
            return invoice_pay_now(actor=manager, invoice_id=invoice.pk)
        except Conflict:
            return "conflict"

    results = _in_threads(5, press)
    assert results.count("succeeded") == 1, results
    assert set(results) <= {"succeeded", "not_open", "already_succeeded", "conflict"}, results
    assert len(stripe_on.payment_intents(org)) == 1
