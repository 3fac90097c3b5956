"""Finance CSV exports: invoices, invoice lines, credit notes, payments and
ledger entries of one organization, filtered by period and status.

UTF-8 with a byte-order mark (so spreadsheets read it as UTF-8) and a header
row: the stable column keys, or for a console download in another language
their labels (``console.kernel.csv_header``; the ``*_LABELS`` tables next to the
columns). Amounts are currency units with the currency's decimals, converted by
``invoicing.money`` in integers and ``Decimal`` (never a float): micro-unit
amounts with ``micro_to_currency`` (half away from zero, the invoice's rule),
minor-unit ones with ``minor_to_decimal``. Prices per million tokens keep
all six decimals (a price is not an amount to pay, and rounding it to cents
would lose it). Text cells go through the call logs' formula-injection
guard (``usage.call_csv.csv_text``). Large tables (payments, ledger) are read in
keyset chunks on ``(created_at, id)``, so memory stays flat."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils.translation import pgettext_lazy

from console.kernel.csv_header import header_line
from console.kernel.money import micro_to_decimal
from invoicing import selectors
from invoicing.models import InvoiceLine, InvoiceStatus, LedgerKind, PaymentStatus
from invoicing.money import micro_to_currency, minor_to_decimal
from invoicing.services._common import period_bounds
from usage.facade import csv_text

CHUNK = 2000


@dataclass(frozen=True)
class ExportFilters:
    """``period`` is "YYYY-MM" (None: every period); ``status`` is the
    export's own status (invoice status, payment status, ledger kind)."""

    period: str | None = None
    status: str | None = None


def _when(value: datetime | None, tzinfo) -> str:
    return value.astimezone(tzinfo).isoformat(timespec="seconds") if value else ""


def _money(micro: int, currency: str) -> str:
    return str(micro_to_currency(micro, currency))


def _minor(minor: int, currency: str) -> str:
    return str(minor_to_decimal(minor, currency))


def price_cell(micro: int | None) -> str:
    return "" if micro is None else f"{micro_to_decimal(micro):.6f}"


class Echo:
    """A file-like object for ``csv.writer`` that hands back each line."""

    def write(self, text: str) -> str:
        return text


def _lines(header: str, rows: Iterable[list]) -> Iterator[str]:
    """``header`` (the first line, byte-order mark included), then the rows."""
    writer = csv.writer(Echo())
    yield header
    for row in rows:
        yield writer.writerow(row)


def _keyset(qs: QuerySet, chunk_size: int = CHUNK) -> Iterator:
    """``qs`` (ordered newest first on created_at, id) in chunks by keyset."""
    last = None
    while True:
        page = qs
        if last is not None:
            page = qs.filter(
                Q(created_at__lt=last.created_at) | Q(created_at=last.created_at, id__lt=last.id)
            )
        chunk = list(page.order_by("-created_at", "-id")[:chunk_size])
        yield from chunk
        if len(chunk) < chunk_size:
            return
        last = chunk[-1]


def _period_window(actor, period: str | None):
    if not period:
        return None, None
    return period_bounds(period, actor.organization.timezone)


# --- invoices ------------------------------------------------------------------

INVOICE_COLUMNS = (
    "number", "organization", "period", "status", "subtotal", "discount", "tax", "total",
    "paid", "currency", "credits_applied", "credited", "amount_due", "calls", "issued_at",
    "due_at", "paid_at",
)  # fmt: skip
# Labels shared by several exports; each export's table adds its own.
_COMMON_LABELS = {
    "period": pgettext_lazy("CSV header", "Period"),
    "status": pgettext_lazy("CSV header", "Status"),
    "currency": pgettext_lazy("CSV header", "Currency"),
    "amount": pgettext_lazy("CSV header", "Amount"),
    "created_at": pgettext_lazy("CSV header", "Created at"),
    "created_by": pgettext_lazy("CSV header", "Created by"),
    "reason": pgettext_lazy("CSV header", "Reason"),
    "reference": pgettext_lazy("CSV header", "Reference"),
    "kind": pgettext_lazy("CSV header", "Type"),
    "invoice_number": pgettext_lazy("CSV header", "Invoice number"),
}
INVOICE_LABELS = {
    **_COMMON_LABELS,
    "number": pgettext_lazy("CSV header", "Invoice number"),
    "organization": pgettext_lazy("CSV header", "Organization"),
    "subtotal": pgettext_lazy("CSV header", "Subtotal"),
    "discount": pgettext_lazy("CSV header", "Discount"),
    "tax": pgettext_lazy("CSV header", "Tax"),
    "total": pgettext_lazy("CSV header", "Total"),
    "paid": pgettext_lazy("CSV header", "Paid"),
    "credits_applied": pgettext_lazy("CSV header", "Paid from prepaid balance"),
    "credited": pgettext_lazy("CSV header", "Credited"),
    "amount_due": pgettext_lazy("CSV header", "Amount due"),
    "calls": pgettext_lazy("CSV header", "Calls"),
    "issued_at": pgettext_lazy("CSV header", "Issued at"),
    "due_at": pgettext_lazy("CSV header", "Due at"),
    "paid_at": pgettext_lazy("CSV header", "Paid at"),
}


