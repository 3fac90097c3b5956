"""The credit-note PDF: seller and buyer, the invoice it credits, each
credited line (wrapped, never cut), what was credited and where the money
went, in the customer's words, and the reason."""

from __future__ import annotations

from invoicing.models import CreditNote, CreditNoteEffect
from invoicing.pdf.document import CONTENT_W, MUTED, Column, Document, Table
from invoicing.pdf.parts import (
    EFFECT_WORDING,
    buyer_name,
    buyer_of,
    heading,
    local_date,
    minor,
    money,
    parties,
    section,
    totals,
)


def credit_note_pdf(note: CreditNote) -> bytes:
    invoice = note.invoice
    cur = note.currency
    tz_name = invoice.organization.timezone
    buyer = buyer_of(invoice)
    doc = Document(title="Credit note", reference=note.number, owner=buyer_name(buyer))
    y = heading(
        doc,
        title="Credit note",
        status=f"Credits invoice {invoice.number}",
        alert=False,
        pairs=[
            ("Credit note number", note.number),
            ("Issue date", local_date(note.created_at, tz_name)),
            ("Invoice", invoice.number or ""),
            ("Invoice date", local_date(invoice.issued_at, tz_name)),
            ("Period", f"{invoice.period} (calendar month, {tz_name})"),
            ("Currency", cur),
        ],
    )
    y = parties(doc, y, buyer=buyer, buyer_label="Credit to")
    doc.set_y(y)
    table = Table(doc, [Column("Description", CONTENT_W - 40), Column("Amount", 40, "R")])
    table.start()
    for line in note.lines.order_by("id"):
        table.row([line.description, money(line.amount, cur)])
    rows = [("Total credited", minor(note.amount_minor, cur), True)]
    if note.due_reduction_minor:
        rows.append(
            (
                f"{EFFECT_WORDING[CreditNoteEffect.REDUCE_DUE]} on invoice {invoice.number}",
                minor(note.due_reduction_minor, cur),
                False,
            )
        )
    if note.refund_minor:
        wording = EFFECT_WORDING.get(note.effect, "Refunded")
        rows.append((wording, minor(note.refund_minor, cur), False))
    doc.set_y(doc.get_y() + 4)
    totals(doc, rows)
    section(doc, "Reason", [note.reason])
    doc.set_y(doc.get_y() + 3)
    doc.ensure(6)
    doc.block(doc.l_margin, doc.get_y(), CONTENT_W, f"Amounts in {cur}.", size=7.5, color=MUTED)
    return doc.finish()
