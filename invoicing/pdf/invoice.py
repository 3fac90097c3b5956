"""The invoice PDF: seller and buyer, number and dates, usage lines grouped
by model (one row per token class: quantity, unit price per million tokens,
amount), re-rating adjustments, discount, tax by rate, credits, credit
notes, payments, the amount due and how to pay it; in the buyer's document
language (``invoicing.pdf.language``)."""

from __future__ import annotations

from itertools import groupby

from babel.numbers import format_decimal
from django.conf import settings
from django.utils import translation
from django.utils.translation import pgettext, pgettext_lazy

from console.kernel.money import current_locale, format_amount, format_rate
from invoicing.models import Invoice, InvoiceStatus, LineKind, TokenClass
from invoicing.pdf.document import CONTENT_W, MUTED, SHADE, Column, Document, Table
from invoicing.pdf.language import document_language, pdf_lang
from invoicing.pdf.parts import (
    buyer_name,
    buyer_of,
    deduction,
    effect_wording,
    heading,
    local_date,
    parties,
    period_text,
    section,
    totals,
)

STATUS_TEXT = {
    InvoiceStatus.DRAFT: pgettext_lazy("invoice PDF", "DRAFT · not issued, not payable"),
    InvoiceStatus.FINALIZED: pgettext_lazy("invoice PDF", "Status: Issued"),
    InvoiceStatus.PAID: pgettext_lazy("invoice PDF", "Status: Paid"),
    InvoiceStatus.VOID: pgettext_lazy("invoice PDF", "Status: Void"),
    InvoiceStatus.UNCOLLECTIBLE: pgettext_lazy("invoice PDF", "Status: Closed"),
}
# A usage line's label: its token class (the model is the group's heading).
TOKEN_WORDING = {
    TokenClass.INPUT: pgettext_lazy("invoice PDF", "Input tokens"),
    TokenClass.CACHE_READ: pgettext_lazy("invoice PDF", "Cache read tokens"),
    TokenClass.CACHE_WRITE: pgettext_lazy("invoice PDF", "Cache write tokens"),
    TokenClass.OUTPUT: pgettext_lazy("invoice PDF", "Output tokens"),
}


def count(n: int) -> str:
    """A whole number with the document locale's digit grouping."""
    return format_decimal(n, locale=current_locale().replace("-", "_"))


def _columns() -> list[Column]:
    return [
        Column(pgettext("invoice PDF", "Description"), CONTENT_W - 100),
        Column(pgettext("invoice PDF", "Quantity (tokens)"), 30, "R"),
        Column(pgettext("invoice PDF", "Unit price per 1M tokens"), 36, "R"),
        Column(pgettext("invoice PDF", "Amount"), 34, "R"),
    ]


def _token_label(line) -> str:
    wording = TOKEN_WORDING.get(line.token_class)
    return str(wording) if wording is not None else line.description


def _lines(doc: Document, invoice: Invoice, lines) -> None:
    cur = invoice.currency
    table = Table(doc, _columns())
    table.start()
    usage = [ln for ln in lines if ln.kind == LineKind.USAGE]
    adjustments = [ln for ln in lines if ln.kind == LineKind.ADJUSTMENT]
    if not usage and not adjustments:
        table.row([pgettext("invoice PDF", "No usage in this period."), "", "", ""], rule=False)
    for model, group in groupby(usage, key=lambda ln: ln.model or ln.description):
        rows = list(group)
        table.row([model, ""], bold=True, span=True, fill=SHADE, keep_with_next=8)
        for n, line in enumerate(rows, start=1):
            table.row(
                [
                    _token_label(line) if line.token_class else line.description,
                    count(line.quantity) if line.quantity else "",
                    money_price(line.unit_price_per_mtok, cur),
                    format_amount(line.amount, cur),
                ],
                # The group's last row stays on the page of its total.
                keep_with_next=7 if n == len(rows) > 1 else 0,
            )
        if len(rows) > 1:
            table.row(
                [
                    pgettext("invoice PDF", "%(model)s total") % {"model": model},
                    format_amount(sum(ln.amount for ln in rows), cur),
                ],
                bold=True,
                span=True,
            )
    if adjustments:
        table.row(
            [pgettext("invoice PDF", "Adjustments"), ""],
            bold=True,
            span=True,
            fill=SHADE,
            keep_with_next=8,
        )
        for line in adjustments:
            calls = pgettext("invoice PDF", "%(count)s calls") % {"count": count(line.quantity)}
            table.row([line.description, calls, "", format_amount(line.amount, cur)])


