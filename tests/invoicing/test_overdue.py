"""A finalized invoice past its due date with something still to pay sends
``invoice.overdue`` once (beat's hourly sweep may see it many times); a paid
one never does; a destination subscribed to it gets one signed delivery."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone as tz

from accounts.models import Role
from console.features.webhooks.models import Delivery, DeliveryStatus
from console.features.webhooks.services import destination_create
from console.kernel import hooks
from invoicing.models import Invoice, InvoiceStatus
from invoicing.services import (
    invoice_draft,
    invoice_finalize,
    invoice_mark_paid,
    invoices_notify_overdue,
)
from invoicing.tasks import notify_overdue
from tests.webhooks.conftest import (  # noqa: F401 - the webhooks tests' receiver and inline delivery
    _fast_webhooks,
    inline_deliveries,
    receiver,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def heard():
    """Every ``invoice.overdue`` handed to ``console.kernel.hooks.OUTBOUND_EVENT``."""
    events: list[dict] = []

    def listen(**kwargs) -> None:
        if kwargs["event_type"] == "invoice.overdue":
            events.append(kwargs)

    hooks.OUTBOUND_EVENT.connect(listen)
    yield events
    hooks.OUTBOUND_EVENT.disconnect(listen)


@pytest.fixture
def invoice(org, month_calls, settings):
    settings.STRIPE_SECRET_KEY = ""
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    assert invoice.status == InvoiceStatus.FINALIZED and invoice.amount_due_minor > 0
    return invoice


def past_due(invoice, days=1) -> None:
    Invoice.objects.filter(pk=invoice.pk).update(due_at=tz.now() - timedelta(days=days))


def test_an_unpaid_invoice_past_its_due_date_fires_invoice_overdue_once_across_runs(
    org, invoice, heard, settings
):
    assert invoices_notify_overdue() == 0  # not yet due
    past_due(invoice)

    assert invoices_notify_overdue() == 1
    assert invoices_notify_overdue() == 0  # the next hour: already announced
    assert notify_overdue() == 0  # the beat task, the same sweep
    assert settings.CELERY_BEAT_SCHEDULE["invoicing-notify-overdue"] == {
        "task": notify_overdue.name,
        "schedule": 3600.0,
        "options": {"expires": 3000.0},
    }

    [fired] = heard
    assert fired["organization_id"] == org.pk
    assert fired["event_id"] == f"invoice.overdue:{invoice.pk}"
    assert fired["data"]["number"] == invoice.number
    assert fired["data"]["amount_minor"] == invoice.amount_due_minor
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.FINALIZED  # overdue is late, not a new status
    assert list(invoice.events.filter(type="overdue").values_list("type", flat=True)) == ["overdue"]


def test_a_partly_paid_invoice_is_overdue_for_what_is_left(org, invoice, heard, members, actor_for):
    invoice_mark_paid(
        actor=actor_for(members[Role.FINANCE]),
        invoice_id=invoice.pk,
        reference="WIRE-PART",
        amount_minor=100,
    )
    past_due(invoice)
    assert invoices_notify_overdue() == 1
    assert heard[0]["data"]["amount_minor"] == invoice.amount_due_minor - 100


def test_a_paid_invoice_past_its_due_date_never_fires(org, invoice, heard, members, actor_for):
    invoice_mark_paid(
        actor=actor_for(members[Role.FINANCE]), invoice_id=invoice.pk, reference="WIRE-1"
    )
    past_due(invoice)
    assert invoices_notify_overdue() == 0
    assert heard == []
    assert not invoice.events.filter(type="overdue").exists()


def test_invoice_overdue_reaches_a_subscribed_destination_signed_once(
    org,
    invoice,
    members,
    actor_for,
    receiver,  # noqa: F811 - the fixture
    django_capture_on_commit_callbacks,
):
    _, secret = destination_create(
        actor=actor_for(members[Role.OWNER]),
        name="Collections",
        kind="webhook",
        url=receiver.url,
        events=["invoice.overdue"],
    )
    receiver.secret = secret
    past_due(invoice, days=3)

    for _ in range(2):  # two hourly runs
        with django_capture_on_commit_callbacks(execute=True):
            notify_overdue()

    [got] = receiver.requests
    assert got["verified"] == f"invoice.overdue:{invoice.pk}"
    assert got["json"]["type"] == "invoice.overdue"
    assert got["json"]["organization"] == org.slug
    assert got["json"]["data"]["number"] == invoice.number
    assert got["json"]["data"]["amount_minor"] == invoice.amount_due_minor
    assert Delivery.objects.get().status == DeliveryStatus.SUCCEEDED
