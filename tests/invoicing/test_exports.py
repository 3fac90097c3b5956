"""Finance CSV exports: a byte-order mark and a header, one row per object
of the organization, amounts in currency units with the currency's
decimals (no floats), period and status filters, the formula guard,
keyset chunks, and bad filters answered with a form, never a broken file."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Sum

from accounts.actors import Actor
from accounts.models import Role
from invoicing import exports
from invoicing.models import LedgerEntry, LedgerKind, LineKind
from invoicing.money import micro_to_currency, minor_to_decimal
from invoicing.selectors import prepaid_balance
from invoicing.services import (
    credit_note_create,
    invoice_draft,
    invoice_mark_paid,
    ledger_entry_create,
    prepaid_adjust,
)

pytestmark = pytest.mark.django_db


def download(client, membership, name, **params) -> tuple[list[str], list[dict]]:
    client.force_login(membership.user)
    response = client.get(f"/billing/exports/{name}.csv", params)
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith("attachment; filename=")
    text = b"".join(response.streaming_content).decode("utf-8")
    assert text.startswith("\ufeff")
    reader = csv.DictReader(io.StringIO(text[1:]))
    return reader.fieldnames, list(reader)


def test_invoices_csv(client, members, org, finalized, other_billing):
    actor = Actor(members[Role.FINANCE])
    note = credit_note_create(invoice_id=finalized.pk, actor=actor, amount=1_234_567, reason="r")
    invoice_mark_paid(invoice_id=finalized.pk, actor=actor, reference="T1", amount_minor=100)
    finalized.refresh_from_db()
    header, rows = download(client, members[Role.FINANCE], "invoices")
    assert header[:10] == [
        "number", "organization", "period", "status", "subtotal", "discount", "tax", "total",
        "paid", "currency",
    ]  # fmt: skip
    assert len(rows) == 1  # never another organization's
    row = rows[0]
    assert (row["number"], row["organization"], row["period"]) == (
        finalized.number,
        "Acme",
        "2025-03",
    )
    assert row["status"] == "finalized" and row["currency"] == "USD"
    assert row["subtotal"] == str(micro_to_currency(finalized.subtotal, "USD"))
    assert row["total"] == str(micro_to_currency(finalized.total, "USD"))
    assert row["paid"] == "1.00"
    assert row["credited"] == str(minor_to_decimal(note.amount_minor, "USD")) == "1.23"
    assert Decimal(row["amount_due"]) == minor_to_decimal(finalized.amount_due_minor, "USD")
    for column in ("subtotal", "discount", "tax", "total", "paid", "amount_due"):
        assert "." in row[column] and len(row[column].split(".")[1]) == 2, column
    berlin = ZoneInfo("Europe/Berlin")  # the organization's time zone
    assert row["issued_at"] == finalized.issued_at.astimezone(berlin).isoformat(timespec="seconds")


def test_invoice_filters(client, members, org, finalized):
    finance = members[Role.FINANCE]
    assert len(download(client, finance, "invoices", period="2025-03")[1]) == 1
    assert download(client, finance, "invoices", period="2025-04")[1] == []
    assert download(client, finance, "invoices", status="paid")[1] == []
    assert len(download(client, finance, "invoices", status="finalized")[1]) == 1
    client.force_login(finance.user)
    response = client.get("/billing/exports/ledger.csv", {"period": "9999-12"})
    assert response.status_code == 400
    response = client.get("/billing/exports/invoices.csv", {"status": "open", "period": "x"})
    assert response.status_code == 400 and response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "YYYY-MM" in page and "Select a valid choice" in page


def test_invoice_lines_csv_matches_the_invoice(client, members, finalized):
    header, rows = download(client, members[Role.FINANCE], "invoice-lines", period="2025-03")
    assert header == list(exports.LINE_COLUMNS)
    lines = list(finalized.lines.order_by("position"))
    assert len(rows) == len(lines)
    for row, line in zip(rows, lines, strict=True):
        assert row["invoice_number"] == finalized.number
        assert int(row["position"]) == line.position and row["kind"] == line.kind
        assert row["amount"] == str(micro_to_currency(line.amount, "USD"))
        assert int(row["quantity"]) == line.quantity
        if line.unit_price_per_mtok is not None:
            assert Decimal(row["unit_price_per_mtok"]) * 1_000_000 == line.unit_price_per_mtok
    usage_tokens = sum(int(r["quantity"]) for r in rows if r["kind"] == LineKind.USAGE)
    assert usage_tokens == finalized.lines.aggregate(s=Sum("quantity"))["s"]


def test_credit_notes_and_payments_csv(client, members, finalized):
    actor = Actor(members[Role.FINANCE])
    credit_note_create(
        invoice_id=finalized.pk, actor=actor, amount=2_000_000, reason="=cmd|' /C calc"
    )
    credit_note_create(invoice_id=finalized.pk, actor=actor, amount=500_000, reason="second")
    invoice_mark_paid(invoice_id=finalized.pk, actor=actor, reference="+SUM(A1)", amount_minor=77)
    finalized.refresh_from_db()
    header, notes = download(client, members[Role.FINANCE], "credit-notes")
    assert header == list(exports.CREDIT_NOTE_COLUMNS)
    assert len(notes) == 2
    assert sum(Decimal(n["amount"]) for n in notes) == minor_to_decimal(
        finalized.credited_minor, "USD"
    )
    assert {n["reason"] for n in notes} == {"'=cmd|' /C calc", "second"}  # the formula guard
    assert all(n["invoice_number"] == finalized.number for n in notes)
    assert download(client, members[Role.FINANCE], "credit-notes", status="paid")[1] == []
    header, payments = download(client, members[Role.FINANCE], "payments")
    assert header == list(exports.PAYMENT_COLUMNS)
    assert [(p["reference"], p["amount"], p["status"]) for p in payments] == [
        ("'+SUM(A1)", "0.77", "succeeded")
    ]
    assert download(client, members[Role.FINANCE], "payments", status="failed")[1] == []


def test_ledger_csv_sums_to_the_balance(client, members, org):
    actor = Actor(members[Role.FINANCE])
    prepaid_adjust(actor=actor, amount=10_000_000, reason="@grant", kind=LedgerKind.GRANT)
    for i in range(3):
        ledger_entry_create(
            organization_id=org.pk, kind=LedgerKind.USAGE, amount=-333_333 - i, reference=f"b{i}"
        )
    header, rows = download(client, members[Role.FINANCE], "ledger")
    assert header == [c.replace("{tz}", org.timezone) for c in exports.LEDGER_COLUMNS]
    assert header[1] == f"created_at ({org.timezone})"
    assert len(rows) == 4
    total = sum(Decimal(r["amount_exact"]) for r in rows)
    assert total * 1_000_000 == prepaid_balance(org.pk) == 10_000_000 - 1_000_002
    assert [r["amount"] for r in rows if r["kind"] == "usage"] == ["-0.33"] * 3
    assert [r["reason"] for r in rows if r["kind"] == "grant"] == ["'@grant"]
    assert len(download(client, members[Role.FINANCE], "ledger", status="usage")[1]) == 3
    now = datetime.now(UTC)
    assert len(download(client, members[Role.FINANCE], "ledger", period=f"{now:%Y-%m}")[1]) == 4
    assert download(client, members[Role.FINANCE], "ledger", period="2025-01")[1] == []


def test_currency_decimals_come_from_the_currency(client, db):
    from tests.factories import MembershipFactory, OrganizationFactory

    yen = OrganizationFactory(name="Yen Co", slug="yen", currency="JPY")
    finance = MembershipFactory(organization=yen, role=Role.FINANCE)
    ledger_entry_create(organization_id=yen.pk, kind=LedgerKind.GRANT, amount=1_500_000,
                        reference="g", reason="x")  # fmt: skip
    _, rows = download(client, finance, "ledger")
    assert rows[0]["amount"] == "2" and rows[0]["currency"] == "JPY"  # half away from zero
    assert rows[0]["amount_exact"] == "1.500000"


def test_keyset_chunks_visit_every_row_once(org):
    same_time = datetime(2025, 5, 1, tzinfo=UTC)
    LedgerEntry.objects.bulk_create(
        [
            LedgerEntry(
                organization=org,
                kind="usage",
                amount=-i - 1,
                currency="USD",
                reference=f"k{i}",
                created_at=same_time,
            )
            for i in range(7)
        ]
    )
    qs = LedgerEntry.objects.filter(organization=org)
    ids = [e.pk for e in exports._keyset(qs, chunk_size=2)]
    assert len(ids) == len(set(ids)) == 7
    assert ids == sorted(ids, reverse=True)


def test_an_organization_name_that_looks_like_a_formula(client, members, org, finalized):
    org.name = '=HYPERLINK("http://x")'
    org.save(update_fields=["name"])
    _, rows = download(client, members[Role.OWNER], "invoices")
    assert rows[0]["organization"] == '\'=HYPERLINK("http://x")'


def test_drafts_export_too(client, members, org, month_calls):
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    _, rows = download(client, members[Role.ADMIN], "invoices", status="draft")
    assert [(r["number"], r["status"], r["total"]) for r in rows] == [
        ("", "draft", str(micro_to_currency(draft.total, "USD")))
    ]
