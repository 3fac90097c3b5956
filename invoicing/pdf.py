"""The invoice and credit-note PDFs (see ``invoicing.pdfgen`` for the writer)."""

from __future__ import annotations

from django.conf import settings

from console.money import format_amount
from invoicing.models import CreditNote, Invoice, LineKind
from invoicing.money import minor_to_decimal
from invoicing.pdfgen import PAGE_H, Document, Page

LEFT, RIGHT = 50, 545


def _money(micro: int, currency: str) -> str:
    return format_amount(micro, currency)


def _minor(minor: int, currency: str) -> str:
    return f"{minor_to_decimal(minor, currency):,} {currency}"


def _parties(page: Page, title: str, subtitle: list[str], buyer: dict) -> float:
    seller = settings.INVOICING_SELLER
    page.text(LEFT, PAGE_H - 60, title, size=18, bold=True)
    y = PAGE_H - 80
    for s in subtitle:
        page.text(LEFT, y, s)
        y -= 12
    y_top = PAGE_H - 130
    page.text(LEFT, y_top, "From", bold=True)
    page.text(320, y_top, "Bill to", bold=True)
    left = [seller["name"], *seller["address"].splitlines()]
    if seller["tax_id"]:
        left.append(f"Tax id: {seller['tax_id']}")
    right = [
        buyer.get("legal_name") or buyer.get("name", ""),
        *buyer.get("address", "").splitlines(),
    ]
    if buyer.get("tax_id"):
        right.append(f"Tax id: {buyer['tax_id']}")
    if buyer.get("email"):
        right.append(buyer["email"])
    for i in range(max(len(left), len(right))):
        yy = y_top - 13 * (i + 1)
        if i < len(left):
            page.text(LEFT, yy, left[i])
        if i < len(right):
            page.text(320, yy, right[i])
    return y_top - 13 * (max(len(left), len(right)) + 2)


def invoice_pdf(invoice: Invoice) -> bytes:
    cur = invoice.currency
    doc = Document(title=invoice.number or "Draft invoice")
    page = doc.new_page()
    buyer = invoice.buyer or {"name": invoice.organization.name}
    sub = [
        f"Invoice number: {invoice.number or 'DRAFT'}",
        f"Period: {invoice.period} (calendar month, {invoice.organization.timezone})",
        f"Issued: {invoice.issued_at:%Y-%m-%d}" if invoice.issued_at else "Not issued",
        f"Due: {invoice.due_at:%Y-%m-%d}" if invoice.due_at else "",
        f"Status: {invoice.get_status_display()}",
    ]
    y = _parties(page, "Invoice", [s for s in sub if s], buyer)
    header = ("Description", "Quantity", "Unit / Mtok", "Amount")
    cols = (LEFT, 370, 450, RIGHT)

    def head(p: Page, yy: float) -> float:
        p.text(cols[0], yy, header[0], bold=True)
        p.text_right(cols[1], yy, header[1], bold=True)
        p.text_right(cols[2], yy, header[2], bold=True)
        p.text_right(cols[3], yy, header[3], bold=True)
        p.rule(LEFT, yy - 4, RIGHT)
        return yy - 16

    y = head(page, y)
    for line in invoice.lines.all():
        if y < 140:
            page = doc.new_page()
            y = head(page, PAGE_H - 60)
        page.text(cols[0], y, line.description[:60])
        if line.kind in (LineKind.USAGE, LineKind.ADJUSTMENT) and line.quantity:
            page.text_right(cols[1], y, f"{line.quantity:,}")
        if line.unit_price_per_mtok is not None:
            page.text_right(cols[2], y, format_amount(line.unit_price_per_mtok, cur, places=4))
        page.text_right(cols[3], y, _money(line.amount, cur))
        y -= 13
    page.rule(320, y, RIGHT)
    y -= 16
    totals = [
        ("Subtotal", _money(invoice.subtotal, cur)),
        ("Discount", _money(-invoice.discount_amount, cur)),
        ("Tax", _money(invoice.tax_amount, cur)),
        ("Total", _money(invoice.total, cur)),
        ("Credits applied", _money(-invoice.credits_applied, cur)),
        ("Credit notes", _minor(-invoice.credited_minor, cur)),
        ("Paid", _minor(invoice.paid_minor, cur)),
        ("Amount due", _minor(invoice.amount_due_minor, cur)),
    ]
    for label, value in totals:
        bold = label in ("Total", "Amount due")
        page.text(320, y, label, bold=bold)
        page.text_right(RIGHT, y, value, bold=bold)
        y -= 13
    page.text(
        LEFT, 60, f"Amounts in {cur}. Usage lines equal the sum of the period's call costs.", size=7
    )
    return doc.render()


def credit_note_pdf(note: CreditNote) -> bytes:
    cur = note.currency
    invoice = note.invoice
    doc = Document(title=note.number)
    page = doc.new_page()
    y = _parties(
        page,
        "Credit note",
        [
            f"Credit note number: {note.number}",
            f"For invoice {invoice.number} ({invoice.period})",
            f"Issued: {note.created_at:%Y-%m-%d}",
            f"Effect: {note.get_effect_display()}",
        ],
        invoice.buyer or {"name": invoice.organization.name},
    )
    page.text(LEFT, y, "Description", bold=True)
    page.text_right(RIGHT, y, "Amount", bold=True)
    page.rule(LEFT, y - 4, RIGHT)
    y -= 16
    for line in note.lines.all():
        if y < 120:
            page = doc.new_page()
            y = PAGE_H - 60
        page.text(LEFT, y, line.description[:80])
        page.text_right(RIGHT, y, _money(line.amount, cur))
        y -= 13
    y -= 6
    page.text(LEFT, y, f"Reason: {note.reason[:90]}")
    y -= 16
    page.text(320, y, "Credited", bold=True)
    page.text_right(RIGHT, y, _minor(note.amount_minor, cur), bold=True)
    return doc.render()
