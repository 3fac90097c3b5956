"""The finance console in real headless Chromium (Playwright driving
/usr/bin/chromium): finance logs in, opens the draft from the Billing nav,
finalizes it through the confirmation, downloads its PDF and the invoices
CSV, and issues a partial credit note (a bad amount first, shown on the form)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from invoicing.models import CreditNote, Invoice, InvoiceStatus
from tests.services import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_finance_finalizes_downloads_and_credits(live_server, finance, draft, browser_page):
    page, errors = browser_page
    ARTIFACTS.mkdir(exist_ok=True)
    base = live_server.url

    # Log in as finance; the Billing entry is in the nav.
    sign_in(page, base, finance.user)
    page.click("nav.sidebar >> text=Billing")
    page.wait_for_selector("h1:has-text('Invoices')")
    assert page.locator("#preview").is_visible()

    # Open the draft and finalize it, accepting the confirmation.
    page.click(f"tr[data-invoice='{draft.pk}'] a")
    page.wait_for_selector("#invoice-title:has-text('Draft invoice')")
    assert page.locator("#invoice-lines tr[data-line]").count() > 0
    messages = []
    page.once("dialog", lambda d: (messages.append(d.message), d.accept()))
    page.click("#finalize")
    page.wait_for_selector("#invoice-status:has-text('Finalized')")
    assert messages and "Finalize this invoice?" in messages[0]
    invoice = Invoice.objects.get(pk=draft.pk)
    assert invoice.status == InvoiceStatus.FINALIZED and invoice.number
    assert f"Invoice {invoice.number} finalized." in page.inner_text(".messages")
    page.screenshot(path=str(ARTIFACTS / "invoice-finalized.png"), full_page=True)

    # Download its PDF.
    with page.expect_download() as info:
        page.click("#pdf-link")
    pdf = Path(info.value.path()).read_bytes()
    assert info.value.suggested_filename == f"{invoice.number}.pdf"
    assert pdf.startswith(b"%PDF") and pdf == bytes(invoice.pdf)

    # Download the invoices CSV from the list, filtered to the month.
    page.goto(f"{base}/billing/invoices/?period=2025-03")
    with page.expect_download() as info:
        page.click("#export-invoices")
    text = Path(info.value.path()).read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["number"], r["status"], r["period"]) for r in rows] == [
        (invoice.number, "finalized", "2025-03")
    ]

    # Issue a partial credit note: too much first (an error on the form), then 0.50.
    page.goto(f"{base}/billing/invoices/{invoice.pk}/")
    page.click("#credit-note-link")
    page.wait_for_selector("#credit-note-form")
    page.check("#credit-note-form input[name=mode][value=amount]")
    page.fill("#credit-note-form #id_amount", "100000")
    page.fill("#credit-note-form #id_reason", "Slow responses on 14 March")
    page.click("#credit-note-form button[type=submit]")
    page.wait_for_selector("#field-amount .field-error")
    assert "left to credit" in page.inner_text("#field-amount .field-error")
    assert not CreditNote.objects.exists()
    page.fill("#credit-note-form #id_amount", "0.50")
    page.click("#credit-note-form button[type=submit]")
    # A preview first: what the note does, nothing issued until it is confirmed.
    page.wait_for_selector("#credit-note-confirm")
    assert "Reduces the amount due" in page.inner_text("#preview-effect")
    assert not CreditNote.objects.exists()
    page.click("#confirm-credit-note")
    page.wait_for_selector("#credit-notes")
    note = CreditNote.objects.get()
    assert note.amount_minor == 50 and note.reason == "Slow responses on 14 March"
    assert note.number in page.inner_text("#credit-notes")
    invoice.refresh_from_db()
    assert invoice.amount_due_minor == invoice.amount_due_initial_minor - 50
    page.screenshot(path=str(ARTIFACTS / "invoice-credited.png"), full_page=True)
    assert errors == []
