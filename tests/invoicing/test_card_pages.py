"""The card on file and paying an invoice now: saving, showing and removing a
card, declines and 3-D Secure as messages, Stripe off or down, and only the
organization's managers."""

from __future__ import annotations

import re

import pytest

from accounts.models import Role
from invoicing.models import (
    CardSetup,
    InvoiceStatus,
    Payment,
)
from tests.invoicing.pages import (
    OTHER_ROLES,
    as_member,
    follow_messages,
    html,
)

pytestmark = pytest.mark.django_db


# --- the card on file ---------------------------------------------------------------------------


def test_payment_method_page_saves_shows_and_removes_a_card(client, members, org, stripe_on):
    c = as_member(client, members[Role.FINANCE])
    # Given no card: the page says so and offers to add one, without Stripe.js yet
    page = html(c.get("/billing/payment-method/"))
    assert 'id="no-card"' in page and "Add a card…" in page
    assert "js.stripe.com" not in page and "cards.js" not in page
    # When the manager starts: a card form with the SetupIntent's secret and Stripe.js
    page = html(c.post("/billing/payment-method/", {"action": "start"}))
    setup = CardSetup.objects.get(organization=org)
    secret = re.search(r'data-client-secret="([^"]+)"', page).group(1)
    assert secret.startswith(f"{setup.stripe_setup_intent_id}_secret_")
    assert f'<script src="{stripe_on.settings.STRIPE_JS_URL}"></script>' in page
    assert (
        re.search(r"/static/js/cards(\.[0-9a-f]{12})?\.js", page)
        and 'data-publishable-key="pk_test_helper_stripe"' in page
    )
    # and after Stripe.js confirmed the card, the page posts the SetupIntent id back
    stripe_on.confirm_setup(setup.stripe_setup_intent_id)
    response = c.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": setup.stripe_setup_intent_id},
    )
    page = follow_messages(c, response)
    # Then the card is on file, shown with brand, last 4 and expiry
    assert "Card saved" in page
    assert "Visa •••• 4242" in page and "expires 12/2034" in page
    assert "Replace the card…" in page and 'id="card-remove"' in page
    # and the manager can remove it
    page = follow_messages(c, c.post("/billing/payment-method/", {"action": "remove"}))
    assert "Card removed." in page and 'id="no-card"' in page


def test_a_declined_card_setup_is_a_message_not_an_error(client, members, org, stripe_on):
    c = as_member(client, members[Role.FINANCE])
    c.post("/billing/payment-method/", {"action": "start"})
    setup = CardSetup.objects.get(organization=org)
    with pytest.raises(Exception, match="declined"):
        stripe_on.confirm_setup(setup.stripe_setup_intent_id, number="4000000000000002")
    response = c.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": setup.stripe_setup_intent_id},
    )
    page = follow_messages(c, response)
    assert "The card was not saved" in page and 'id="no-card"' in page


def test_payment_method_page_with_stripe_off(client, members, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.OWNER])
    page = html(c.get("/billing/payment-method/"))
    assert "Card payments are not set up" in page and "bank transfer" in page
    assert 'id="card-start"' not in page and "js.stripe.com" not in page
    page = follow_messages(c, c.post("/billing/payment-method/", {"action": "start"}))
    assert "not set up" in page and not CardSetup.objects.exists()


def test_payment_method_page_with_stripe_down(client, members, org, stripe_on):
    from invoicing import stripe_adapter

    stripe_adapter.customer_ensure(organization_id=org.pk)
    stripe_on.outage()
    c = as_member(client, members[Role.ADMIN])
    response = c.get("/billing/payment-method/")
    assert response.status_code == 200
    assert "cannot be shown just now" in html(response) and "unreachable" in html(response)
    page = follow_messages(c, c.post("/billing/payment-method/", {"action": "start"}))
    assert "unreachable" in page and "data-client-secret" not in page


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_developers_and_viewers_cannot_change_the_card(client, members, org, stripe_on, role):
    c = as_member(client, members[role])
    for action in ("start", "remove", "confirm"):
        response = c.post("/billing/payment-method/", {"action": action, "setup_intent": "x"})
        assert response.status_code == 403
    assert not CardSetup.objects.exists()


