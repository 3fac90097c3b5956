"""The prepaid ledger: the balance is the sum of its entries, every movement
is idempotent on its reference, ingest debits prepaid organizations once per
batch, gateways hear of non-usage movements after commit, and the low-balance
notice goes out once per crossing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core import mail

from accounts.errors import PermissionDenied, ValidationFailed
from invoicing.models import BillingProfile, LedgerEntry, LedgerKind
from invoicing.selectors import prepaid_balance, prepaid_balances
from invoicing.services import ledger_entry_create, prepaid_adjust
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.models import CallRecord

pytestmark = pytest.mark.django_db(transaction=True)
T0 = datetime(2025, 3, 4, 10, 15, tzinfo=UTC)
USD = 1_000_000


def test_balance_is_the_sum_of_entries_and_references_are_idempotent(org, other_org, notified):
    ledger_entry_create(
        organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=50 * USD, reference="pi_1"
    )
    _, created = ledger_entry_create(
        organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=50 * USD, reference="pi_1"
    )
    assert not created
    ledger_entry_create(
        organization_id=org.pk,
        kind=LedgerKind.ADJUSTMENT,
        amount=-3 * USD,
        reference="fix-1",
        reason="double grant",
    )
    ledger_entry_create(
        organization_id=other_org.pk, kind=LedgerKind.GRANT, amount=USD, reference="g", reason="x"
    )
    assert prepaid_balance(org.pk) == 47 * USD
    assert prepaid_balances([org.pk, other_org.pk, 999]) == {
        org.pk: 47 * USD,
        other_org.pk: USD,
        999: 0,
    }
    # Gateways hear each committed non-usage movement once.
    assert notified == [(org.pk, 50 * USD), (org.pk, -3 * USD), (other_org.pk, USD)]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"amount": 0}, "amount"),
        ({"amount": 1.5}, "amount"),
        ({"amount": 10**20}, "amount"),
        ({"reference": ""}, "reference"),
        ({"kind": "bonus"}, "kind"),
        ({"kind": LedgerKind.ADJUSTMENT, "reason": " "}, "reason"),
    ],
)
def test_bad_entries_are_refused_with_a_field_error(org, fields, field):
    args = {"organization_id": org.pk, "kind": LedgerKind.TOP_UP, "amount": USD, "reference": "r"}
    with pytest.raises(ValidationFailed) as exc:
        ledger_entry_create(**{**args, **fields})
    assert field in exc.value.fields
    assert not LedgerEntry.objects.exists()


def test_a_rolled_back_entry_notifies_nobody(org, notified):
    from django.db import transaction

    def top_up_then_fail():
        with transaction.atomic():
            ledger_entry_create(
                organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=USD, reference="x"
            )
            raise RuntimeError

    with pytest.raises(RuntimeError):
        top_up_then_fail()
    assert notified == []
    assert prepaid_balance(org.pk) == 0


def test_manual_adjustments_need_billing_rights_and_are_audited(members, actor_for, notified):
    from accounts.models import AuditEvent, Role

    with pytest.raises(PermissionDenied):
        prepaid_adjust(actor=actor_for(members[Role.DEVELOPER]), amount=USD, reason="gift")
    entry = prepaid_adjust(
        actor=actor_for(members[Role.FINANCE]), amount=5 * USD, reason="goodwill", kind="grant"
    )
    assert entry.created_by == members[Role.FINANCE].user
    assert AuditEvent.objects.filter(action="ledger.grant").count() == 1
    assert prepaid_balance(entry.organization_id) == 5 * USD


def test_ingest_debits_a_prepaid_org_once_per_batch(catalog, prepaid, key, notified):
    ledger_entry_create(
        organization_id=prepaid.pk, kind=LedgerKind.TOP_UP, amount=10 * USD, reference="pi"
    )
    batch = [event(key, started_at=T0, output_tokens=300 + i) for i in range(20)]
    ingest_events(batch)
    cost = sum(CallRecord.objects.filter(organization_id=prepaid.pk).values_list("cost", flat=True))
    assert cost > 0
    assert prepaid_balance(prepaid.pk) == 10 * USD - cost
    usage = LedgerEntry.objects.get(organization_id=prepaid.pk, kind=LedgerKind.USAGE)
    assert usage.amount == -cost
    # Redelivery and an overlapping batch debit only the new calls.
    ingest_events(batch)
    extra = [event(key, started_at=T0)]
    ingest_events(batch[:5] + extra)
    new_cost = CallRecord.objects.get(request_id=extra[0]["request_id"]).cost
    assert prepaid_balance(prepaid.pk) == 10 * USD - cost - new_cost
    assert LedgerEntry.objects.filter(kind=LedgerKind.USAGE).count() == 2
    # Usage debits are the gateway's own settled reservations: no notification.
    assert notified == [(prepaid.pk, 10 * USD)]


def test_postpaid_orgs_have_no_ledger_debits(catalog, org, key):
    ingest_events([event(key, started_at=T0)])
    assert CallRecord.objects.count() == 1
    assert not LedgerEntry.objects.exists()


def test_low_balance_notice_once_per_crossing(catalog, prepaid, key, finance, notified):
    BillingProfile.objects.create(organization=prepaid, low_balance_threshold=USD)
    ledger_entry_create(
        organization_id=prepaid.pk, kind=LedgerKind.TOP_UP, amount=USD + 600, reference="pi"
    )
    assert mail.outbox == []
    # Each call costs 240 micro-units: the third crosses below the threshold.
    for _ in range(2):
        ingest_events([event(key, started_at=T0)])
    assert mail.outbox == []
    ingest_events([event(key, started_at=T0)])
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == [finance.user.email]
    assert "balance is low" in mail.outbox[0].subject
    ingest_events([event(key, started_at=T0)])
    assert len(mail.outbox) == 1  # still below: no second notice
    # A top-up re-arms it; the next crossing notifies again.
    ledger_entry_create(
        organization_id=prepaid.pk, kind=LedgerKind.TOP_UP, amount=1000, reference="pi2"
    )
    assert len(mail.outbox) == 1
    for _ in range(5):
        ingest_events([event(key, started_at=T0)])
    assert len(mail.outbox) == 2
