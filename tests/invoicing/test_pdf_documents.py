"""The invoice and credit-note PDFs as a customer receives them: their names
in any script, every amount exactly as the console formats it, header blocks
that do not overlap on the rendered page, wrapped (never cut) text, page
numbers and repeated table headers on long invoices, customer wording, a
DRAFT mark, embedded subset fonts, and a PDF even without a Unicode font.

Text and character boxes come from PDFium (pypdfium2), the renderer Chrome
uses, so what is checked is what a reader shows."""

from __future__ import annotations

import io
import logging
import re
from datetime import UTC, datetime

import pypdfium2 as pdfium
import pytest
from django.urls import reverse
from PIL import Image

from accounts.models import Role
from console.kernel.money import format_amount
from invoicing.models import BillingProfile, CreditNoteEffect
from invoicing.pdf import credit_note_pdf, fonts, invoice_pdf
from invoicing.pdf.parts import MINUS, local_date
from invoicing.services import (
    credit_note_create,
    credit_note_for_incident,
    invoice_draft,
    invoice_finalize,
)
from tests.invoicing.pdf_text import SELLER, assert_apart, flat, header_blocks, minor, pages
from tests.usage.factories import event
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db

BUYERS = ["株式会社テスト", "ООО «Ромашка»", "Łódź Sp. z o.o.", "Ελληνική ΑΕ"]  # noqa: RUF001


def profile(org, legal_name: str) -> BillingProfile:
    return BillingProfile.objects.update_or_create(
        organization=org,
        defaults={
            "legal_name": legal_name,
            "address": "上海市浦东新区世纪大道100号\nSuite 1",
            "tax_id": "91310000MA1FL4XQ3K",  # a Chinese unified social credit code
            "billing_email": "ap@buyer.example",
            "tax_rate_ppm": 75_000,
            "invoice_discount_ppm": 50_000,
        },
    )[0]


@pytest.fixture
def finalized(org, month_calls, seller):
    def make(legal_name: str):
        profile(org, legal_name)
        draft = invoice_draft(organization_id=org.pk, period="2025-03")
        return invoice_finalize(invoice_id=draft.pk)

    return make


# --- names and amounts in every script ---------------------------------------------------


@pytest.mark.parametrize("name", BUYERS)
def test_invoice_and_credit_note_print_the_buyer_and_every_amount(
    name, finalized, members, actor_for
):
    invoice = finalized(name)
    cur = invoice.currency
    assert invoice.tax_amount > 0 and invoice.discount_amount > 0

    text = flat("\n".join(pages(invoice_pdf(invoice))))
    assert name in text
    assert "???" not in text
    for amount in (
        format_amount(invoice.subtotal, cur),
        format_amount(invoice.discount_amount, cur),
        format_amount(invoice.tax_amount, cur),
        format_amount(invoice.total, cur),
        minor(invoice.amount_due_minor, cur),
    ):
        assert amount in text
    assert "Tax 7.5 %" in text and "Discount 5 %" in text and "ppm" not in text
    assert "91310000MA1FL4XQ3K" in text and "上海市浦东新区世纪大道100号" in text
    assert "Tax ID: DE123456789" in text and "billing@example.com" in text
    assert "IBAN DE02 1001 0010 0123 4567 89" in text
    assert f"Please pay {minor(invoice.amount_due_minor, cur)}" in text

    note = credit_note_create(
        invoice_id=invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        amount=1_234_567,
        reason="Latency above the agreed level",
    )
    note_text = flat("\n".join(pages(credit_note_pdf(note))))
    assert name in note_text
    assert minor(note.amount_minor, cur) in note_text
    assert invoice.number in note_text and note.number in note_text
    assert "Reduces the amount due" in note_text

    # The invoice rendered again now lists the credit note and the new amount due.
    invoice.refresh_from_db()
    again = flat("\n".join(pages(invoice_pdf(invoice))))
    assert note.number in again
    assert minor(invoice.credited_minor, cur) in again
    assert minor(invoice.amount_due_minor, cur) in again


