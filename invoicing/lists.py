"""The invoice list as finance reads it: one row per invoice whose columns
reconcile on screen, a status that says what happened to the money, and
totals of the filtered set per currency.

Every amount is in the invoice currency's minor unit (what the customer is
billed and pays), so the columns add up exactly as displayed:

    Total - Credited - Paid = Due

* **Total**: the invoice total, rounded once to the minor unit.
* **Credited**: the sum of its credit notes (``credited_minor``).
* **Paid**: what the invoice was paid and keeps: payments received
  (``paid_minor``) plus the prepaid balance applied at invoicing
  (``total - amount_due_initial``, both in minor units), less what credit
  notes give back (their refund part, ``credited_minor - due_reduced_minor``;
  a refund still pending is counted, it is owed).
* **Due**: what is still to be paid (``Invoice.amount_due_minor``).

The identity holds by construction (``amount_due_initial - due_reduced -
paid`` is the due) except where the due is set to zero: a void invoice, an
uncollectible one (written off) or an overpaid one; that difference is
returned as ``unbalanced`` with its reason, so the page says it instead of
showing a row that does not add up.

Reads only; ``invoice_table`` checks ``Perm.BILLING_VIEW``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db import models
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.functions import Greatest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from console.kernel.choices import TextChoices
from invoicing.models import Invoice, InvoiceStatus, Payment, PaymentKind, PaymentStatus
from invoicing.money import from_minor, to_minor
from invoicing.selectors import require_billing_view


class ListStatus(TextChoices):
    """What the list says about an invoice: its status, or what its credit
    notes did once there are any (a fully refunded invoice is "Refunded",
    never just "Paid")."""

    DRAFT = "draft", _("Draft")
    FINALIZED = "finalized", _("Finalized")
    PAID = "paid", _("Paid")
    PARTIALLY_CREDITED = "partially_credited", _("Partially credited")
    CREDITED = "credited", _("Credited")
    PARTIALLY_REFUNDED = "partially_refunded", _("Partially refunded")
    REFUNDED = "refunded", _("Refunded")
    UNCOLLECTIBLE = "uncollectible", _("Uncollectible")
    VOID = "void", _("Void")


# GET ``sort`` values: the column and its direction ("-" first: descending).
SORTS = {
    "-period": (_("Period, newest first"), ("-period_start", "-id")),
    "period": (_("Period, oldest first"), ("period_start", "id")),
    "-due": (_("Due, largest first"), ("-list_due", "-period_start", "-id")),
    "due": (_("Due, smallest first"), ("list_due", "-period_start", "-id")),
    "-total": (_("Total, largest first"), ("-total", "-period_start", "-id")),
    "total": (_("Total, smallest first"), ("total", "-period_start", "-id")),
}
DEFAULT_SORT = "-period"

_CLOSED = (InvoiceStatus.VOID, InvoiceStatus.UNCOLLECTIBLE)
_REFUNDS = Q(credited_minor__gt=F("due_reduced_minor"))
_FULLY = Q(credited__gte=F("total"))


def _annotated(qs):
    """``list_status`` (a ``ListStatus`` value), ``list_due`` (the due in
    minor units, as ``Invoice.amount_due_minor`` computes it) and
    ``refund_pending`` (a refund of one of its credit notes is not paid out
    yet), so the list filters and sorts in the database."""
    return qs.annotate(
        list_status=Case(
            When(status__in=[InvoiceStatus.DRAFT, *_CLOSED], then=F("status")),
            When(_REFUNDS & _FULLY, then=Value(ListStatus.REFUNDED.value)),
            When(_REFUNDS, then=Value(ListStatus.PARTIALLY_REFUNDED.value)),
            When(Q(credited__gt=0) & _FULLY, then=Value(ListStatus.CREDITED.value)),
            When(credited__gt=0, then=Value(ListStatus.PARTIALLY_CREDITED.value)),
            default=F("status"),
            output_field=models.CharField(),
        ),
        list_due=Case(
            When(status__in=_CLOSED, then=Value(0)),
            default=Greatest(
                Value(0),
                F("amount_due_initial_minor") - F("due_reduced_minor") - F("paid_minor"),
            ),
            output_field=models.BigIntegerField(),
        ),
        refund_pending=Exists(
            Payment.objects.filter(
                invoice=OuterRef("pk"), kind=PaymentKind.REFUND, status=PaymentStatus.PENDING
            )
        ),
    )


@dataclass(frozen=True)
class Amounts:
    """One invoice's (or a set's) columns in minor units."""

    subtotal: int
    total: int
    credited: int
    paid: int
    due: int

    @property
    def unbalanced(self) -> int:
        """Total - Credited - Paid - Due: zero unless the due was set to zero
        (void, uncollectible) or more was paid than was owed (negative)."""
        return self.total - self.credited - self.paid - self.due

    def micro(self, currency: str) -> dict[str, int]:
        """The same amounts in micro-units, for ``{% money %}``."""
        names = ("subtotal", "total", "credited", "paid", "due")
        out = {n: from_minor(getattr(self, n), currency) for n in names}
        out["unbalanced"] = from_minor(abs(self.unbalanced), currency)
        return out


def amounts_of(invoice: Invoice) -> Amounts:
    cur = invoice.currency
    total = to_minor(invoice.total, cur)
    applied = total - invoice.amount_due_initial_minor  # the prepaid balance applied
    refunded = invoice.credited_minor - invoice.due_reduced_minor
    return Amounts(
        subtotal=to_minor(invoice.subtotal, cur),
        total=total,
        credited=invoice.credited_minor,
        paid=invoice.paid_minor + applied - refunded,
        due=invoice.amount_due_minor,
    )


def unbalanced_reason(status: str, unbalanced: int) -> str:
    if not unbalanced:
        return ""
    if status == InvoiceStatus.VOID:
        return gettext("voided")
    if status == InvoiceStatus.UNCOLLECTIBLE:
        return gettext("written off")
    return gettext("overpaid") if unbalanced < 0 else gettext("not due")


@dataclass
class Totals:
    """The filtered set's sums in one currency (void invoices left out)."""

    currency: str
    count: int = 0
    subtotal: int = 0
    total: int = 0
    credited: int = 0
    paid: int = 0
    due: int = 0
    written_off: int = 0
    overpaid: int = 0
    void: int = 0

    def add(self, status: str, a: Amounts) -> None:
        if status == InvoiceStatus.VOID:
            self.void += 1
            return
        self.count += 1
        self.subtotal += a.subtotal
        self.total += a.total
        self.credited += a.credited
        self.paid += a.paid
        self.due += a.due
        if a.unbalanced > 0:
            self.written_off += a.unbalanced
        else:
            self.overpaid -= a.unbalanced

    def micro(self) -> dict[str, int]:
        names = ("subtotal", "total", "credited", "paid", "due", "written_off", "overpaid")
        return {n: from_minor(getattr(self, n), self.currency) for n in names}


