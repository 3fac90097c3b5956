"""The credit-note PDF: seller and buyer, the invoice it credits, each
credited line (wrapped, never cut), what was credited and where the money
went, in the customer's words, and the reason; in the document language of
the invoice it credits (``invoicing.pdf.language``)."""

from __future__ import annotations

from django.utils import translation
from django.utils.translation import pgettext

from console.kernel.money import format_amount
from invoicing.models import CreditNote, CreditNoteEffect
from invoicing.pdf.document import CONTENT_W, MUTED, Column, Document, Table
from invoicing.pdf.language import document_language, pdf_lang
from invoicing.pdf.parts import (
    buyer_name,
    buyer_of,
    effect_wording,
    heading,
    local_date,
    parties,
    period_text,
    section,
    totals,
)


def credit_note_pdf(note: CreditNote) -> bytes:
    """The credit note as a PDF, in the language of the invoice it credits."""
    buyer = buyer_of(note.invoice)
    language = document_language(buyer)
    with translation.override(language):
        return _render(note, buyer, language)


def _render(note: CreditNote, buyer: dict, language: str) -> bytes:
    invoice = note.invoice
    cur = note.currency
    tz_name = invoice.organization.timezone
    title = pgettext("invoice PDF", "Credit note")
    doc = Document(
        title=title, reference=note.number, owner=buyer_name(buyer), lang=pdf_lang(language)
    )
    y = heading(
        doc,
        title=title,
        status=pgettext("invoice PDF", "Credits invoice %(number)s") % {"number": invoice.number},
        alert=False,
        pairs=[
            (pgettext("invoice PDF", "Credit note number"), note.number),
            (pgettext("invoice PDF", "Issue date"), local_date(note.created_at, tz_name)),
            (pgettext("invoice PDF", "Invoice"), invoice.number or ""),
            (pgettext("invoice PDF", "Invoice date"), local_date(invoice.issued_at, tz_name)),
            (pgettext("invoice PDF", "Period"), period_text(invoice.period, tz_name)),
            (pgettext("invoice PDF", "Currency"), cur),
        ],
    )
    y = parties(doc, y, buyer=buyer, buyer_label=pgettext("invoice PDF", "Credit to"))
    doc.set_y(y)
    table = Table(
        doc,
        [
            Column(pgettext("invoice PDF", "Description"), CONTENT_W - 40),
            Column(pgettext("invoice PDF", "Amount"), 40, "R"),
        ],
    )
    table.start()
    for line in note.lines.order_by("id"):
        table.row([line.description, format_amount(line.amount, cur)])
    doc.set_y(doc.get_y() + 4)
    totals(doc, _total_rows(note))
    section(doc, pgettext("invoice PDF", "Reason"), [note.reason])
    doc.set_y(doc.get_y() + 3)
    doc.ensure(6)
    note_text = pgettext("invoice PDF", "Amounts in %(currency)s.") % {"currency": cur}
    doc.block(doc.l_margin, doc.get_y(), CONTENT_W, note_text, size=7.5, color=MUTED)
    return doc.finish()


def _total_rows(note: CreditNote) -> list[tuple[str, str, bool]]:
    """The note's totals: what it credits, then how (less due on the
    invoice, refunded)."""
    cur = note.currency
    rows = [
        (
            pgettext("invoice PDF", "Total credited"),
            format_amount(note.amount_minor, cur, unit="minor"),
            True,
        )
    ]
    if note.due_reduction_minor:
        rows.append(
            (
                pgettext("invoice PDF", "%(effect)s on invoice %(number)s")
                % {
                    "effect": effect_wording(CreditNoteEffect.REDUCE_DUE),
                    "number": note.invoice.number,
                },
                format_amount(note.due_reduction_minor, cur, unit="minor"),
                False,
            )
        )
    if note.refund_minor:
        wording = effect_wording(note.effect, pgettext("invoice PDF", "Refunded"))
        rows.append((wording, format_amount(note.refund_minor, cur, unit="minor"), False))
    return rows