# --- the header blocks on the rendered page ----------------------------------------------


def test_header_blocks_do_not_overlap_on_the_rendered_first_page(finalized):
    invoice = finalized("株式会社テスト")
    doc = pdfium.PdfDocument(invoice_pdf(invoice))
    page = doc[0]
    textpage = page.get_textpage()
    issued = local_date(invoice.issued_at, "Europe/Berlin")
    blocks = header_blocks(
        textpage,
        title="Invoice",
        status="Status: Issued",
        number_and_dates=[
            "Invoice number",
            invoice.number,
            "Issue date",
            issued,
            "Due date",
            "2025-03 (calendar month, Europe/Berlin)",
        ],
        seller=[SELLER["name"], "Friedrichstraße 1", "Germany", "Tax ID: DE123456789"],
        buyer=["株式会社テスト", "Suite 1", "Tax ID: 91310000MA1FL4XQ3K", "ap@buyer.example"],
    )
    # Apart; the title is above the parties; seller left of buyer.
    assert_apart(blocks)

    # Rendered to PNG, every block has ink where its text is.
    scale = 2
    png = io.BytesIO()
    page.render(scale=scale).to_pil().save(png, format="PNG")
    image = Image.open(io.BytesIO(png.getvalue())).convert("L")
    height = page.get_height()
    for name, (left, bottom, right, top) in blocks.items():
        crop = image.crop(
            (
                int(left * scale),
                int((height - top) * scale),
                int(right * scale) + 1,
                int((height - bottom) * scale) + 1,
            )
        )
        assert crop.getextrema()[0] < 128, f"nothing drawn for the {name} block"


# --- long documents ----------------------------------------------------------------------


def test_a_long_invoice_numbers_its_pages_and_repeats_the_table_header(
    org, month_calls, seller, add_model_lines
):
    profile(org, "ООО «Ромашка»")  # noqa: RUF001
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    short = pages(invoice_pdf(draft))
    assert len(short) == 1 and "Page 1 of" not in short[0]
    # Given 80 more usage lines (as many models as a busy month can bring) ...
    add_model_lines(draft)
    # ... the PDF runs over pages, each says which of how many it is, and
    # each page the table runs onto starts with its header row again.
    texts = pages(invoice_pdf(draft))
    assert len(texts) >= 3
    for number, text in enumerate(texts, start=1):
        assert f"Page {number} of {len(texts)}" in text
    for text in texts[1:-1]:
        assert "Quantity (tokens)" in text and "(continued)" in text
    every = flat("\n".join(texts))
    for i in range(80):
        assert f"model-{i:03d}" in every
    assert "1,000,079" in every


def test_a_credit_notes_long_texts_are_printed_whole_and_wrapped(
    org, key, catalog, seller, members, actor_for
):
    t = datetime(2025, 6, 10, 12, tzinfo=UTC)
    ingest_events(
        [
            event(key, started_at=t, node_id=7, status_code=502, input_tokens=900_000)
            for _ in range(3)
        ]
    )
    profile(org, "Łódź Sp. z o.o.")
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-06").pk
    )
    reason = "Node 7 returned errors for two hours during the incident of 10 June; " * 3
    note = credit_note_for_incident(
        invoice_id=invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        node_id=7,
        reason=reason.strip(),
        start=datetime(2025, 6, 10, 11, tzinfo=UTC),
        end=datetime(2026, 1, 10, 13, tzinfo=UTC),
    )
    description = note.lines.order_by("id").first().description
    assert description.endswith("to 2026-01-10 13:00 UTC")
    text = pages(credit_note_pdf(note))[0]
    assert flat(description) in flat(text)
    assert flat(reason) in flat(text)
    # The reason runs over several printed lines: wrapped at spaces, nothing dropped.
    assert not any(reason.strip() in line for line in text.splitlines())


# --- wording and marks -------------------------------------------------------------------


