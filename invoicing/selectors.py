"""Reads of the invoicing app (other apps reach them through
``invoicing.facade``). Selectors never import services: a rule both state
lives in ``invoicing.rules``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from django.db.models import Q, Sum

from accounts.facade import NotFound, Perm
from inference_node.facade import nodes_own_and_shared
from invoicing import stripe_adapter
from invoicing.models import (
    BillingProfile,
    CreditNote,
    CreditNoteEffect,
    Invoice,
    InvoiceStatus,
    LedgerEntry,
    Payment,
    PaymentKind,
    PaymentStatus,
)
from invoicing.money import to_minor
from invoicing.pdf import invoice_pdf
from invoicing.rules import finalize_blocker  # noqa: F401 - the pages ask why a draft waits


def prepaid_balance(organization_id: int) -> int:
    """The organization's prepaid balance in micro-units: the sum of its ledger."""
    return ledger_total(organization_id)


def ledger_total(organization_id: int, *, kind: str | None = None) -> int:
    """The sum in micro-units of the organization's ledger entries, of one
    ``LedgerKind`` where given (its usage debits are negative)."""
    entries = LedgerEntry.objects.filter(organization_id=organization_id)
    if kind is not None:
        entries = entries.filter(kind=kind)
    return int(entries.aggregate(s=Sum("amount"))["s"] or 0)


def prepaid_balances(organization_ids) -> dict[int, int]:
    """Balances of several organizations in one query (absent ones are 0)."""
    ids = list(organization_ids)
    out = dict.fromkeys(ids, 0)
    rows = (
        LedgerEntry.objects.filter(organization_id__in=ids)
        .values_list("organization_id")
        .annotate(s=Sum("amount"))
    )
    for org_id, total in rows:
        out[org_id] = int(total or 0)
    return out


def ledger_entry_list(*, organization_id: int, kind: str | None = None):
    qs = LedgerEntry.objects.filter(organization_id=organization_id).select_related("created_by")
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("-created_at", "-id")


# What each series of the analytics Billing page counts, and by which date:
# one basis per series, said in its legend.
BILLING_BASES = {
    "invoiced": "Invoiced (by issue date)",
    "paid": "Paid (by payment date)",
    "refunded": "Refunded (by refund date, completed only)",
}


@dataclass(frozen=True)
class BillingSeries:
    """Money in one currency per bucket (``"YYYY-MM-DD"`` days or ``"YYYY-MM"``
    months in the organization's zone, every bucket of the range present,
    zero when nothing happened), all in the currency's minor units:

    * ``invoiced``: totals of invoices issued (finalized) in the range and
      not voided since (uncollectible ones count: they were invoiced), by
      issue date; each total rounded to the minor unit as the invoice is.
    * ``paid``: invoice payments that succeeded, by payment date.
    * ``refunded``: refunds completed, by refund date: card and by-hand
      refunds once they succeeded (a pending or failed one is not a
      refund), refunds to the prepaid balance (credited at once).

    Each series counts only what happened in ``[start, end)``."""

    buckets: list[str]
    invoiced: dict[str, int]
    paid: dict[str, int]
    refunded: dict[str, int]


def billing_buckets(start: datetime, end: datetime, tz: tzinfo, bucket: str) -> list[str]:
    """The day (``bucket="day"``) or month keys the range touches, in ``tz``."""
    day = start.astimezone(tz).date()
    last = (end - timedelta(microseconds=1)).astimezone(tz).date()
    keys: list[str] = []
    while day <= last:
        key = day.strftime("%Y-%m-%d" if bucket == "day" else "%Y-%m")
        if not keys or keys[-1] != key:
            keys.append(key)
        day += timedelta(days=1)
    return keys


