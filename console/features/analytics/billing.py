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

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.features.analytics.chart import Chart, bar, figure
from console.features.analytics.query import Query
from console.kernel.money import minor_units
from invoicing import facade as invoicing

# Ranges up to this long are drawn per day; longer ones per month.
DAILY_UP_TO = timedelta(days=35)
SERIES = (("invoiced", "#4E79A7"), ("paid", "#59A14F"), ("refunded", "#E15759"))
# The legend of each series (``invoicing.facade.BILLING_BASES``' basis), translated when shown.
LEGENDS = {
    "invoiced": gettext_lazy("Invoiced (by issue date)"),
    "paid": gettext_lazy("Paid (by payment date)"),
    "refunded": gettext_lazy("Refunded (by refund date, completed only)"),
}
CSV_NAMES = {
    "invoiced": "invoiced_by_issue_date",
    "paid": "paid_by_payment_date",
    "refunded": "refunded_completed_by_refund_date",
}


def _billing_note(bucket: str, first: str, last: str, zone: str) -> str:
    """What the buckets are (days or months of ``zone``, ``first`` to ``last``) and
    what each series counts."""
    span = first if first == last else _("%(first)s to %(last)s") % {"first": first, "last": last}
    where = {"zone": zone, "span": span}
    if bucket == "day":
        said = _("Days in %(zone)s, %(span)s; only what happened inside the range counts.")
    else:
        said = _(
            "Months in %(zone)s, %(span)s; only what happened inside the range counts (a month "
            "at either end is the part of it inside the range)."
        )
    return (
        said % where
        + " "
        + _(
            "Invoiced: invoices issued (finalized), by issue date, void ones left out. Paid: "
            "invoice payments received, by the day the money moved. Refunded: refunds "
            "completed, by refund date; a refund still pending is not counted."
        )
    )


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
    series = {name: getattr(data, name) for name, _c in SERIES}
    chart = Chart(
        "billing",
        _("Invoiced, paid and refunded per day")
        if bucket == "day"
        else _("Invoiced, paid and refunded per month"),
        columns=[bucket, *(f"{CSV_NAMES[name]}_{cur}" for name, _c in SERIES)],
    )
    for k in keys:
        chart.rows.append([k, *(Decimal(series[name][k]).scaleb(-places) for name, _c in SERIES)])
    first, last = (keys[0], keys[-1]) if keys else ("", "")
    chart.note = _billing_note(bucket, first, last, q.tz.key)
    if not any(v for name, _c in SERIES for v in series[name].values()):
        chart.empty = _(
            "No invoices issued, payments or completed refunds in %(currency)s from %(first)s "
            "to %(last)s (%(zone)s). Widen the range; invoices are issued once a month is "
            "finalized (Billing)."
        ) % {"currency": cur, "first": first, "last": last, "zone": q.tz.key}
        return chart
    traces = [
        bar(
            str(LEGENDS.get(name, invoicing.BILLING_BASES[name])),
            colour,
            keys,
            [float(Decimal(series[name][k]).scaleb(-places)) for k in keys],
            currency=cur,
        )
        for name, colour in SERIES
    ]
    chart.figure = figure(
        traces,
        x_title=f"{_('Day') if bucket == 'day' else _('Month')} ({q.tz.key})",
        y_title=_("Amount (%(currency)s)") % {"currency": cur},
        barmode="group",
        x_type="category",
        y_currency=cur,
    )
    return chart