def test_a_manual_refund_reads_as_a_customer_would_expect(
    org, month_calls, seller, members, actor_for
):
    from invoicing.services import invoice_mark_paid

    profile(org, "Acme Ltd")
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    finance = actor_for(members[Role.FINANCE])
    invoice_mark_paid(invoice_id=invoice.pk, actor=finance, reference="bank-1")
    note = credit_note_create(invoice_id=invoice.pk, actor=finance, amount=2_000_000, reason="SLA")
    assert note.effect == CreditNoteEffect.REFUND_MANUAL
    text = flat(pages(credit_note_pdf(note))[0])
    assert "Refunded to you by bank transfer" in text
    assert "by hand" not in text
    assert minor(note.refund_minor, note.currency) in text


def test_a_draft_is_marked_draft_and_asks_for_no_payment(org, month_calls, seller):
    profile(org, "Acme Ltd")
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    text = flat(pages(invoice_pdf(draft))[0])
    assert "Draft invoice" in text and "DRAFT" in text
    assert "not a request for payment" in text and "Please pay" not in text
    final = invoice_finalize(invoice_id=draft.pk)
    assert "DRAFT" not in flat(pages(invoice_pdf(final))[0])


# --- fonts -------------------------------------------------------------------------------


def test_the_pdf_embeds_subset_fonts_and_stays_small(finalized):
    invoice = finalized("株式会社テスト")
    pdf = bytes(invoice.pdf)
    assert pdf.startswith(b"%PDF") and len(pdf) < 300_000
    # Subset fonts are named with a six-letter tag (PDF 32000-1, 9.6.4); both are embedded.
    subsets = re.findall(rb"/BaseFont\s*/([A-Z]{6})\+([\w-]+)", pdf)
    assert len(subsets) >= 2, subsets
    assert re.search(rb"/FontFile[23]?\b", pdf)


def test_without_a_unicode_font_the_pdf_still_renders_and_says_why(
    finalized, settings, monkeypatch, caplog, client, members
):
    invoice = finalized("Acme Ltd")
    monkeypatch.setattr(fonts, "MAIN_CANDIDATES", ())
    monkeypatch.setattr(fonts, "CJK_CANDIDATES", ())
    settings.INVOICING_PDF_FONT = "/nonexistent/font.ttf"
    fonts._resolve.cache_clear()
    with caplog.at_level(logging.WARNING, logger="invoicing.pdf.fonts"):
        pdf = invoice_pdf(invoice)
    assert "No Unicode font" in caplog.text and "/nonexistent/font.ttf" in caplog.text
    text = flat(pages(pdf)[0])
    assert "Acme Ltd" in text and format_amount(invoice.total, invoice.currency) in text
    # A draft's PDF is made on request: still a PDF, never a 500.
    draft = invoice_draft(organization_id=invoice.organization_id, period="2025-04")
    client.force_login(members[Role.FINANCE].user)
    response = client.get(reverse("invoicing:invoice_pdf", args=[draft.pk]))
    assert response.status_code == 200 and response.content.startswith(b"%PDF")
    fonts._resolve.cache_clear()


def test_a_prepaid_invoice_shows_the_balance_it_was_paid_from(
    prepaid, month_calls, seller, members, actor_for
):
    profile(prepaid, "Ελληνική ΑΕ")  # noqa: RUF001
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=prepaid.pk, period="2025-03").pk
    )
    cur = invoice.currency
    assert invoice.credits_applied > 0
    text = flat(pages(bytes(invoice.pdf))[0])
    assert (
        f"Paid from your prepaid balance {MINUS}{format_amount(invoice.credits_applied, cur)}"
        in text
    )
    assert f"Amount due {minor(invoice.amount_due_minor, cur)}" in text
    note = credit_note_create(
        invoice_id=invoice.pk, actor=actor_for(members[Role.FINANCE]), full=True, reason="Goodwill"
    )
    assert note.refund_minor > 0
    note_text = flat(pages(credit_note_pdf(note))[0])
    assert f"Credited to your prepaid balance {minor(note.refund_minor, cur)}" in note_text