@dataclass(frozen=True)
class InvoiceFilters:
    status: str | None = None
    period_from: str | None = None
    period_to: str | None = None
    currency: str | None = None
    sort: str = DEFAULT_SORT


@dataclass
class InvoiceTable:
    invoices: models.QuerySet  # the filtered, sorted queryset (``decorate`` the rows shown)
    totals: list[Totals] = field(default_factory=list)


def invoice_currencies(*, actor) -> list[str]:
    require_billing_view(actor)
    return sorted(
        set(
            Invoice.objects.filter(organization_id=actor.organization_id).values_list(
                "currency", flat=True
            )
        )
    )


def invoice_table(*, actor, filters: InvoiceFilters) -> InvoiceTable:
    """The organization's invoices, filtered and sorted, with totals of the
    filtered set per currency."""
    require_billing_view(actor)
    qs = _annotated(Invoice.objects.filter(organization_id=actor.organization_id).defer("pdf"))
    if filters.status:
        qs = qs.filter(list_status=filters.status)
    if filters.period_from:
        qs = qs.filter(period__gte=filters.period_from)
    if filters.period_to:
        qs = qs.filter(period__lte=filters.period_to)
    if filters.currency:
        qs = qs.filter(currency=filters.currency)
    qs = qs.order_by(*SORTS.get(filters.sort, SORTS[DEFAULT_SORT])[1])
    sums: dict[str, Totals] = defaultdict(lambda: Totals(currency=""))
    fields = ("currency", "status", "subtotal", "total", "credited_minor", "due_reduced_minor",
              "paid_minor", "amount_due_initial_minor")  # fmt: skip
    for values in qs.values(*fields):
        invoice = Invoice(**values)
        totals = sums[invoice.currency]
        totals.currency = invoice.currency
        totals.add(invoice.status, amounts_of(invoice))
    return InvoiceTable(invoices=qs, totals=[sums[c] for c in sorted(sums)])


def decorate(invoice: Invoice) -> Invoice:
    """Give a listed invoice its columns (``amounts``), its list status's
    label and what the unbalanced part is, for the template."""
    invoice.amounts = amounts_of(invoice)
    invoice.cols = invoice.amounts.micro(invoice.currency)
    status = getattr(invoice, "list_status", invoice.status)
    invoice.list_status_label = ListStatus(status).label
    invoice.unbalanced_reason = unbalanced_reason(invoice.status, invoice.amounts.unbalanced)
    return invoice
