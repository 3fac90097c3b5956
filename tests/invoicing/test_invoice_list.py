"""The invoice list reconciles on screen: Total - Credited - Paid = Due on
every row and in the totals per currency; the status says refunded or
credited; filters and sorting live in the query string; the list comes
before the running month's preview."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from accounts.models import Role
from invoicing.models import Invoice, InvoiceStatus, Payment, PaymentKind, PaymentStatus
from invoicing.money import to_minor
from invoicing.services import (
    credit_note_create,
    invoice_mark_paid,
    invoice_mark_uncollectible,
    invoice_void,
)
from tests.invoicing.pages import as_member, html

pytestmark = pytest.mark.django_db
URL = "/billing/invoices/"


def _invoice(org, period, total, *, currency="USD", applied=0, status=InvoiceStatus.FINALIZED):
    """An invoice as ``invoice_finalize`` leaves it (``applied``: prepaid balance used)."""
    year, month = (int(p) for p in period.split("-"))
    nxt = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    due = total - applied
    return Invoice.objects.create(
        organization=org, period=period, period_start=datetime(year, month, 1, tzinfo=UTC),
        period_end=nxt, currency=currency, status=status,
        number=f"INV-L-{org.pk}-{period}-{currency}", subtotal=total, total=total,
        credits_applied=applied, amount_due_initial=due,
        amount_due_initial_minor=to_minor(due, currency), issued_at=nxt,
    )  # fmt: skip


def _amount(text: str) -> Decimal:
    """A displayed amount back to a number (code or symbol, grouping, minus signs)."""
    text = text.replace("\u2212", "-").replace("\u2013", "-")
    negative = "-" in text
    digits = re.sub(r"[^\d.]", "", text.replace(",", ""))
    value = Decimal(digits)
    return -value if negative else value


def _cells(row: str) -> dict[str, str]:
    return {
        name: re.sub(r"<[^>]+>", " ", cell)
        for name, cell in re.findall(r'data-col="(\w+)">(.*?)</td>', row, re.S)
    }


def _rows(page: str) -> dict[str, dict]:
    out = {}
    for attrs, row in re.findall(r"<tr (data-invoice=[^>]*)>(.*?)</tr>", page, re.S):
        cells = _cells(row)
        status = re.search(r'data-status="(\w+)"', attrs).group(1)
        period = re.search(r"<td[^>]*>(\d{4}-\d{2})</td>", row).group(1)
        badge = re.search(r'<span class="badge [\w]+">([^<]+)</span>', row).group(1)
        out[period] = {
            "status": status,
            "badge": badge,
            "row": row,
            **{k: _first_amount(v) for k, v in cells.items()},
        }
    return out


def _first_amount(text: str) -> Decimal:
    return _amount(re.split(r"\s{2,}|written|overpaid|voided", text.strip())[0])


@pytest.fixture
def ledgerbook(org):
    """Six months of one organization's invoices in every state finance meets."""
    # January: paid in full by transfer, then fully credited: refunded by hand (pending).
    jan = _invoice(org, "2025-01", 100_004_999)  # 100.00 USD
    invoice_mark_paid(invoice_id=jan.pk, reference="TR-JAN", amount_minor=10_000)
    credit_note_create(invoice_id=jan.pk, full=True, reason="service outage")
    # February: 50.01 USD, 10 USD credited before payment, 20 USD paid.
    feb = _invoice(org, "2025-02", 50_005_000)
    credit_note_create(invoice_id=feb.pk, amount=10_000_000, reason="goodwill")
    invoice_mark_paid(invoice_id=feb.pk, reference="TR-FEB", amount_minor=2_000)
    # March: a prepaid month, paid from the balance at invoicing.
    _invoice(org, "2025-03", 30_000_000, applied=30_000_000, status=InvoiceStatus.PAID)
    # April: paid, then 15 USD credited after payment: partly refunded.
    apr = _invoice(org, "2025-04", 40_000_000)
    invoice_mark_paid(invoice_id=apr.pk, reference="TR-APR", amount_minor=4_000)
    credit_note_create(invoice_id=apr.pk, amount=15_000_000, reason="overcharge")
    # Finance has paid April's refund out (January's is still owed).
    Payment.objects.filter(invoice=apr, kind=PaymentKind.REFUND).update(
        status=PaymentStatus.SUCCEEDED
    )
    # May: never paid, written off. June: voided.
    may = _invoice(org, "2025-05", 12_340_000)
    invoice_mark_uncollectible(invoice_id=may.pk, reason="customer gone")
    jun = _invoice(org, "2025-06", 9_990_000)
    invoice_void(invoice_id=jun.pk, reason="issued in error")
    return org


