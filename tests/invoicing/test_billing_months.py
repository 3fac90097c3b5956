"""``billing_months``: what the analytics Billing page draws, read through
``invoicing.facade`` (the console never queries invoices itself)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from invoicing.facade import billing_months
from invoicing.models import CreditNote, Invoice, Payment

pytestmark = pytest.mark.django_db

MONTHS = ["2024-12", "2025-01", "2025-02"]


def _invoice(org, period, status, total, currency="USD"):
    year, month = (int(p) for p in period.split("-"))
    nxt = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return Invoice.objects.create(
        organization=org, period=period, period_start=datetime(year, month, 1, tzinfo=UTC),
        period_end=nxt, currency=currency, status=status,
        number=f"INV-T-{org.pk}-{period}-{status}", total=total,
    )  # fmt: skip


def test_invoiced_paid_and_refunded_per_month_in_one_currency(org, other_org):
    # Given: invoices in every state, a payment, a refund, and other currencies and orgs.
    paid_inv = _invoice(org, "2025-01", "finalized", 123_450_000)
    _invoice(org, "2024-12", "paid", 1_000_000)
    _invoice(org, "2025-01", "void", 9_000_000)
    _invoice(org, "2025-02", "draft", 9_000_000)
    _invoice(other_org, "2025-01", "finalized", 5_000_000)
    _invoice(other_org, "2025-02", "finalized", 7_000_000, currency="EUR")
    Payment.objects.create(
        organization=org, invoice=paid_inv, kind="invoice", method="stripe",
        status="succeeded", currency="USD", amount_minor=10000,
        created_at=datetime(2025, 2, 10, tzinfo=UTC),
    )  # fmt: skip
    Payment.objects.create(
        organization=org, invoice=paid_inv, kind="invoice", method="stripe",
        status="failed", currency="USD", amount_minor=99999,
        created_at=datetime(2025, 2, 10, tzinfo=UTC),
    )  # fmt: skip
    CreditNote.objects.create(
        invoice=paid_inv, organization=org, number="INV-T-CN01", sequence=1, currency="USD",
        amount=5_000_000, amount_minor=500, refund_minor=500, effect="refund_card", reason="t",
        created_at=datetime(2025, 1, 31, 23, 30, tzinfo=UTC),
    )  # fmt: skip

    # When: the months are read in UTC and in a zone an hour ahead.
    utc = billing_months(
        organization_id=org.pk, currency="USD", months=MONTHS,
        since=datetime(2024, 12, 1, tzinfo=UTC), tz=UTC,
    )  # fmt: skip
    paris = billing_months(
        organization_id=org.pk, currency="USD", months=MONTHS,
        since=datetime(2024, 12, 1, tzinfo=UTC), tz=ZoneInfo("Europe/Paris"),
    )  # fmt: skip

    # Then: finalized and paid invoices count, by period; money moves by local month.
    assert utc.invoiced == {"2024-12": 1_000_000, "2025-01": 123_450_000, "2025-02": 0}
    assert utc.paid == {"2024-12": 0, "2025-01": 0, "2025-02": 10000}
    assert utc.refunded == {"2024-12": 0, "2025-01": 500, "2025-02": 0}
    assert paris.refunded == {"2024-12": 0, "2025-01": 0, "2025-02": 500}
