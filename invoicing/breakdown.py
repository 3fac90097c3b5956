"""An invoice's usage broken down by a tag's values or by end user: the
rows the invoice page shows under ``?breakdown=`` and their CSV. From the
call records (``usage.facade.attribution``) of the invoice's period, billed
calls in its currency: what its usage lines were computed from."""

from __future__ import annotations

import csv
from dataclasses import dataclass

from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy

from console.kernel.csv_header import header_line
from console.kernel.money import format_amount
from invoicing.exports import Echo, price_cell
from usage.facade import ATTRIBUTE_BY_END_USER, ATTRIBUTE_BY_TAG, attribution, csv_text, tag_keys

BREAKDOWN_END_USER = "end_user"
BREAKDOWN_TAG = "tag:"
BREAKDOWN_COLUMNS = ("group", "calls", "tokens", "amount")
BREAKDOWN_LABELS = {
    "group": pgettext_lazy("CSV header", "Group"),
    "calls": pgettext_lazy("CSV header", "Calls"),
    "tokens": pgettext_lazy("CSV header", "Tokens"),
    "amount": pgettext_lazy("CSV header", "Amount"),
}


@dataclass
class BreakdownRow:
    label: str
    value: str | None  # None: the calls without the tag (or an end user)
    calls: int
    tokens: int
    amount: int  # micro-units of the invoice's currency
    amount_text: str = ""  # to the micro-unit, for people (``format_amount``, exact)


@dataclass
class Breakdown:
    """An invoice's usage split by a tag's values or by end user: the rows
    (the calls without last) sum to the invoice's usage amount."""

    choice: str
    tag_key: str
    rows: list[BreakdownRow]
    calls: int
    amount: int
    amount_text: str = ""

    @property
    def by_end_user(self) -> bool:
        return self.choice == BREAKDOWN_END_USER


def parse_breakdown(value: str | None) -> tuple[str, str] | None:
    """``breakdown=end_user`` or ``breakdown=tag:<key>`` as (by, key); None
    when not asked for; ``ValueError`` when malformed."""
    if not value:
        return None
    if value == BREAKDOWN_END_USER:
        return (ATTRIBUTE_BY_END_USER, "")
    if value.startswith(BREAKDOWN_TAG):
        key = value[len(BREAKDOWN_TAG) :]
        if 0 < len(key) <= 32 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in key):
            return (ATTRIBUTE_BY_TAG, key)
    raise ValueError(
        _("Break usage down by end_user or by tag:<key> (a key of 1 to 32 letters, digits, _ . -).")
    )


def invoice_breakdown(invoice, value: str | None) -> Breakdown | None:
    """The invoice's usage (its period's billed calls in its currency, from the call
    records: what its usage lines were computed from) by ``value``
    (``parse_breakdown``); None when none is asked for."""
    parsed = parse_breakdown(value)
    if parsed is None or value is None:  # parsed: value is a choice
        return None
    by, key = parsed
    result = attribution(
        organization_id=invoice.organization_id,
        start=invoice.period_start,
        end=invoice.period_end,
        by=by,
        tag_key=key,
        currency=invoice.currency,
        where={"is_test": False},  # its billed calls: load-test calls "not billed" are on none
    )
    untagged = _("(untagged)") if key else _("(no end user)")
    rows = [
        BreakdownRow(
            g.value if g.value is not None else untagged,
            g.value,
            g.calls,
            g.tokens,
            g.cost,
            format_amount(g.cost, invoice.currency, exact=True),
        )
        for g in result.groups
    ]
    total = result.total
    return Breakdown(
        value,
        key,
        rows,
        total.calls,
        total.cost,
        format_amount(total.cost, invoice.currency, exact=True),
    )


def breakdown_choices(invoice) -> list[tuple[str, str]]:
    """What the invoice page offers: end users, and each tag key its period's calls carried."""
    keys = tag_keys(
        organization_id=invoice.organization_id, start=invoice.period_start, end=invoice.period_end
    )
    return [
        (BREAKDOWN_END_USER, _("End user")),
        *((f"{BREAKDOWN_TAG}{k}", _("Tag “%(key)s”") % {"key": k}) for k in keys),
    ]


def breakdown_csv(breakdown: Breakdown, request=None) -> str:
    """The breakdown as a CSV file (header, one row per group, the total last)."""
    out = [header_line(BREAKDOWN_COLUMNS, BREAKDOWN_LABELS, request=request)]
    writer = csv.writer(Echo())
    for row in breakdown.rows:
        group = "" if row.value is None else csv_text(row.value)
        out.append(writer.writerow([group, row.calls, row.tokens, price_cell(row.amount)]))
    # Amounts to the micro-unit (six decimals), so the rows sum to the total exactly.
    out.append(writer.writerow(["total", breakdown.calls, "", price_cell(breakdown.amount)]))
    return "".join(out)
