"""The finance console's balance, ledger, settings and top-ups: the balance is
the ledger's sum, adjustments need a reason, top-ups with Stripe on, off and
down, and a form posted twice is one entry."""

from __future__ import annotations

import re
from unittest import mock

import pytest
from django.urls import reverse

from accounts.models import AuditEvent, Role
from invoicing.models import (
    BillingProfile,
    LedgerEntry,
    LedgerKind,
    Payment,
    PaymentStatus,
)
from invoicing.selectors import prepaid_balance
from tests.invoicing.pages import (
    VISA,
    as_member,
    html,
)

pytestmark = pytest.mark.django_db


# --- balance, ledger and settings ----------------------------------------------------------------------


def test_balance_is_the_sum_of_the_ledger_and_adjustments_need_a_reason(client, members, org):
    c = as_member(client, members[Role.FINANCE])
    url = reverse("invoicing:balance_adjust")
    form = html(c.get("/billing/balance/"))
    token = re.search(r'name="token" value="([^"]+)"', form).group(1)
    response = c.post(url, {"kind": "grant", "amount": "25", "reason": "", "token": token})
    assert response.status_code == 200 and "This field is required" in html(response)
    response = c.post(url, {"kind": "grant", "amount": "-5", "reason": "x", "token": token})
    assert response.status_code == 200 and "use an adjustment" in html(response)
    response = c.post(url, {"kind": "grant", "amount": "1e", "reason": "x", "token": token})
    assert response.status_code == 200 and "is not an amount" in html(response)
    response = c.post(url, {"kind": "usage", "amount": "5", "reason": "x", "token": token})
    assert response.status_code == 200
    ok = {"kind": "grant", "amount": "25", "reason": "bank transfer TR-9", "token": token}
    assert c.post(url, ok).status_code == 302
    assert c.post(url, ok).status_code == 302  # a double submit is one entry
    data = {**ok, "kind": "adjustment", "amount": "-2.5", "reason": "correction"}
    assert c.post(url, {**data, "token": "5d1c1f0e-8a7b-4c3d-9e2f-1a2b3c4d5e6f"}).status_code == 302
    assert LedgerEntry.objects.filter(organization=org).count() == 2
    assert prepaid_balance(org.pk) == 22_500_000
    page = html(c.get("/billing/balance/"))
    assert "22.50 USD" in page and "bank transfer TR-9" in page and "correction" in page
    assert AuditEvent.objects.filter(action="ledger.grant").count() == 1


def test_ledger_pages_by_keyset(client, members, org):
    from invoicing.services import ledger_entry_create

    for i in range(55):
        ledger_entry_create(
            organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=1000 + i, reference=f"r{i}"
        )
    c = as_member(client, members[Role.FINANCE])
    first = html(c.get("/billing/balance/"))
    assert first.count("data-entry=") == 50
    older = re.search(r'id="older" href="\?before=(\d+)"', first).group(1)
    second = html(c.get("/billing/balance/", {"before": older}))
    assert second.count("data-entry=") == 5 and 'id="older"' not in second
    assert c.get("/billing/balance/", {"before": "nonsense"}).status_code == 200


def test_billing_settings(client, members, org):
    c = as_member(client, members[Role.FINANCE])
    url = reverse("invoicing:billing_settings")
    response = c.post(url, {"low_balance_threshold": "1e30"})
    assert response.status_code == 200 and "too large" in html(response)
    response = c.post(url, {"billing_email": "not-an-email", "low_balance_threshold": "x"})
    assert response.status_code == 200
    assert "valid email" in html(response) and "is not an amount" in html(response)
    data = {"legal_name": "Acme GmbH", "address": "Street 1\nBerlin", "tax_id": "DE123",
            "billing_email": "ap@acme.test", "low_balance_threshold": "10.5"}  # fmt: skip
    assert c.post(url, data).status_code == 302
    profile = BillingProfile.objects.get(organization=org)
    assert profile.low_balance_threshold == 10_500_000 and profile.legal_name == "Acme GmbH"
    assert AuditEvent.objects.filter(action="billing_profile.update").count() == 1
    page = html(c.get("/billing/balance/"))
    assert "below 10.50 USD" in page and 'value="Acme GmbH"' in page
    assert c.post(url, {**data, "low_balance_threshold": ""}).status_code == 302
    profile.refresh_from_db()
    assert profile.low_balance_threshold is None


# --- top-ups ---------------------------------------------------------------------------------------


def test_topup_without_stripe_says_finance_records_it(client, members, prepaid, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get("/billing/top-up/"))
    assert "recorded by finance by hand" in page and 'id="topup-form"' not in page
    response = c.post("/billing/top-up/", {"amount": "50"})
    assert response.status_code == 302
    assert not Payment.objects.exists() and not LedgerEntry.objects.exists()