def money_price(unit: int | None, currency: str) -> str:
    """A price per million tokens, with the decimals it needs (at least the currency's)."""
    return "" if unit is None else format_amount(unit, currency, exact=True)


def _totals(doc: Document, invoice: Invoice) -> None:
    cur = invoice.currency
    subtotal = pgettext("invoice PDF", "Subtotal (%(count)s calls)") % {
        "count": count(invoice.calls)
    }
    rows: list[tuple[str, str, bool]] = [(subtotal, format_amount(invoice.subtotal, cur), False)]
    if invoice.discount_amount:
        label = (
            pgettext("invoice PDF", "Discount %(rate)s")
            % {"rate": format_rate(invoice.discount_ppm)}
            if invoice.discount_ppm
            else pgettext("invoice PDF", "Discount")
        )
        rows.append((label, deduction(format_amount(invoice.discount_amount, cur)), False))
    if invoice.tax_rate_ppm or invoice.tax_amount:
        base = format_amount(invoice.subtotal - invoice.discount_amount, cur)
        label = pgettext("invoice PDF", "Tax %(rate)s of %(base)s") % {
            "rate": format_rate(invoice.tax_rate_ppm),
            "base": base,
        }
        rows.append((label, format_amount(invoice.tax_amount, cur), False))
    rows.append((pgettext("invoice PDF", "Total"), format_amount(invoice.total, cur), True))
    if invoice.credits_applied:
        credits = deduction(format_amount(invoice.credits_applied, cur))
        rows.append((pgettext("invoice PDF", "Paid from your prepaid balance"), credits, False))
    if invoice.credited_minor:
        rows.append(
            (
                pgettext("invoice PDF", "Credit notes"),
                deduction(format_amount(invoice.credited_minor, cur, unit="minor")),
                False,
            )
        )
    if invoice.paid_minor:
        rows.append(
            (
                pgettext("invoice PDF", "Payments received"),
                deduction(format_amount(invoice.paid_minor, cur, unit="minor")),
                False,
            )
        )
    rows.append(
        (
            pgettext("invoice PDF", "Amount due"),
            format_amount(invoice.amount_due_minor, cur, unit="minor"),
            True,
        )
    )
    doc.set_y(doc.get_y() + 4)
    totals(doc, rows)


def _credit_notes(doc: Document, invoice: Invoice, notes) -> None:
    if not notes:
        return
    doc.set_y(doc.get_y() + 6)
    table = Table(
        doc,
        [
            Column(pgettext("invoice PDF", "Credit note"), 42),
            Column(pgettext("invoice PDF", "Date"), 22),
            Column(pgettext("invoice PDF", "Effect"), CONTENT_W - 42 - 22 - 34),
            Column(pgettext("invoice PDF", "Credited"), 34, "R"),
        ],
    )
    table.start()
    for note in notes:
        table.row(
            [
                note.number,
                local_date(note.created_at, invoice.organization.timezone),
                effect_wording(note.effect),
                format_amount(note.amount_minor, invoice.currency, unit="minor"),
            ]
        )


def _payment(invoice: Invoice) -> list[str]:
    cur, due = invoice.currency, invoice.amount_due_minor
    if invoice.status == InvoiceStatus.DRAFT:
        return [
            pgettext(
                "invoice PDF",
                "This is a draft for review, not a request for payment. The issued invoice "
                "will carry a number and a due date.",
            )
        ]
    if invoice.status == InvoiceStatus.VOID:
        return [pgettext("invoice PDF", "This invoice has been voided: nothing is due.")]
    if due <= 0:
        return [pgettext("invoice PDF", "Nothing is due on this invoice. Thank you.")]
    tz_name = invoice.organization.timezone
    text = [
        pgettext(
            "invoice PDF",
            "Please pay %(amount)s by %(date)s, quoting the invoice number %(number)s.",
        )
        % {
            "amount": format_amount(due, cur, unit="minor"),
            "date": local_date(invoice.due_at, tz_name),
            "number": invoice.number,
        }
    ]
    if settings.INVOICING_PAYMENT_INSTRUCTIONS:
        text += settings.INVOICING_PAYMENT_INSTRUCTIONS.splitlines()
    return text


