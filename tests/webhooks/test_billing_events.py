"""Billing fires its events through console.kernel.hooks: a top-up and an invoice's
finalization and payment reach a real receiver, signed."""

from __future__ import annotations

import pytest

from accounts.models import Role
from console.features.webhooks.models import OutboundEvent
from console.features.webhooks.services import destination_create
from invoicing.services import invoice_draft, invoice_finalize, invoice_mark_paid
from invoicing.services.topups import topup_record_manual
from tests.invoicing.conftest import month_calls, prepaid  # noqa: F401 - fixtures
from tests.usage.conftest import _fresh_usage_caches, catalog, key, make_key  # noqa: F401


@pytest.fixture
def subscribed(org, members, actor_for, receiver):
    _, secret = destination_create(
        actor=actor_for(members[Role.OWNER]),
        name="Books",
        kind="webhook",
        url=receiver.url,
        events=["invoice.finalized", "invoice.paid", "topup.succeeded"],
    )
    receiver.secret = secret
    return receiver


def test_a_manual_top_up_is_delivered_once_as_topup_succeeded(
    prepaid,  # noqa: F811
    members,
    actor_for,
    subscribed,
    settings,
    django_capture_on_commit_callbacks,
):
    settings.STRIPE_SECRET_KEY = ""
    finance = actor_for(members[Role.FINANCE])
    with django_capture_on_commit_callbacks(execute=True):
        payment = topup_record_manual(actor=finance, amount_minor=12_345, reference="BANK-1")
    with django_capture_on_commit_callbacks(execute=True):
        topup_record_manual(actor=finance, amount_minor=12_345, reference="BANK-1")  # a repeat
    [got] = subscribed.requests
    assert got["verified"] == f"topup.succeeded:{payment.pk}"
    assert got["json"]["type"] == "topup.succeeded"
    assert got["json"]["data"]["amount_minor"] == 12_345
    assert got["json"]["data"]["currency"] == prepaid.currency


def test_finalizing_and_paying_an_invoice_are_delivered(
    org,
    month_calls,  # noqa: F811 - the fixture
    members,
    actor_for,
    subscribed,
    settings,
    django_capture_on_commit_callbacks,
):
    settings.STRIPE_SECRET_KEY = ""
    with django_capture_on_commit_callbacks(execute=True):
        invoice = invoice_finalize(
            invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
        )
    assert [r["json"]["type"] for r in subscribed.requests] == ["invoice.finalized"]
    data = subscribed.requests[0]["json"]["data"]
    assert (data["number"], data["amount_minor"]) == (invoice.number, invoice.amount_due_minor)
    with django_capture_on_commit_callbacks(execute=True):
        invoice_mark_paid(
            actor=actor_for(members[Role.FINANCE]),
            invoice_id=invoice.pk,
            reference="WIRE-1",
        )
    assert [r["json"]["type"] for r in subscribed.requests] == ["invoice.finalized", "invoice.paid"]
    assert all(r["verified"] for r in subscribed.requests)
    assert OutboundEvent.objects.filter(organization=org).count() == 2