def _invoices(actor, filters: ExportFilters):
    return selectors.invoice_list(actor=actor, period=filters.period, status=filters.status)


def invoice_rows(*, actor, filters: ExportFilters, tzinfo) -> Iterator[list]:
    org_name = csv_text(actor.organization.name)
    for inv in _invoices(actor, filters).iterator(chunk_size=CHUNK):
        cur = inv.currency
        yield [
            csv_text(inv.number or ""),
            org_name,
            inv.period,
            inv.status,
            _money(inv.subtotal, cur),
            _money(inv.discount_amount, cur),
            _money(inv.tax_amount, cur),
            _money(inv.total, cur),
            _minor(inv.paid_minor, cur),
            cur,
            _money(inv.credits_applied, cur),
            _minor(inv.credited_minor, cur),
            _minor(inv.amount_due_minor, cur),
            inv.calls,
            _when(inv.issued_at, tzinfo),
            _when(inv.due_at, tzinfo),
            _when(inv.paid_at, tzinfo),
        ]


# --- invoice lines ---------------------------------------------------------------

LINE_COLUMNS = (
    "invoice_number", "invoice_status", "period", "position", "kind", "description", "model",
    "token_class", "quantity", "unit_price_per_mtok", "amount", "currency",
)  # fmt: skip
LINE_LABELS = {
    **_COMMON_LABELS,
    "invoice_status": pgettext_lazy("CSV header", "Invoice status"),
    "position": pgettext_lazy("CSV header", "Line"),
    "description": pgettext_lazy("CSV header", "Description"),
    "model": pgettext_lazy("CSV header", "Model"),
    "token_class": pgettext_lazy("CSV header", "Token class"),
    "quantity": pgettext_lazy("CSV header", "Quantity"),
    "unit_price_per_mtok": pgettext_lazy("CSV header", "Unit price per 1M tokens"),
}


def line_rows(*, actor, filters: ExportFilters, tzinfo) -> Iterator[list]:
    invoices = _invoices(actor, filters)
    lines = (
        InvoiceLine.objects.filter(invoice__in=invoices.values("pk"))
        .select_related("invoice")
        .only(
            "position",
            "kind",
            "description",
            "model",
            "token_class",
            "quantity",
            "unit_price_per_mtok",
            "amount",
            "invoice__number",
            "invoice__status",
            "invoice__period",
            "invoice__currency",
            "invoice__period_start",
        )
        .order_by("-invoice__period_start", "-invoice_id", "position")
    )
    for line in lines.iterator(chunk_size=CHUNK):
        inv = line.invoice
        yield [
            csv_text(inv.number or ""),
            inv.status,
            inv.period,
            line.position,
            line.kind,
            csv_text(line.description),
            csv_text(line.model),
            line.token_class,
            line.quantity,
            price_cell(line.unit_price_per_mtok),
            _money(line.amount, inv.currency),
            inv.currency,
        ]


# --- credit notes ------------------------------------------------------------------

CREDIT_NOTE_COLUMNS = (
    "number", "invoice_number", "period", "created_at", "amount", "due_reduction", "refund",
    "currency", "effect", "reason", "created_by",
)  # fmt: skip
CREDIT_NOTE_LABELS = {
    **_COMMON_LABELS,
    "number": pgettext_lazy("CSV header", "Credit note number"),
    "due_reduction": pgettext_lazy("CSV header", "Reduction of amount due"),
    "refund": pgettext_lazy("CSV header", "Refund"),
    "effect": pgettext_lazy("CSV header", "Effect"),
}


def credit_note_rows(*, actor, filters: ExportFilters, tzinfo) -> Iterator[list]:
    """Credit notes of the invoices of ``period``; ``status`` is the invoice's."""
    qs = selectors.credit_note_list(actor=actor, period=filters.period)
    if filters.status:
        qs = qs.filter(invoice__status=filters.status)
    for note in qs.iterator(chunk_size=CHUNK):
        cur = note.currency
        yield [
            csv_text(note.number),
            csv_text(note.invoice.number or ""),
            note.invoice.period,
            _when(note.created_at, tzinfo),
            _minor(note.amount_minor, cur),
            _minor(note.due_reduction_minor, cur),
            _minor(note.refund_minor, cur),
            cur,
            note.effect,
            csv_text(note.reason),
            csv_text(note.created_by.email if note.created_by else ""),
        ]


# --- payments -------------------------------------------------------------------------

PAYMENT_COLUMNS = (
    "id", "created_at", "paid_on", "kind", "method", "status", "invoice_number",
    "credit_note_number", "reference", "amount", "currency", "failure_message", "created_by",
)  # fmt: skip
PAYMENT_LABELS = {
    **_COMMON_LABELS,
    "id": pgettext_lazy("CSV header", "ID"),
    "paid_on": pgettext_lazy("CSV header", "Paid on"),
    "method": pgettext_lazy("CSV header", "Method"),
    "credit_note_number": pgettext_lazy("CSV header", "Credit note number"),
    "failure_message": pgettext_lazy("CSV header", "Failure message"),
}