def billing_series(
    *,
    organization_id: int,
    currency: str,
    start: datetime,
    end: datetime,
    tz: tzinfo,
    bucket: str = "month",
) -> BillingSeries:
    """Invoiced, paid and refunded per day or month of ``[start, end)`` in
    ``tz`` (see ``BillingSeries`` for what each counts). Read-only and
    unscoped: the caller has checked who may see billing figures."""
    fmt = "%Y-%m-%d" if bucket == "day" else "%Y-%m"
    keys = billing_buckets(start, end, tz, bucket)

    def per_bucket(rows) -> dict[str, int]:
        out = dict.fromkeys(keys, 0)
        for when, minor in rows:
            day = when.astimezone(tz) if isinstance(when, datetime) else when
            key = day.strftime(fmt)
            if key in out:
                out[key] += minor
        return out

    window = {"organization_id": organization_id, "currency": currency}
    issued = (
        Invoice.objects.filter(**window, issued_at__gte=start, issued_at__lt=end)
        .exclude(status__in=[InvoiceStatus.DRAFT, InvoiceStatus.VOID])
        .values_list("issued_at", "total")
    )
    # A payment is dated by the day the money moved (``paid_on``, a day in the
    # organization's zone, which may be before the day it was recorded); one
    # recorded before that field existed, by when it was recorded.
    first_day, last_day = start.astimezone(tz).date(), end.astimezone(tz).date()

    def moved(kind):
        rows = Payment.objects.filter(
            Q(paid_on__gte=first_day, paid_on__lte=last_day)
            | Q(paid_on__isnull=True, created_at__gte=start, created_at__lt=end),
            **window,
            kind=kind,
            status=PaymentStatus.SUCCEEDED,
        ).values_list("paid_on", "created_at", "amount_minor")
        return [(on or at, minor) for on, at, minor in rows]

    paid = moved(PaymentKind.INVOICE)
    refunds = moved(PaymentKind.REFUND)
    to_balance = CreditNote.objects.filter(
        **window,
        effect=CreditNoteEffect.REFUND_BALANCE,
        refund_minor__gt=0,
        created_at__gte=start,
        created_at__lt=end,
    ).values_list("created_at", "refund_minor")
    return BillingSeries(
        buckets=keys,
        invoiced=per_bucket((at, to_minor(total, currency)) for at, total in issued),
        paid=per_bucket(paid),
        refunded=per_bucket([*refunds, *to_balance]),
    )


# --- the finance console and API ---------------------------------------------
# Everything below is scoped to the actor's organization and needs
# ``Perm.BILLING_VIEW``; another organization's ids are "not found".


def require_billing_view(actor) -> None:
    actor.require(Perm.BILLING_VIEW)


def parse_id(value) -> int | None:
    try:
        pk = int(value)
    except (TypeError, ValueError):
        return None
    return pk if 0 < pk < 2**63 else None


def invoice_list(*, actor, period: str | None = None, status: str | None = None):
    """The organization's invoices, newest period first (void ones included)."""
    require_billing_view(actor)
    qs = Invoice.objects.filter(organization_id=actor.organization_id).defer("pdf")
    if period:
        qs = qs.filter(period=period)
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-period_start", "-id")


def invoice_get(*, actor, invoice_id):
    """One invoice of the actor's organization (its PDF column deferred)."""
    require_billing_view(actor)
    pk = parse_id(invoice_id)
    invoice = (
        Invoice.objects.filter(organization_id=actor.organization_id, pk=pk).defer("pdf").first()
        if pk
        else None
    )
    if invoice is None:
        raise NotFound("No such invoice in this organization.")
    return invoice


def invoice_pdf_bytes(*, actor, invoice_id) -> tuple[object, bytes]:
    """``(invoice, PDF)``: the stored PDF of a finalized invoice, a fresh one
    (marked DRAFT) for a draft or an invoice finalized before PDFs were kept."""
    invoice = invoice_get(actor=actor, invoice_id=invoice_id)
    stored = Invoice.objects.filter(pk=invoice.pk).values_list("pdf", flat=True).first()
    if invoice.status != InvoiceStatus.DRAFT and stored:
        return invoice, bytes(stored)
    return invoice, invoice_pdf(invoice)


def invoice_lines(*, invoice):
    return list(invoice.lines.order_by("position"))


