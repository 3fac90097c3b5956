"""Read-only monthly summaries of an organization's billing, for pages
outside invoicing (the console's Billing analytics page reads them through
``invoicing.facade``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo
from decimal import Decimal

from django.db.models import Sum
from django.db.models.functions import TruncMonth

from console.money import minor_units
from invoicing.models import (
    CreditNote,
    Invoice,
    InvoiceStatus,
    Payment,
    PaymentKind,
    PaymentStatus,
)


@dataclass(frozen=True)
class MonthlyBilling:
    """Per month (``YYYY-MM``, in the order asked): invoiced in micro-units
    (finalized invoices' totals by period), paid and refunded in the
    currency's major units (succeeded invoice payments and credit notes'
    refunds, by the local month they were made in)."""

    invoiced: dict[str, int]
    paid: dict[str, Decimal]
    refunded: dict[str, Decimal]


def billing_monthly_totals(
    *, organization_id: int, currency: str, months: list[datetime], tz: tzinfo
) -> MonthlyBilling:
    """Invoiced, paid and refunded for each of ``months`` (local month
    starts, oldest first) in ``currency``."""
    keys = [m.strftime("%Y-%m") for m in months]
    first = months[0]
    invoiced = dict.fromkeys(keys, 0)
    for period, total in (
        Invoice.objects.filter(organization_id=organization_id, period__in=keys, currency=currency)
        .exclude(status__in=[InvoiceStatus.DRAFT, InvoiceStatus.VOID])
        .values_list("period")
        .annotate(t=Sum("total"))
    ):
        invoiced[period] = total or 0
    scale = Decimal(10) ** minor_units(currency)

    def monthly(qs, column):
        out = dict.fromkeys(keys, Decimal(0))
        rows = (
            qs.filter(organization_id=organization_id, currency=currency, created_at__gte=first)
            .annotate(month=TruncMonth("created_at", tzinfo=tz))
            .values_list("month")
            .annotate(t=Sum(column))
        )
        for month, total in rows:
            k = month.astimezone(tz).strftime("%Y-%m")
            if k in out:
                out[k] += Decimal(total or 0) / scale
        return out

    paid = monthly(
        Payment.objects.filter(kind=PaymentKind.INVOICE, status=PaymentStatus.SUCCEEDED),
        "amount_minor",
    )
    refunded = monthly(CreditNote.objects.all(), "refund_minor")
    return MonthlyBilling(invoiced=invoiced, paid=paid, refunded=refunded)
