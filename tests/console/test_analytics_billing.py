"""Analytics, Billing: one basis per series, said in its legend (invoiced
by issue date, paid by payment date, refunded by refund date and only once
completed); the page's range is honoured; a pending refund is not refunded."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, date, datetime

import pytest
from django.urls import reverse

from accounts.models import Role
from invoicing.models import CreditNote, Invoice, Payment

pytestmark = pytest.mark.django_db

INVOICED = "Invoiced (by issue date)"
PAID = "Paid (by payment date)"
REFUNDED = "Refunded (by refund date, completed only)"


def _invoice(org, period, total, issued_at, status="finalized", currency="USD"):
    year, month = (int(p) for p in period.split("-"))
    return Invoice.objects.create(
        organization=org, period=period, period_start=datetime(year, month, 1, tzinfo=UTC),
        period_end=datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC),
        currency=currency, status=status, number=f"INV-B-{period}-{status}", total=total,
        issued_at=issued_at,
    )  # fmt: skip


def _payment(org, invoice, at, minor, *, kind="invoice", status="succeeded", note=None):
    return Payment.objects.create(
        organization=org, invoice=invoice, credit_note=note, kind=kind,
        method="bank_transfer", status=status, currency="USD", amount_minor=minor, created_at=at,
    )  # fmt: skip


def _note(org, invoice, at, minor, effect, seq):
    return CreditNote.objects.create(
        invoice=invoice, organization=org, number=f"{invoice.number}-CN{seq:02d}", sequence=seq,
        currency="USD", amount=minor * 10_000, amount_minor=minor, refund_minor=minor,
        effect=effect, reason="t", created_at=at,
    )  # fmt: skip


def _chart(client, member, **params):
    client.force_login(member.user)
    response = client.get(reverse("analytics:chart_billing"), params)
    assert response.status_code == 200, response.content[:500]
    page = response.content.decode()
    m = re.search(
        r'<script type="application/json" class="js-figure"[^>]*>(.*?)</script>', page, re.S
    )
    figure = json.loads(m.group(1)) if m else None
    series = (
        {t["name"]: dict(zip(t["x"], t["y"], strict=True)) for t in figure["data"]}
        if figure
        else {}
    )
    return page, series


def _csv(client, member, **params):
    client.force_login(member.user)
    response = client.get(reverse("analytics:chart_billing"), {**params, "format": "csv"})
    return list(csv.reader(io.StringIO(response.content.decode().lstrip("\ufeff"))))


@pytest.fixture
def berlin(org):
    org.timezone = "Europe/Berlin"
    org.save(update_fields=["timezone"])
    return org


@pytest.fixture
def february(berlin):
    """Billing around 3-5 February 2025 in Berlin, and things just outside it."""
    org = berlin
    jan = _invoice(org, "2025-01", 123_454_999, datetime(2025, 2, 3, 9, tzinfo=UTC))  # 123.45
    _invoice(org, "2024-12", 99_000_000, datetime(2025, 1, 2, 9, tzinfo=UTC))  # before the range
    _invoice(org, "2024-11", 7_000_000, datetime(2025, 2, 3, 9, tzinfo=UTC), status="void")
    _invoice(org, "2024-10", 2_000_000, datetime(2025, 2, 4, 9, tzinfo=UTC), "uncollectible")
    _payment(org, jan, datetime(2025, 2, 4, 10, tzinfo=UTC), 10_000)
    _payment(org, jan, datetime(2025, 2, 4, 10, tzinfo=UTC), 99_999, status="failed")
    _payment(org, jan, datetime(2025, 1, 20, 10, tzinfo=UTC), 5_000)  # before the range
    # Refunds: one completed by hand, one pending, one failed, one to the balance.
    done = _note(org, jan, datetime(2025, 2, 4, 11, tzinfo=UTC), 300, "refund_manual", 1)
    _payment(org, jan, done.created_at, 300, kind="refund", note=done)
    pending = _note(org, jan, datetime(2025, 2, 4, 12, tzinfo=UTC), 700, "refund_card", 2)
    _payment(org, jan, pending.created_at, 700, kind="refund", status="pending", note=pending)
    failed = _note(org, jan, datetime(2025, 2, 4, 13, tzinfo=UTC), 900, "refund_card", 3)
    _payment(org, jan, failed.created_at, 900, kind="refund", status="failed", note=failed)
    _note(org, jan, datetime(2025, 2, 3, 23, 30, tzinfo=UTC), 50, "refund_balance", 4)
    return org


RANGE = {"range": "custom", "from": "2025-02-03T00:00", "to": "2025-02-05T00:00"}


def test_each_series_names_its_basis_in_the_legend(client, members, february):
    page, series = _chart(client, members[Role.FINANCE], **RANGE)
    assert list(series) == [INVOICED, PAID, REFUNDED]
    assert "a refund still pending is not counted" in page
    header = _csv(client, members[Role.FINANCE], **RANGE)[0]
    assert header == [
        "day",
        "invoiced_by_issue_date_USD",
        "paid_by_payment_date_USD",
        "refunded_completed_by_refund_date_USD",
    ]


def test_the_range_is_honoured_per_day_in_the_orgs_zone(client, members, february):
    _, series = _chart(client, members[Role.FINANCE], **RANGE)

    # Only the two Berlin days of the range; nothing from January or December.
    assert list(series[INVOICED]) == ["2025-02-03", "2025-02-04"]
    # Invoiced: January's invoice (issued 3 Feb) and the uncollectible one; not the void one.
    assert series[INVOICED] == {"2025-02-03": 123.45, "2025-02-04": 2.0}
    # Paid: the succeeded payment of 4 Feb only (not the failed one, not 20 Jan's).
    assert series[PAID] == {"2025-02-03": 0.0, "2025-02-04": 100.0}
    # Refunded: the completed refund by hand and the refund to the balance (made
    # at 23:30 UTC on 3 Feb: 4 Feb in Berlin); the pending and failed ones are not.
    assert series[REFUNDED] == {"2025-02-03": 0.0, "2025-02-04": 3.5}


def test_a_pending_refund_counts_once_it_is_paid_out(client, members, february):
    Payment.objects.filter(kind="refund", status="pending").update(status="succeeded")
    _, series = _chart(client, members[Role.FINANCE], **RANGE)
    assert series[REFUNDED]["2025-02-04"] == 10.5


def test_a_long_range_is_per_month_in_the_orgs_zone(client, members, february):
    # 23:30 UTC on 31 January is February in Berlin.
    jan = Invoice.objects.get(organization=february, period="2025-01")
    _payment(february, jan, datetime(2025, 1, 31, 23, 30, tzinfo=UTC), 1_000)
    params = {"range": "custom", "from": "2025-01-01T00:00", "to": "2025-03-01T00:00"}
    _, series = _chart(client, members[Role.FINANCE], **params)
    assert list(series[PAID]) == ["2025-01", "2025-02"]
    assert series[PAID] == {"2025-01": 50.0, "2025-02": 110.0}
    assert series[INVOICED] == {"2025-01": 99.0, "2025-02": 125.45}
    rows = _csv(client, members[Role.FINANCE], **params)
    assert rows[0][0] == "month" and rows[1] == ["2025-01", "99.00", "50.00", "0.00"]
    assert "Months in Europe/Berlin" in _chart(client, members[Role.FINANCE], **params)[0]


def test_an_empty_range_says_so(client, members, february):
    params = {"range": "custom", "from": "2025-03-03T00:00", "to": "2025-03-05T00:00"}
    page, series = _chart(client, members[Role.FINANCE], **params)
    assert series == {} and "No invoices issued, payments or completed refunds" in page


def test_a_payment_counts_on_the_day_the_money_moved_not_the_day_it_was_recorded(
    client, members, february
):
    # A bank transfer that arrived on 3 February, recorded a week later.
    jan = Invoice.objects.get(organization=february, period="2025-01")
    late = _payment(february, jan, datetime(2025, 2, 11, 9, tzinfo=UTC), 2_500)
    late.paid_on = date(2025, 2, 3)
    late.save(update_fields=["paid_on"])
    # And one recorded inside the range for money that moved before it.
    early = _payment(february, jan, datetime(2025, 2, 4, 15, tzinfo=UTC), 4_000)
    early.paid_on = date(2025, 1, 30)
    early.save(update_fields=["paid_on"])

    _, series = _chart(client, members[Role.FINANCE], **RANGE)

    assert series[PAID] == {"2025-02-03": 25.0, "2025-02-04": 100.0}