def test_another_orgs_manager_cannot_see_or_use_the_card(
    client, members, other_members, org, stripe_on
):
    # Given Acme has a card on file and a SetupIntent in flight
    acme = as_member(client, members[Role.FINANCE])
    acme.post("/billing/payment-method/", {"action": "start"})
    saved = CardSetup.objects.get(organization=org)
    stripe_on.confirm_setup(saved.stripe_setup_intent_id, number="5555555555554444")
    acme.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": saved.stripe_setup_intent_id},
    )
    acme.post("/billing/payment-method/", {"action": "start"})
    waiting = CardSetup.objects.filter(organization=org).exclude(pk=saved.pk).get()
    acme.logout()
    # When Globex's owner opens its page and posts Acme's SetupIntent id
    globex = as_member(client, other_members[Role.OWNER])
    page = html(globex.get("/billing/payment-method/"))
    assert "4444" not in page and 'id="no-card"' in page
    response = globex.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": waiting.stripe_setup_intent_id},
    )
    # Then it is not found, and nothing changed
    assert response.status_code == 404
    assert CardSetup.objects.get(pk=waiting.pk).status == "pending"
    assert waiting.stripe_setup_intent_id not in html(response)
    assert "4444" not in html(globex.get("/billing/top-up/"))
    # Removing "its" card does not touch Acme's
    globex.post("/billing/payment-method/", {"action": "remove"})
    globex.logout()
    assert "•••• 4444" in html(
        as_member(client, members[Role.FINANCE]).get("/billing/payment-method/")
    )


# --- paying an invoice now ----------------------------------------------------------------------


def test_pay_now_charges_once_on_a_double_click(client, members, card_invoice, stripe_on):
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get(f"/billing/invoices/{card_invoice.pk}/"))
    assert 'id="pay-now"' in page and "Pay now with the card on file" in page
    assert "js.stripe.com" not in page  # no Stripe.js until the bank asks for the cardholder
    url = f"/billing/invoices/{card_invoice.pk}/pay/"
    first = follow_messages(c, c.post(url))
    assert "Paid with the card on file." in first
    second = follow_messages(c, c.post(url))
    assert "nothing to pay" in second
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.PAID
    assert Payment.objects.filter(invoice=card_invoice).count() == 1
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1
    assert 'id="pay-now"' not in html(c.get(f"/billing/invoices/{card_invoice.pk}/"))


def test_pay_now_without_a_card_links_to_the_payment_method_page(
    client, members, finalized, stripe_on
):
    c = as_member(client, members[Role.OWNER])
    page = follow_messages(c, c.post(f"/billing/invoices/{finalized.pk}/pay/"))
    assert 'No card on file: <a href="/billing/payment-method/">add a card</a>' in page
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.FINALIZED


def test_pay_now_declined_is_a_message(client, members, org, month_calls, stripe_on):
    from invoicing.services import invoice_draft, invoice_finalize

    stripe_on.card_for(org, number="4000000000000341")
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    c = as_member(client, members[Role.FINANCE])
    page = follow_messages(c, c.post(f"/billing/invoices/{invoice.pk}/pay/"))
    assert "The card was not charged" in page and "declined" in page.lower()


def test_pay_now_needing_3d_secure_is_finished_on_the_page(
    client, members, card_invoice, stripe_on
):
    stripe_on.card_for(card_invoice.organization, number="4000002500003155")
    c = as_member(client, members[Role.FINANCE])
    response = c.post(f"/billing/invoices/{card_invoice.pk}/pay/")
    assert response.status_code == 302 and response.url.endswith("?authenticate=1")
    page = html(c.get(response.url))
    pi = Payment.objects.get(invoice=card_invoice).stripe_payment_intent_id
    assert f'data-client-secret="{pi}_secret_' in page and "data-confirm-payment" in page
    assert f'<script src="{stripe_on.settings.STRIPE_JS_URL}"></script>' in page


def test_pay_now_is_not_offered_while_stripe_is_off(client, members, finalized, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    assert 'id="pay-now"' not in html(c.get(f"/billing/invoices/{finalized.pk}/"))
    page = follow_messages(c, c.post(f"/billing/invoices/{finalized.pk}/pay/"))
    assert "bank transfer" in page
    assert not Payment.objects.filter(invoice=finalized).exists()