def test_topup_with_stripe_creates_a_pending_payment(client, members, prepaid, org, settings):
    settings.STRIPE_SECRET_KEY = "sk_test_x"
    c = as_member(client, members[Role.FINANCE])
    created = []

    def fake_topup_charge_card(*, actor, amount_minor, request_key):
        payment = Payment.objects.create(
            organization_id=actor.organization_id, kind="top_up", method="stripe",
            currency="USD", amount_minor=amount_minor, stripe_payment_intent_id="pi_1",
            request_key=request_key,
        )  # fmt: skip
        payment.client_secret = "pi_1_secret_abc"
        payment.requires_action = True
        created.append(amount_minor)
        return payment

    with (
        mock.patch("invoicing.selectors.card_on_file", return_value=VISA),
        mock.patch("invoicing.services.topup_charge_card", fake_topup_charge_card),
    ):
        page = html(c.get("/billing/top-up/"))
        assert 'id="topup-form"' in page and "Visa •••• 4242" in page
        key = re.search(r'name="request_key" value="([^"]+)"', page).group(1)
        bad = c.post("/billing/top-up/", {"action": "card", "amount": "12.345"})
        assert bad.status_code == 200 and "at most 2 decimal places" in html(bad)
        big = c.post("/billing/top-up/", {"action": "card", "amount": "100000.01"})
        assert big.status_code == 200 and "at most 100,000.00 USD" in html(big)
        response = c.post(
            "/billing/top-up/", {"action": "card", "amount": "50", "request_key": key}
        )
    page = html(response)
    assert response.status_code == 200 and created == [5000]
    assert Payment.objects.get().request_key == key
    assert 'id="topup-status"' in page and "Pending" in page
    assert "balance rises when the payment succeeds" in page
    # 3-D Secure: the page gets the client secret and Stripe.js (from the setting) to finish it.
    assert 'data-client-secret="pi_1_secret_abc"' in page and "data-confirm-payment" in page
    assert f'<script src="{settings.STRIPE_JS_URL}">' in page
    assert prepaid_balance(org.pk) == 0  # nothing until Stripe says it succeeded
    # The page polls the payment's status while it is pending.
    payment = Payment.objects.get()
    assert f'hx-get="/billing/top-up/?payment={payment.pk}"' in page
    poll = html(c.get("/billing/top-up/", {"payment": payment.pk}, HTTP_HX_REQUEST="true"))
    assert "Pending" in poll and 'hx-trigger="every 3s"' in poll
    assert 'id="balance" hx-swap-oob="true"' in poll  # the balance follows the poll
    Payment.objects.filter(pk=payment.pk).update(status=PaymentStatus.SUCCEEDED)
    poll = html(c.get("/billing/top-up/", {"payment": payment.pk}))
    assert "Succeeded" in poll and "hx-trigger" not in poll
    assert c.get("/billing/top-up/", {"payment": "x"}).status_code == 404


def test_topup_without_a_card_on_file_links_to_the_payment_method_page(
    client, members, prepaid, settings
):
    settings.STRIPE_SECRET_KEY = "sk_test_x"
    c = as_member(client, members[Role.FINANCE])
    with mock.patch("invoicing.selectors.card_on_file", return_value=None):
        page = html(c.get("/billing/top-up/"))
    assert 'id="topup-form"' not in page and 'id="topup-no-card"' in page
    assert 'href="/billing/payment-method/"' in page and "add a card" in page
    assert "js.stripe.com" not in page  # Stripe.js only where a card is entered or confirmed


def test_topup_page_survives_stripe_being_down(client, members, prepaid, settings):
    from invoicing.stripe_adapter import StripeUnavailable

    settings.STRIPE_SECRET_KEY = "sk_test_x"
    c = as_member(client, members[Role.FINANCE])
    down = StripeUnavailable("Stripe is unreachable just now: boom")
    with mock.patch("invoicing.selectors.card_on_file", side_effect=down):
        response = c.get("/billing/top-up/")
    assert response.status_code == 200
    assert "Stripe is unreachable just now" in html(response)
    assert 'id="topup-form"' not in html(response)


def test_topup_service_errors_are_on_the_form(client, members, prepaid, settings):
    from accounts.errors import ValidationFailed

    settings.STRIPE_SECRET_KEY = "sk_test_x"

    def refuse(*, actor, amount_minor, request_key):
        raise ValidationFailed.from_fields({"amount": "A top-up is at least 5.00 USD."})

    with (
        mock.patch("invoicing.selectors.card_on_file", return_value=VISA),
        mock.patch("invoicing.services.topup_charge_card", refuse),
    ):
        response = as_member(client, members[Role.FINANCE]).post(
            "/billing/top-up/", {"action": "card", "amount": "1", "request_key": "k1"}
        )
    assert response.status_code == 200 and "at least 5.00 USD" in html(response)
    # The form comes back with a new one-time token.
    assert 'name="request_key" value="k1"' not in html(response)


