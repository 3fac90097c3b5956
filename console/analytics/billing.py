"""The Billing page's chart: invoiced, paid and refunded in the page's range,
per day (ranges up to five weeks) or per month, read through
``invoicing.facade`` (never invoicing's tables).

One basis per series, said in its legend (``invoicing.facade.BILLING_BASES``):
invoiced by issue date, paid by payment date, refunded by refund date and
only once completed. Every series counts what happened inside the range
alone, so a month at an edge of the range is a part of that month."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from console.analytics.chart import Chart, bar, figure
from console.analytics.query import Query
from console.money import minor_units
from invoicing import facade as invoicing

# Ranges up to this long are drawn per day; longer ones per month.
DAILY_UP_TO = timedelta(days=35)
SERIES = (("invoiced", "#4E79A7"), ("paid", "#59A14F"), ("refunded", "#E15759"))
CSV_NAMES = {
    "invoiced": "invoiced_by_issue_date",
    "paid": "paid_by_payment_date",
    "refunded": "refunded_completed_by_refund_date",
}


def billing(q: Query) -> Chart:
    """Invoiced, paid and refunded per day or month of the range. Read-only."""
    cur = q.currency
    bucket = "day" if q.end - q.start <= DAILY_UP_TO else "month"
    data = invoicing.billing_series(
        organization_id=q.organization_id,
        currency=cur,
        start=q.start,
        end=q.end,
        tz=q.tz,
        bucket=bucket,
    )
    keys = data.buckets
    places = minor_units(cur)
    series = {name: getattr(data, name) for name, _ in SERIES}
    chart = Chart(
        "billing",
        f"Invoiced, paid and refunded per {bucket}",
        columns=[bucket, *(f"{CSV_NAMES[name]}_{cur}" for name, _ in SERIES)],
    )
    for k in keys:
        chart.rows.append([k, *(Decimal(series[name][k]).scaleb(-places) for name, _ in SERIES)])
    first, last = (keys[0], keys[-1]) if keys else ("", "")
    span = first if first == last else f"{first} to {last}"
    edges = " (a month at either end is the part of it inside the range)"
    chart.note = (
        f"{'Days' if bucket == 'day' else 'Months'} in {q.tz.key}, {span}; only what "
        "happened inside the range counts"
        + (edges if bucket == "month" else "")
        + ". Invoiced: invoices issued (finalized), by issue date, void ones left out. "
        "Paid: invoice payments received, by the day the money moved. Refunded: refunds "
        "completed, by "
        "refund date; a refund still pending is not counted."
    )
    if not any(v for name, _ in SERIES for v in series[name].values()):
        chart.empty = (
            f"No invoices issued, payments or completed refunds in {cur} from {first} to "
            f"{last} ({q.tz.key}). Widen the range; invoices are issued once a month is "
            "finalized (Billing)."
        )
        return chart
    traces = [
        bar(
            invoicing.BILLING_BASES[name],
            colour,
            keys,
            [float(Decimal(series[name][k]).scaleb(-places)) for k in keys],
            currency=cur,
        )
        for name, colour in SERIES
    ]
    chart.figure = figure(
        traces,
        x_title=f"{'Day' if bucket == 'day' else 'Month'} ({q.tz.key})",
        y_title=f"Amount ({cur})",
        barmode="group",
        x_type="category",
        y_currency=cur,
    )
    return chart
