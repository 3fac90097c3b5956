"""Load-test calls marked "not billed" (``is_test``) in a billed month: the
invoice holds the billed calls only, to the micro-unit (lines, breakdown,
reconciliation), the prepaid balance pays for the billed ones only, and a
re-rating of the closed month adjusts no test call; the test calls stay
recorded at their rated cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum

from invoicing.breakdown import invoice_breakdown
from invoicing.models import LedgerKind, LineKind
from invoicing.reconcile import reconcile
from invoicing.selectors import prepaid_balance
from invoicing.services import invoice_draft, ledger_entry_create
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.models import Adjustment, CallRecord, Price
from usage.rerate import rerate

pytestmark = pytest.mark.django_db
MARCH = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
USD = 1_000_000


@pytest.fixture
def mixed_month(catalog, org, key):
    org.billing_mode = "prepaid"
    org.save(update_fields=["billing_mode"])
    ledger_entry_create(organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=50 * USD,
                        reference="top-up")  # fmt: skip
    events = [
        event(key, started_at=MARCH + timedelta(hours=i), input_tokens=100_003 + i,
              output_tokens=7_001 + i, end_user=f"u-{i % 2}", is_test=i % 3 == 0)
        for i in range(9)
    ]  # fmt: skip
    # Mixed batches: a batch of test calls only, and test and billed calls together.
    ingest_events([events[0], events[3], events[6]])
    ingest_events([e for i, e in enumerate(events) if i % 3])
    return org


def _costs(org):
    calls = CallRecord.objects.filter(organization_id=org.pk)
    billed = calls.filter(is_test=False).aggregate(s=Sum("cost"))["s"]
    test = calls.filter(is_test=True).aggregate(s=Sum("cost"))["s"]
    return billed, test


def test_the_invoice_and_the_balance_count_the_billed_calls_only(mixed_month):
    org = mixed_month
    billed, test = _costs(org)
    assert billed > 0 and test > 0  # test calls are rated like any other
    assert prepaid_balance(org.pk) == 50 * USD - billed

    invoice = invoice_draft(organization_id=org.pk, period="2025-03")
    usage = sum(ln.amount for ln in invoice.lines.filter(kind=LineKind.USAGE))
    assert usage == invoice.usage_amount == billed
    assert invoice.calls == 6
    breakdown = invoice_breakdown(invoice, "end_user")
    assert sum(r.amount for r in breakdown.rows) == billed
    report = reconcile("2025-03")
    (mine,) = [o for o in report["organizations"] if o["organization_id"] == org.pk]
    assert mine["ok"], mine["problems"]
    assert mine["call_costs"] == billed


def test_an_organization_with_test_calls_only_gets_no_invoice_line(catalog, org, key):
    ingest_events([event(key, started_at=MARCH, is_test=True)])
    invoice = invoice_draft(organization_id=org.pk, period="2025-03")
    assert invoice.usage_amount == 0 and invoice.calls == 0
    assert CallRecord.objects.get().cost > 0


def test_re_rating_a_closed_month_adjusts_billed_calls_only(mixed_month):
    org = mixed_month
    invoice_draft(organization_id=org.pk, period="2025-03")
    from invoicing.services import invoice_finalize

    invoice = org.invoices.get(period="2025-03")
    invoice_finalize(invoice_id=invoice.pk)
    price = Price.objects.filter(model__name="sim-chat-small", organization=None).first()
    price.output_per_mtok *= 2
    price.save()
    rerate(start=MARCH - timedelta(days=2), end=MARCH + timedelta(days=2), reason="doubled")
    adjusted = set(Adjustment.objects.values_list("request_id", flat=True))
    calls = CallRecord.objects.filter(organization_id=org.pk)
    assert adjusted == set(calls.filter(is_test=False).values_list("request_id", flat=True))
