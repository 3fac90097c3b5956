"""The invoice PDF: seller and buyer, number and dates, usage lines grouped
by model (one row per token class: quantity, unit price per million tokens,
amount), re-rating adjustments, discount, tax by rate, credits, credit
notes, payments, the amount due and how to pay it."""

from __future__ import annotations

from itertools import groupby

from django.conf import settings

from console.money import format_exact
from invoicing.models import Invoice, InvoiceStatus, LineKind, TokenClass
from invoicing.pdf.document import CONTENT_W, MUTED, SHADE, Column, Document, Table
from invoicing.pdf.parts import (
    EFFECT_WORDING,
    buyer_name,
    buyer_of,
    deduction,
    heading,
    local_date,
    minor,
    money,
    parties,
    rate,
    section,
    totals,
)

STATUS_TEXT = {
    InvoiceStatus.DRAFT: "DRAFT · not issued, not payable",
    InvoiceStatus.FINALIZED: "Status: Issued",
    InvoiceStatus.PAID: "Status: Paid",
    InvoiceStatus.VOID: "Status: Void",
    InvoiceStatus.UNCOLLECTIBLE: "Status: Closed",
}


def _columns() -> list[Column]:
    return [
        Column("Description", CONTENT_W - 100),
        Column("Quantity (tokens)", 30, "R"),
        Column("Unit price per 1M tokens", 36, "R"),
        Column("Amount", 34, "R"),
    ]


def _lines(doc: Document, invoice: Invoice, lines) -> None:
    cur = invoice.currency
    table = Table(doc, _columns())
    table.start()
    usage = [ln for ln in lines if ln.kind == LineKind.USAGE]
    adjustments = [ln for ln in lines if ln.kind == LineKind.ADJUSTMENT]
    if not usage and not adjustments:
        table.row(["No usage in this period.", "", "", ""], rule=False)
    for model, group in groupby(usage, key=lambda ln: ln.model or ln.description):
        rows = list(group)
        table.row([model, ""], bold=True, span=True, fill=SHADE, keep_with_next=8)
        for n, line in enumerate(rows, start=1):
            label = (
                f"{TokenClass(line.token_class).label} tokens"
                if line.token_class
                else line.description
            )
            table.row(
                [
                    label,
                    f"{line.quantity:,}" if line.quantity else "",
                    money_price(line.unit_price_per_mtok, cur),
                    money(line.amount, cur),
                ],
                # The group's last row stays on the page of its total.
                keep_with_next=7 if n == len(rows) > 1 else 0,
            )
        if len(rows) > 1:
            table.row(
                [f"{model} total", money(sum(ln.amount for ln in rows), cur)],
                bold=True,
                span=True,
            )
    if adjustments:
        table.row(["Adjustments", ""], bold=True, span=True, fill=SHADE, keep_with_next=8)
        for line in adjustments:
            table.row([line.description, f"{line.quantity:,} calls", "", money(line.amount, cur)])


def money_price(unit: int | None, currency: str) -> str:
    """A price per million tokens, with the decimals it needs (at least the currency's)."""
    return "" if unit is None else format_exact(unit, currency)


def _totals(doc: Document, invoice: Invoice) -> None:
    cur = invoice.currency
    rows: list[tuple[str, str, bool]] = [
        (f"Subtotal ({invoice.calls:,} calls)", money(invoice.subtotal, cur), False)
    ]
    if invoice.discount_amount:
        label = f"Discount {rate(invoice.discount_ppm)}" if invoice.discount_ppm else "Discount"
        rows.append((label, deduction(money(invoice.discount_amount, cur)), False))
    if invoice.tax_rate_ppm or invoice.tax_amount:
        base = money(invoice.subtotal - invoice.discount_amount, cur)
        rows.append(
            (f"Tax {rate(invoice.tax_rate_ppm)} of {base}", money(invoice.tax_amount, cur), False)
        )
    rows.append(("Total", money(invoice.total, cur), True))
    if invoice.credits_applied:
        credits = deduction(money(invoice.credits_applied, cur))
        rows.append(("Paid from your prepaid balance", credits, False))
    if invoice.credited_minor:
        rows.append(("Credit notes", deduction(minor(invoice.credited_minor, cur)), False))
    if invoice.paid_minor:
        rows.append(("Payments received", deduction(minor(invoice.paid_minor, cur)), False))
    rows.append(("Amount due", minor(invoice.amount_due_minor, cur), True))
    doc.set_y(doc.get_y() + 4)
    totals(doc, rows)


def _credit_notes(doc: Document, invoice: Invoice, notes) -> None:
    if not notes:
        return
    doc.set_y(doc.get_y() + 6)
    table = Table(
        doc,
        [
            Column("Credit note", 42),
            Column("Date", 22),
            Column("Effect", CONTENT_W - 42 - 22 - 34),
            Column("Credited", 34, "R"),
        ],
    )
    table.start()
    for note in notes:
        table.row(
            [
                note.number,
                local_date(note.created_at, invoice.organization.timezone),
                EFFECT_WORDING.get(note.effect, ""),
                minor(note.amount_minor, invoice.currency),
            ]
        )


def _payment(invoice: Invoice) -> list[str]:
    cur, due = invoice.currency, invoice.amount_due_minor
    if invoice.status == InvoiceStatus.DRAFT:
        return [
            "This is a draft for review, not a request for payment. The issued invoice "
            "will carry a number and a due date."
        ]
    if invoice.status == InvoiceStatus.VOID:
        return ["This invoice has been voided: nothing is due."]
    if due <= 0:
        return ["Nothing is due on this invoice. Thank you."]
    tz_name = invoice.organization.timezone
    text = [
        f"Please pay {minor(due, cur)} by {local_date(invoice.due_at, tz_name)}, "
        f"quoting the invoice number {invoice.number}."
    ]
    if settings.INVOICING_PAYMENT_INSTRUCTIONS:
        text += settings.INVOICING_PAYMENT_INSTRUCTIONS.splitlines()
    return text


def invoice_pdf(invoice: Invoice) -> bytes:
    cur = invoice.currency
    tz_name = invoice.organization.timezone
    buyer = buyer_of(invoice)
    draft = invoice.status == InvoiceStatus.DRAFT
    reference = invoice.number or f"draft {invoice.period}"
    doc = Document(title="Invoice", reference=reference, owner=buyer_name(buyer), draft=draft)
    y = heading(
        doc,
        title="Draft invoice" if draft else "Invoice",
        status=STATUS_TEXT.get(invoice.status, invoice.get_status_display()),
        alert=draft,
        pairs=[
            ("Invoice number", invoice.number or "Assigned when issued"),
            ("Issue date", local_date(invoice.issued_at, tz_name) or "Not issued"),
            ("Due date", local_date(invoice.due_at, tz_name)),
            ("Period", f"{invoice.period} (calendar month, {tz_name})"),
            ("Currency", cur),
        ],
    )
    y = parties(doc, y, buyer=buyer, buyer_label="Bill to")
    doc.set_y(y)
    lines = list(invoice.lines.order_by("position"))
    _lines(doc, invoice, lines)
    _totals(doc, invoice)
    notes = list(invoice.credit_notes.order_by("created_at", "id")) if invoice.pk else []
    _credit_notes(doc, invoice, notes)
    section(doc, "Payment", _payment(invoice))
    note = f"Amounts in {cur}. Usage lines equal the sum of the period's call costs."
    doc.set_y(doc.get_y() + 3)
    doc.ensure(6)
    doc.block(doc.l_margin, doc.get_y(), CONTENT_W, note, size=7.5, color=MUTED)
    return doc.finish()