def test_manual_bank_transfer_top_up(client, members, prepaid, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    assert 'id="manual-topup-form"' in html(c.get("/billing/top-up/"))
    data = {"action": "manual", "manual-amount": "40", "manual-reference": "TR-2025-77"}
    bad = c.post("/billing/top-up/", {**data, "manual-reference": " "})
    assert bad.status_code == 200 and "This field is required" in html(bad)
    assert c.post("/billing/top-up/", data).status_code == 302
    assert c.post("/billing/top-up/", data).status_code == 302  # the same transfer: once
    payment = Payment.objects.get()
    assert (payment.status, payment.amount_minor, payment.method) == (
        PaymentStatus.SUCCEEDED,
        4000,
        "bank_transfer",
    )
    assert prepaid_balance(prepaid.pk) == 40_000_000
    assert LedgerEntry.objects.get().kind == LedgerKind.TOP_UP
    assert "TR-2025-77" in html(c.get("/billing/top-up/"))


def test_postpaid_organizations_get_no_top_up_form(client, members, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get("/billing/top-up/"))
    assert 'id="topup-prepaid-only"' in page and "Top-ups are for prepaid accounts" in page
    assert 'id="manual-topup-form"' not in page and 'id="topup-form"' not in page
    assert 'id="nav-topup"' not in page  # nor the link to it
    assert 'id="nav-topup"' not in html(c.get("/billing/balance/"))
    data = {"action": "manual", "manual-amount": "40", "manual-reference": "TR-1"}
    response = c.post("/billing/top-up/", data)
    assert response.status_code == 409 and "Top-ups are for prepaid accounts" in html(response)
    assert not Payment.objects.exists()


def test_card_top_up_against_localstripe(client, members, prepaid, stripe_on):
    # Given Stripe on (localstripe), a prepaid organization and no card on file
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get("/billing/top-up/"))
    assert 'id="topup-no-card"' in page and 'id="topup-form"' not in page
    refused = c.post("/billing/top-up/", {"action": "card", "amount": "25"})
    assert "No card on file" in html(refused) and not Payment.objects.exists()
    # When a card is on file and finance tops up 25.00 by card
    stripe_on.card_for(prepaid)
    page = html(c.get("/billing/top-up/"))
    assert 'id="topup-form"' in page and "Visa •••• 4242" in page
    key = re.search(r'name="request_key" value="([^"]+)"', page).group(1)
    response = c.post("/billing/top-up/", {"action": "card", "amount": "25", "request_key": key})
    page = html(response)
    # Then the card is charged (Stripe says succeeded), but no money until the webhook
    payment = Payment.objects.get()
    assert payment.status == PaymentStatus.PENDING and payment.amount_minor == 2500
    assert stripe_on.intent(payment.stripe_payment_intent_id)["status"] == "succeeded"
    assert 'id="topup-status"' in page and "Pending" in page
    assert "balance rises when the payment succeeds" in page
    assert "data-client-secret" not in page  # no 3-D Secure: nothing for Stripe.js to do
    assert prepaid_balance(prepaid.pk) == 0
    # The same form sent again (a double click) charges nothing more
    again = c.post("/billing/top-up/", {"action": "card", "amount": "25", "request_key": key})
    assert "submitted already" in html(again)
    assert Payment.objects.count() == 1 and len(stripe_on.payment_intents(prepaid)) == 1


# --- a form posted twice is one entry; settings save through the service --------------


def test_the_balance_form_posted_twice_with_its_token_is_one_entry(client, members, org):
    import uuid

    from invoicing.models import LedgerEntry

    c = as_member(client, members[Role.FINANCE])
    form = {"kind": "grant", "amount": "12.50", "reason": "gift", "token": str(uuid.uuid4())}
    assert c.post("/billing/balance/adjust/", form).status_code == 302
    assert c.post("/billing/balance/adjust/", form).status_code == 302
    assert LedgerEntry.objects.filter(organization=org).count() == 1


def test_the_settings_form_saves_through_the_service(client, members, org):
    from unittest import mock

    from invoicing.services import billing_profile

    c = as_member(client, members[Role.FINANCE])
    with (
        mock.patch.object(
            billing_profile, "billing_profile_update", wraps=billing_profile.billing_profile_update
        ) as update,
        mock.patch("invoicing.services.billing_profile_update", update),
    ):
        response = c.post("/billing/settings/", {"legal_name": "Acme SE", "tax_id": "DE1"})
    assert response.status_code == 302
    assert update.call_count == 1
    assert update.call_args.kwargs["legal_name"] == "Acme SE"
    assert org.billing_profile.tax_id == "DE1"