def credit_note_list(*, actor, invoice_id=None, period: str | None = None):
    require_billing_view(actor)
    qs = (
        CreditNote.objects.filter(organization_id=actor.organization_id)
        .select_related("invoice", "created_by")
        .defer("invoice__pdf")
    )
    if invoice_id is not None:
        qs = qs.filter(invoice_id=invoice_id)
    if period:
        qs = qs.filter(invoice__period=period)
    return qs.order_by("-created_at", "-id")


def credit_note_get(*, actor, credit_note_id):
    require_billing_view(actor)
    pk = parse_id(credit_note_id)
    note = (
        CreditNote.objects.filter(organization_id=actor.organization_id, pk=pk)
        .select_related("invoice")
        .defer("invoice__pdf")
        .first()
        if pk
        else None
    )
    if note is None:
        raise NotFound("No such credit note in this organization.")
    return note


def payment_list(
    *,
    actor,
    invoice_id=None,
    kind: str | None = None,
    status: str | None = None,
    since=None,
    until=None,
):
    require_billing_view(actor)
    qs = (
        Payment.objects.filter(organization_id=actor.organization_id)
        .select_related("invoice", "credit_note", "created_by")
        .defer("invoice__pdf")
    )
    if invoice_id is not None:
        qs = qs.filter(invoice_id=invoice_id)
    if kind:
        qs = qs.filter(kind=kind)
    if status:
        qs = qs.filter(status=status)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs.order_by("-created_at", "-id")


def ledger_entries(*, actor, kind: str | None = None, since=None, until=None):
    """The actor's organization's ledger, newest first."""
    require_billing_view(actor)
    qs = ledger_entry_list(organization_id=actor.organization_id, kind=kind)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs


def balance_get(*, actor) -> int:
    require_billing_view(actor)
    return prepaid_balance(actor.organization_id)


def billing_profile_get(*, actor):
    """The organization's billing profile, or an unsaved default one."""
    require_billing_view(actor)
    profile = BillingProfile.objects.filter(organization_id=actor.organization_id).first()
    return profile or BillingProfile(organization_id=actor.organization_id)


def incident_nodes(*, actor):
    """Nodes an incident credit may name: the organization's own and the shared ones."""
    require_billing_view(actor)
    return nodes_own_and_shared(actor.organization_id).order_by("name", "id")


def card_on_file(*, actor):
    """The card invoices and top-ups of the actor's organization would be
    charged to (a ``stripe_adapter.Card``: brand, last 4, expiry), or None.
    Asked of Stripe, which is the authority (a card removed in Stripe's
    dashboard is gone here too); no Stripe customer yet means no card, and no
    call. Raises ``StripeError`` when Stripe cannot answer."""
    require_billing_view(actor)
    if not stripe_adapter.enabled():
        return None
    customer = (
        BillingProfile.objects.filter(organization_id=actor.organization_id)
        .values_list("stripe_customer_id", flat=True)
        .first()
    )
    if not customer:
        return None
    method = stripe_adapter.customer_default_payment_method(customer_id=customer)
    return stripe_adapter.payment_method_retrieve(method) if method else None


def past_due_invoices(*, now, organization_id: int | None = None):
    """Finalized invoices whose due date is before ``now`` (of one organization,
    or of all), oldest due first, without their PDF. Whether something is
    still to pay is ``Invoice.amount_due_minor``: the one definition of
    overdue, shared by the alert rules and the ``invoice.overdue`` event."""
    invoices = Invoice.objects.filter(status=InvoiceStatus.FINALIZED, due_at__lt=now)
    if organization_id is not None:
        invoices = invoices.filter(organization_id=organization_id)
    return invoices.defer("pdf").order_by("due_at", "id")


def overdue_invoices(*, organization_id: int, now) -> list[dict]:
    """The organization's finalized invoices past their due date with something
    still to pay: ``[{"id", "number", "due_at", "amount_due_minor", "currency"}]``
    (what the alert rules watch)."""
    invoices = past_due_invoices(now=now, organization_id=organization_id)
    return [
        {
            "id": inv.pk,
            "number": inv.number or "",
            "due_at": inv.due_at,
            "amount_due_minor": inv.amount_due_minor,
            "currency": inv.currency,
        }
        for inv in invoices
        if inv.amount_due_minor > 0
    ]
