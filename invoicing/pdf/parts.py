"""The blocks an invoice and a credit note share: the heading with its
number-and-dates block, the seller and buyer blocks, the totals, and the
customer-facing texts, translated into the document's language (see
``invoicing.pdf.language``). Money goes through ``console.kernel.money``, in the
locale of the language active while the document is built."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.utils.translation import pgettext, pgettext_lazy

from invoicing.models import BillingProfile, CreditNoteEffect
from invoicing.pdf.document import (
    ALERT,
    CONTENT_W,
    INK,
    MARGIN,
    MUTED,
    PAGE_W,
    Document,
    line_height,
)

# What a credit note did, in the customer's words (the console's own labels
# are written for finance: "Refund to be paid by hand").
EFFECT_WORDING: dict[str, Any] = {  # lazy texts
    CreditNoteEffect.REDUCE_DUE: pgettext_lazy("invoice PDF", "Reduces the amount due"),
    CreditNoteEffect.REFUND_CARD: pgettext_lazy(
        "invoice PDF", "Refunded to your original payment method"
    ),
    CreditNoteEffect.REFUND_BALANCE: pgettext_lazy(
        "invoice PDF", "Credited to your prepaid balance"
    ),
    CreditNoteEffect.REFUND_MANUAL: pgettext_lazy(
        "invoice PDF", "Refunded to you by bank transfer"
    ),
}


def effect_wording(effect: str, default: str = "") -> str:
    wording = EFFECT_WORDING.get(effect)
    return str(wording) if wording is not None else default


MINUS = "\u2212"  # the minus sign, as the console's pages write a deduction
LEFT_W = 92.0  # the title / seller column
RIGHT_X = MARGIN + 100.0  # the number block / buyer column
RIGHT_W = PAGE_W - MARGIN - RIGHT_X


def deduction(text: str) -> str:
    return f"{MINUS}{text}"


def local_date(moment: datetime | None, timezone_name: str) -> str:
    if moment is None:
        return ""
    try:
        zone = ZoneInfo(timezone_name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    return f"{moment.astimezone(zone):%Y-%m-%d}"


def period_text(period: str, tz_name: str) -> str:
    return pgettext("invoice PDF", "%(period)s (calendar month, %(zone)s)") % {
        "period": period,
        "zone": tz_name,
    }


def buyer_of(invoice) -> dict:
    """The buyer as frozen on the invoice at finalization; a draft (or an
    invoice finalized before buyers were kept) shows today's billing profile."""
    if invoice.buyer:
        return invoice.buyer
    org = invoice.organization
    profile = BillingProfile.objects.filter(organization_id=org.pk).first()
    if profile is None:
        return {"name": org.name, "legal_name": org.name}
    return {
        "name": org.name,
        "legal_name": profile.legal_name or org.name,
        "address": profile.address,
        "tax_id": profile.tax_id,
        "email": profile.billing_email,
        "language": profile.document_language,
    }


def buyer_name(buyer: dict) -> str:
    return buyer.get("legal_name") or buyer.get("name") or ""


def tax_id(value: str) -> str:
    return pgettext("invoice PDF", "Tax ID: %(tax_id)s") % {"tax_id": value}


def heading(
    doc: Document,
    *,
    title: str,
    status: str,
    alert: bool,
    pairs: Sequence[tuple[str, str]],
) -> float:
    """Title and status on the left, the number-and-dates block on the right;
    returns the y below the lower of the two."""
    doc.add_page()
    top = MARGIN
    left = doc.block(MARGIN, top, LEFT_W, title, size=20, bold=True)
    left = doc.block(
        MARGIN,
        left + 1.5,
        LEFT_W,
        status,
        size=9 if not alert else 10,
        bold=alert,
        color=ALERT if alert else MUTED,
    )
    right = doc.pairs(RIGHT_X, top + 1, RIGHT_W, 33, [(k, v) for k, v in pairs if v])
    return max(left, right) + 6


def parties(doc: Document, y: float, *, buyer: dict, buyer_label: str) -> float:
    """The seller ("From") and the buyer blocks side by side; returns the y below."""
    seller = settings.INVOICING_SELLER
    from_rows: list[tuple[str, bool]] = [(seller.get("name", ""), True)]
    from_rows += [(line, False) for line in seller.get("address", "").splitlines() if line]
    if seller.get("tax_id"):
        from_rows.append((tax_id(seller["tax_id"]), False))
    if seller.get("email"):
        from_rows.append((seller["email"], False))
    to_rows: list[tuple[str, bool]] = [(buyer_name(buyer), True)]
    to_rows += [(line, False) for line in (buyer.get("address") or "").splitlines() if line]
    if buyer.get("tax_id"):
        to_rows.append((tax_id(buyer["tax_id"]), False))
    if buyer.get("email"):
        to_rows.append((buyer["email"], False))
    seller_label = pgettext("invoice PDF", "From").upper()
    doc.block(MARGIN, y, LEFT_W, seller_label, size=7.5, bold=True, color=MUTED)
    doc.block(RIGHT_X, y, RIGHT_W, buyer_label.upper(), size=7.5, bold=True, color=MUTED)
    y += line_height(7.5) + 1
    left = doc.lines(MARGIN, y, LEFT_W, from_rows)
    right = doc.lines(RIGHT_X, y, RIGHT_W, to_rows)
    return max(left, right) + 7


def totals(doc: Document, rows: Sequence[tuple[str, str, bool]]) -> float:
    """Label / amount rows right of the page (bold rows get a rule above)."""
    label_x, label_w, amount_w = RIGHT_X - 20, RIGHT_W - 5, 45.0
    amount_x = PAGE_W - MARGIN - amount_w
    label_w = amount_x - label_x - 2
    for label, amount, strong in rows:
        height = max(doc.measure(label_w, label, 9), line_height(9)) + 1.6
        doc.ensure(height + 1)
        y = doc.get_y()
        if strong:
            doc.rule(label_x, y, PAGE_W - MARGIN, width=0.35, color=INK)
            y += 0.8
        bottom = doc.block(label_x, y + 0.8, label_w, label, bold=strong)
        doc.block(amount_x, y + 0.8, amount_w, amount, bold=strong, align="R")
        doc.set_y(max(bottom, y + line_height(9) + 0.8) + 0.8)
    return doc.get_y()


def section(doc: Document, title: str, body: Sequence[str], *, gap: float = 6) -> None:
    """A small heading and wrapped paragraphs, kept together on one page where they fit."""
    texts = [t for t in body if t]
    if not texts:
        return
    height = line_height(7.5) + 1 + sum(doc.measure(CONTENT_W, t, 9) + 1 for t in texts)
    doc.set_y(doc.get_y() + gap)
    doc.ensure(min(height, 60))
    top = doc.block(MARGIN, doc.get_y(), CONTENT_W, title.upper(), size=7.5, bold=True, color=MUTED)
    doc.set_y(top + 1)
    for text in texts:
        doc.ensure(doc.measure(CONTENT_W, text, 9))
        doc.set_y(doc.block(MARGIN, doc.get_y(), CONTENT_W, text) + 1)
