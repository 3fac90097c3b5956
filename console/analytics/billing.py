"""The Billing page's chart: invoiced, paid and refunded per month for the
twelve months up to the range's end, read through ``invoicing.facade``
(never invoicing's tables)."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from decimal import Decimal

from console.analytics.chart import Chart, bar, figure, money_axis
from console.analytics.query import Query
from console.money import micro_to_decimal, minor_units
from invoicing import facade as invoicing


def _months(end: datetime, tz, count: int = 12) -> list[datetime]:
    local = (end - timedelta(microseconds=1)).astimezone(tz)
    y, m = local.year, local.month
    out = []
    for _ in range(count):
        out.append(datetime.combine(datetime(y, m, 1).date(), time.min, tzinfo=tz))  # noqa: DTZ001
        y, m = (y, m - 1) if m > 1 else (y - 1, 12)
    return out[::-1]


def billing(q: Query) -> Chart:
    """Invoiced (finalized invoices' totals by period), paid (succeeded
    invoice payments by month) and refunded (credit notes' refunds by
    month), for the twelve months up to the range's end. Read-only."""
    cur = q.currency
    months = _months(q.end, q.tz)
    keys = [m.strftime("%Y-%m") for m in months]
    totals = invoicing.billing_months(
        organization_id=q.organization_id, currency=cur, months=keys, since=months[0], tz=q.tz
    )
    scale = Decimal(10) ** minor_units(cur)
    invoiced = totals.invoiced
    paid = {k: Decimal(v) / scale for k, v in totals.paid.items()}
    refunded = {k: Decimal(v) / scale for k, v in totals.refunded.items()}
    chart = Chart(
        "billing",
        "Invoiced, paid and refunded per month",
        columns=["month", f"invoiced_{cur}", f"paid_{cur}", f"refunded_{cur}"],
    )
    for k in keys:
        chart.rows.append([k, micro_to_decimal(invoiced[k]), paid[k], refunded[k]])
    if not any(invoiced.values()) and not any(paid.values()) and not any(refunded.values()):
        chart.empty = (
            "No invoices, payments or refunds in the twelve months up to "
            f"{keys[-1]}. Invoices appear here once a month is invoiced (Billing)."
        )
        return chart
    traces = [
        bar("Invoiced", "#4E79A7", keys, [money_axis(invoiced[k]) for k in keys], currency=cur),
        bar("Paid", "#59A14F", keys, [float(paid[k]) for k in keys], currency=cur),
        bar("Refunded", "#E15759", keys, [float(refunded[k]) for k in keys], currency=cur),
    ]
    chart.figure = figure(
        traces,
        x_title="Month",
        y_title=f"Amount ({cur})",
        barmode="group",
        x_type="category",
        y_currency=cur,
    )
    return chart
