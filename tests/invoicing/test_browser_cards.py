"""The card on file in real headless Chromium (Playwright driving
/usr/bin/chromium), with localstripe's fake Stripe.js served from
``STRIPE_JS_URL``: a billing manager saves test card 4242, sees it on file,
tops up with it and, once Stripe's signed webhook arrives, sees the balance
rise on the page, with no JavaScript error on the way."""

from __future__ import annotations

from pathlib import Path

import pytest

from invoicing.models import CardSetup, Payment, PaymentStatus
from invoicing.selectors import prepaid_balance
from tests.services import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_manager_saves_a_card_and_tops_up_with_it(
    live_server, client, finance, prepaid, stripe_on, localstripe_url, browser_page
):
    page, errors = browser_page
    stripe_on.settings.STRIPE_JS_URL = f"{localstripe_url}/js.stripe.com/v3/"
    ARTIFACTS.mkdir(exist_ok=True)
    base = live_server.url

    # Log in as a billing manager and open the payment-method page.
    sign_in(page, base, finance.user)
    page.goto(f"{base}/billing/top-up/")
    page.click("#add-card-link")
    page.wait_for_selector("#no-card")

    # Add a card: Stripe.js (localstripe's) mounts its card Element.
    page.click("#card-start")
    page.wait_for_selector("#card-element input[placeholder=number]")
    element = page.locator("#card-element")
    element.locator("input[placeholder=number]").fill("4242424242424242")
    element.locator("input[placeholder=exp_month]").fill("12")
    element.locator("input[placeholder=exp_year]").fill("34")
    element.locator("input[placeholder=cvc]").fill("123")
    element.locator("input[placeholder=postal_code]").fill("10115")
    page.click("#card-save")

    # confirmCardSetup, the post-back, the server's check with Stripe: the card is on file.
    page.wait_for_selector("#card-on-file:has-text('Visa •••• 4242')")
    assert "expires 12/2034" in page.inner_text("#card-on-file")
    assert "Card saved" in page.inner_text(".messages")
    assert CardSetup.objects.get().status == "succeeded"
    page.screenshot(path=str(ARTIFACTS / "card-on-file.png"), full_page=True)

    # Top up 25.00 with it.
    page.click(".billing-nav >> text=Top up")
    page.wait_for_selector("#topup-form")
    assert "Visa •••• 4242" in page.inner_text("#topup-card")
    before = page.inner_text("#balance")
    page.fill("#topup-form #id_amount", "25")
    page.click("#topup-submit")
    page.wait_for_selector("#topup-status:has-text('Pending')")
    payment = Payment.objects.get()
    assert stripe_on.intent(payment.stripe_payment_intent_id)["status"] == "succeeded"
    assert prepaid_balance(prepaid.pk) == 0 and page.inner_text("#balance") == before

    # Stripe's signed webhook arrives: the page's poll shows the payment and the new balance.
    event = stripe_on.event(
        "payment_intent.succeeded", stripe_on.intent(payment.stripe_payment_intent_id)
    )
    assert stripe_on.deliver(client, event).json()["outcome"] == "succeeded"
    page.wait_for_selector("#topup-status:has-text('Succeeded')", timeout=15_000)
    page.wait_for_function(
        "(b) => document.getElementById('balance').textContent !== b", arg=before, timeout=15_000
    )
    assert page.inner_text("#balance").startswith("25.00")
    assert prepaid_balance(prepaid.pk) == 25_000_000
    assert Payment.objects.get().status == PaymentStatus.SUCCEEDED
    page.screenshot(path=str(ARTIFACTS / "card-top-up.png"), full_page=True)
    assert errors == []