def invoice_pdf(invoice: Invoice, *, breakdown=None) -> bytes:
    """The invoice as a PDF in the buyer's document language; ``breakdown``
    (``invoicing.breakdown.Breakdown``) adds its usage by tag value or end user."""
    buyer = buyer_of(invoice)
    language = document_language(buyer)
    with translation.override(language):
        return _render(invoice, buyer, language, breakdown)


def _breakdown(doc: Document, invoice: Invoice, breakdown) -> None:
    """The usage by tag value or end user: a row per group, the total (the
    invoice's usage) last."""
    cur = invoice.currency
    doc.set_y(doc.get_y() + 6)
    title = (
        pgettext("invoice PDF", "Usage by end user")
        if breakdown.by_end_user
        else pgettext("invoice PDF", "Usage by tag “%(key)s”") % {"key": breakdown.tag_key}
    )
    table = Table(
        doc,
        [
            Column(title, CONTENT_W - 94),
            Column(pgettext("invoice PDF", "Calls"), 26, "R"),
            Column(pgettext("invoice PDF", "Tokens"), 34, "R"),
            Column(pgettext("invoice PDF", "Amount"), 34, "R"),
        ],
    )
    table.start()
    for row in breakdown.rows:
        table.row(
            [
                row.label,
                count(row.calls),
                count(row.tokens),
                format_amount(row.amount, cur, exact=True),
            ]
        )
    table.row(
        [
            pgettext("invoice PDF", "Usage total"),
            count(breakdown.calls),
            "",
            format_amount(breakdown.amount, cur, exact=True),
        ],
        bold=True,
    )


def _render(invoice: Invoice, buyer: dict, language: str, breakdown=None) -> bytes:
    cur = invoice.currency
    tz_name = invoice.organization.timezone
    draft = invoice.status == InvoiceStatus.DRAFT
    reference = invoice.number or pgettext("invoice PDF", "draft %(period)s") % {
        "period": invoice.period
    }
    doc = Document(
        title=pgettext("invoice PDF", "Invoice"),
        reference=reference,
        owner=buyer_name(buyer),
        draft=draft,
        lang=pdf_lang(language),
    )
    status = STATUS_TEXT.get(invoice.status)
    y = heading(
        doc,
        title=pgettext("invoice PDF", "Draft invoice")
        if draft
        else pgettext("invoice PDF", "Invoice"),
        status=str(status) if status is not None else invoice.get_status_display(),
        alert=draft,
        pairs=[
            (
                pgettext("invoice PDF", "Invoice number"),
                invoice.number or pgettext("invoice PDF", "Assigned when issued"),
            ),
            (
                pgettext("invoice PDF", "Issue date"),
                local_date(invoice.issued_at, tz_name) or pgettext("invoice PDF", "Not issued"),
            ),
            (pgettext("invoice PDF", "Due date"), local_date(invoice.due_at, tz_name)),
            (pgettext("invoice PDF", "Period"), period_text(invoice.period, tz_name)),
            (pgettext("invoice PDF", "Currency"), cur),
        ],
    )
    y = parties(doc, y, buyer=buyer, buyer_label=pgettext("invoice PDF", "Bill to"))
    doc.set_y(y)
    lines = list(invoice.lines.order_by("position"))
    _lines(doc, invoice, lines)
    _totals(doc, invoice)
    if breakdown is not None:
        _breakdown(doc, invoice, breakdown)
    notes = list(invoice.credit_notes.order_by("created_at", "id")) if invoice.pk else []
    _credit_notes(doc, invoice, notes)
    section(doc, pgettext("invoice PDF", "Payment"), _payment(invoice))
    note = pgettext(
        "invoice PDF",
        "Amounts in %(currency)s. Usage lines equal the sum of the period's call costs.",
    ) % {"currency": cur}
    doc.set_y(doc.get_y() + 3)
    doc.ensure(6)
    doc.block(doc.l_margin, doc.get_y(), CONTENT_W, note, size=7.5, color=MUTED)
    return doc.finish()