def test_every_row_reconciles_and_the_status_says_what_happened(client, members, ledgerbook):
    page = html(as_member(client, members[Role.FINANCE]).get(URL))
    rows = _rows(page)

    assert [(p, r["badge"]) for p, r in sorted(rows.items())] == [
        ("2025-01", "Refunded"),  # paid, then all of it given back: never just "Paid"
        ("2025-02", "Partially credited"),
        ("2025-03", "Paid"),
        ("2025-04", "Partially refunded"),
        ("2025-05", "Uncollectible"),
        ("2025-06", "Void"),
    ]
    expected = {  # total, credited, paid, due
        "2025-01": ("100.00", "100.00", "0.00", "0.00"),
        "2025-02": ("50.01", "10.00", "20.00", "20.01"),
        "2025-03": ("30.00", "0.00", "30.00", "0.00"),
        "2025-04": ("40.00", "15.00", "25.00", "0.00"),
        "2025-05": ("12.34", "0.00", "0.00", "0.00"),
        "2025-06": ("9.99", "0.00", "0.00", "0.00"),
    }
    for period, (total, credited, paid, due) in expected.items():
        r = rows[period]
        assert (r["total"], r["credited"], r["paid"], r["due"]) == tuple(
            Decimal(x) for x in (total, credited, paid, due)
        ), period
    for period in ("2025-01", "2025-02", "2025-03", "2025-04"):
        r = rows[period]
        assert r["total"] - r["credited"] - r["paid"] == r["due"], period
    # Where the due is zero by decision, the row says what the rest is.
    assert "written off" in rows["2025-05"]["row"] and "12.34" in rows["2025-05"]["row"]
    assert "voided" in rows["2025-06"]["row"]
    # The refund of January's credit note is owed, not paid out yet.
    assert "refund pending" in rows["2025-01"]["row"]
    assert "refund pending" not in rows["2025-04"]["row"]
    # Columns are explained on the page.
    assert "Total \u2212 Credited \u2212 Paid = Due" in page and 'id="invoice-columns"' in page


def test_the_totals_row_reconciles_per_currency(client, members, ledgerbook):
    _invoice(ledgerbook, "2024-12", 7_500_000, currency="EUR")
    page = html(as_member(client, members[Role.FINANCE]).get(URL))

    foot = page.split("<tfoot>", 1)[1].split("</tfoot>", 1)[0]
    usd = re.search(r'<tr class="total" data-totals="USD">(.*?)</tr>', foot, re.S).group(1)
    eur = re.search(r'<tr class="total" data-totals="EUR">(.*?)</tr>', foot, re.S).group(1)
    t = {k: _first_amount(v) for k, v in _cells(usd).items()}
    # Void June is left out; May's 12.34 is written off.
    assert (t["total"], t["credited"], t["paid"], t["due"]) == (
        Decimal("232.35"), Decimal("125.00"), Decimal("75.00"), Decimal("20.01"),
    )  # fmt: skip
    assert "5 invoices in USD" in usd and "1 void not counted" in usd
    assert "written off" in usd and "12.34" in usd.split("written off", 1)[1]
    assert t["total"] - t["credited"] - t["paid"] == t["due"] + Decimal("12.34")
    e = {k: _first_amount(v) for k, v in _cells(eur).items()}
    assert (e["total"], e["due"]) == (Decimal("7.50"), Decimal("7.50"))
    # Several currencies: the currency filter shows, and narrows the list.
    assert 'name="currency"' in page and 'type="hidden" name="currency"' not in page
    only_eur = html(as_member(client, members[Role.FINANCE]).get(URL, {"currency": "EUR"}))
    assert list(_rows(only_eur)) == ["2024-12"] and 'data-totals="USD"' not in only_eur


def test_filters_and_sorting_are_in_the_query_string(client, members, ledgerbook):
    c = as_member(client, members[Role.FINANCE])

    refunded = html(c.get(URL, {"status": "refunded"}))
    assert list(_rows(refunded)) == ["2025-01"]
    assert '<option value="refunded" selected>' in refunded
    assert list(_rows(html(c.get(URL, {"status": "partially_refunded"})))) == ["2025-04"]
    assert list(_rows(html(c.get(URL, {"status": "paid"})))) == ["2025-03"]

    window = html(c.get(URL, {"period_from": "2025-02", "period_to": "2025-04"}))
    assert list(_rows(window)) == ["2025-04", "2025-03", "2025-02"]  # newest first
    assert 'value="2025-02"' in window and 'value="2025-04"' in window
    assert "3 invoices matching the filters" in window

    by_due = html(c.get(URL, {"sort": "-due"}))
    assert next(iter(_rows(by_due))) == "2025-02"
    assert "sorted by due, largest first" in by_due
    assert 'data-sort="due">Due ↓' in by_due
    by_total = list(_rows(html(c.get(URL, {"sort": "total"}))))
    assert by_total == ["2025-06", "2025-05", "2025-03", "2025-04", "2025-02", "2025-01"]
    oldest = list(_rows(html(c.get(URL, {"sort": "period"}))))
    assert oldest == sorted(oldest)

    bad = c.get(URL, {"period_from": "2025-05", "period_to": "2025-01", "sort": "nonsense"})
    assert bad.status_code == 200 and "comes before the first" in html(bad)
    assert "Select a valid choice" in html(bad) and _rows(html(bad)) == {}


def test_pages_keep_the_filters(client, members, org):
    for i in range(55):
        year, month = 2020 + i // 12, i % 12 + 1
        _invoice(org, f"{year}-{month:02d}", 1_000_000 + i * 10_000)
    c = as_member(client, members[Role.FINANCE])

    first = html(c.get(URL, {"sort": "-total", "period_from": "2020-01"}))
    assert len(_rows(first)) == 50 and "page 1 of 2" in first
    link = re.search(r'<a href="\?([^"]+)" rel="next">', first).group(1).replace("&amp;", "&")
    assert link == "period_from=2020-01&sort=-total&page=2"
    second = _rows(html(c.get(f"{URL}?{link}")))
    assert sorted(second) == ["2020-01", "2020-02", "2020-03", "2020-04", "2020-05"]
    # The totals are of the whole filtered set, not of the page.
    assert "55 invoices in USD" in first


def test_the_list_comes_before_the_running_months_preview(client, members, ledgerbook):
    page = html(as_member(client, members[Role.FINANCE]).get(URL))
    assert page.index('id="invoices"') < page.index('id="preview"')
    assert page.index('id="invoice-filters"') < page.index('id="invoices"')