def payment_rows(*, actor, filters: ExportFilters, tzinfo) -> Iterator[list]:
    """Payments made in ``period`` (by creation time, in the organization's
    time zone); ``paid_on`` is the day the money moved (the organization's
    calendar), empty while pending."""
    since, until = _period_window(actor, filters.period)
    qs = selectors.payment_list(actor=actor, status=filters.status, since=since, until=until)
    for p in _keyset(qs):
        yield [
            p.pk,
            _when(p.created_at, tzinfo),
            p.paid_on.isoformat() if p.paid_on else "",
            p.kind,
            p.method,
            p.status,
            csv_text(p.invoice.number if p.invoice and p.invoice.number else ""),
            csv_text(p.credit_note.number if p.credit_note else ""),
            csv_text(p.reference),
            _minor(p.amount_minor, p.currency),
            p.currency,
            csv_text(p.failure_message),
            csv_text(p.created_by.email if p.created_by else ""),
        ]


# --- ledger -------------------------------------------------------------------------

# ``{tz}``: the zone the times are written in (the organization's), named in the header.
LEDGER_COLUMNS = (
    "id", "created_at ({tz})", "kind", "amount", "amount_exact", "currency", "reference", "reason",
    "created_by",
)  # fmt: skip
LEDGER_LABELS = {
    **_COMMON_LABELS,
    "id": pgettext_lazy("CSV header", "ID"),
    "created_at ({tz})": pgettext_lazy("CSV header", "Created at (%(tz)s)"),
    "amount_exact": pgettext_lazy("CSV header", "Exact amount"),
}


def ledger_rows(*, actor, filters: ExportFilters, tzinfo) -> Iterator[list]:
    """Ledger entries of ``period``; ``status`` is the entry's kind. ``amount``
    has the currency's decimals; ``amount_exact`` all six, so the column
    sums to the balance exactly (usage debits are fractions of a cent)."""
    since, until = _period_window(actor, filters.period)
    qs = selectors.ledger_entries(actor=actor, kind=filters.status, since=since, until=until)
    for e in _keyset(qs):
        yield [
            e.pk,
            _when(e.created_at, tzinfo),
            e.kind,
            _money(e.amount, e.currency),
            f"{micro_to_decimal(e.amount):.6f}",
            e.currency,
            csv_text(e.reference),
            csv_text(e.reason),
            csv_text(e.created_by.email if e.created_by else ""),
        ]


# --- the registry the views and the API use -------------------------------------------


@dataclass(frozen=True)
class Export:
    name: str
    title: str
    columns: tuple[str, ...]
    rows: Callable[..., Iterator[list]]
    statuses: tuple[str, ...]  # what ``status`` may be; empty: no status filter
    status_label: str = "status"
    labels: Mapping[str, object] = field(default_factory=dict)  # column key → label

    def header(self, tzinfo) -> list[str]:
        """The column names, a time column naming its zone where it says ``{tz}``."""
        return [c.replace("{tz}", tzinfo.key) for c in self.columns]

    @property
    def url_name(self) -> str:
        return f"invoicing:export_{self.name.replace('-', '_')}"


def _exports() -> dict[str, Export]:
    return {
        e.name: e
        for e in (
            Export(
                "invoices",
                "Invoices",
                INVOICE_COLUMNS,
                invoice_rows,
                tuple(InvoiceStatus),
                labels=INVOICE_LABELS,
            ),
            Export(
                "invoice-lines",
                "Invoice lines",
                LINE_COLUMNS,
                line_rows,
                tuple(InvoiceStatus),
                labels=LINE_LABELS,
            ),
            Export(
                "credit-notes",
                "Credit notes",
                CREDIT_NOTE_COLUMNS,
                credit_note_rows,
                tuple(InvoiceStatus),
                "invoice status",
                labels=CREDIT_NOTE_LABELS,
            ),
            Export(
                "payments",
                "Payments",
                PAYMENT_COLUMNS,
                payment_rows,
                tuple(PaymentStatus),
                labels=PAYMENT_LABELS,
            ),
            Export(
                "ledger",
                "Ledger entries",
                LEDGER_COLUMNS,
                ledger_rows,
                tuple(LedgerKind),
                "kind",
                labels=LEDGER_LABELS,
            ),
        )
    }


EXPORTS = _exports()


def csv_lines(
    *, export: Export, actor, filters: ExportFilters, tzinfo, request=None
) -> Iterator[str]:
    """The export as lines of text, produced lazily. The permission is checked
    here, before the first line, so a refusal is an error, not a broken file.
    The header row is made here too, in the request's language: the keys, or
    for a console download (``request``) in another language the labels."""
    selectors.require_billing_view(actor)
    header = header_line(export.header(tzinfo), export.labels, request=request)
    rows = export.rows(actor=actor, filters=filters, tzinfo=tzinfo)
    return _lines(header, rows)


def csv_filename(*, export: Export, org_slug: str, filters: ExportFilters) -> str:
    parts = [export.name, org_slug, filters.period or "all"]
    if filters.status:
        parts.append(filters.status)
    return "-".join(parts) + ".csv"
