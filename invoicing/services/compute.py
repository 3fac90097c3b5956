"""What an invoice says, computed from call records, re-rating adjustments
and the billing profile, without writing anything (drafts, refreshes,
finalization and the running month's preview all use this).

Usage lines: the period's billed calls (load-test calls marked "not billed"
left out: ``usage.facade.billed_usage_groups``) grouped by the price row they were
rated with; for each group, one line per token class with tokens as the
quantity, the effective price per million tokens, and the group's exact
cost split across the classes by ``invoicing.money.allocate``. So the usage
lines of an invoice sum to the sum of its calls' costs, to the micro-unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from accounts.facade import BillingMode, Organization
from console.kernel.money import PPM, format_rate
from invoicing.models import BillingProfile, LineKind, TokenClass
from invoicing.money import allocate, div_round, to_minor
from usage.facade import (
    billed_usage_groups,
    discount_for,
    discount_ppm_for,
    price_rows,
    rerate_reasons,
    unbilled_adjustments,
)

# The usage group's token column of each token class, and the price's.
_TokenColumn = Literal["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"]
CLASSES: tuple[tuple[TokenClass, _TokenColumn, str], ...] = (
    (TokenClass.INPUT, "input_tokens", "input_per_mtok"),
    (TokenClass.CACHE_READ, "cache_read_tokens", "cache_read_per_mtok"),
    (TokenClass.CACHE_WRITE, "cache_write_tokens", "cache_write_per_mtok"),
    (TokenClass.OUTPUT, "output_tokens", "output_per_mtok"),
)


@dataclass
class Line:
    kind: str
    description: str
    amount: int
    model: str = ""
    token_class: str = ""
    price_id: int | None = None
    quantity: int = 0
    unit_price_per_mtok: int | None = None
    adjustment_ids: list[int] = field(default_factory=list)


@dataclass
class Computed:
    currency: str
    lines: list[Line]
    calls: int
    usage_amount: int
    adjustment_amount: int
    subtotal: int
    discount_ppm: int
    discount_amount: int
    tax_rate_ppm: int
    tax_amount: int
    total: int
    credits_applied: int
    amount_due_initial: int
    amount_due_initial_minor: int
    adjustment_ids: list[int]


def _usage_lines(org: Organization, start: datetime, end: datetime) -> tuple[list[Line], int, int]:
    groups = billed_usage_groups(org.pk, start, end, org.currency)
    prices = price_rows(g["price_id"] for g in groups if g["price_id"])
    org_ppm = discount_ppm_for(org.discount_rate)
    lines: list[Line] = []
    calls = usage = 0
    for g in groups:
        calls += g["n"]
        cost = int(g["cost"] or 0)
        usage += cost
        price = prices.get(g["price_id"]) if g["price_id"] is not None else None
        if price is None:
            if cost:  # unpriced calls cost 0; anything else is a price row deleted since
                lines.append(
                    Line(LineKind.USAGE, f"{g['model']} (price no longer listed)", cost, g["model"])
                )
            continue
        ppm = discount_for(price, org_ppm)
        tokens = [int(g[col] or 0) for _, col, _ in CLASSES]
        unit = [getattr(price, attr) for _, _, attr in CLASSES]
        amounts = allocate(cost, [t * u for t, u in zip(tokens, unit, strict=True)])
        for (klass, _, _), qty, price_mtok, amount in zip(
            CLASSES, tokens, unit, amounts, strict=True
        ):
            if qty == 0 and amount == 0:
                continue
            lines.append(
                Line(
                    LineKind.USAGE,
                    # Stored data: English whatever language the request that drafts it uses.
                    f"{g['model']} · {str(klass).replace('_', ' ')} tokens",
                    amount,
                    model=g["model"],
                    token_class=str(klass),
                    price_id=price.id,
                    quantity=qty,
                    unit_price_per_mtok=div_round(price_mtok * ppm, PPM),
                )
            )
    return lines, calls, usage


def _adjustment_lines(org: Organization, end: datetime) -> tuple[list[Line], int, list[int]]:
    by_run: dict[int, list] = {}
    for adj_id, run_id, delta in unbilled_adjustments(org.pk, org.currency, end):
        acc = by_run.setdefault(run_id, [0, []])
        acc[0] += delta
        acc[1].append(adj_id)
    reasons = rerate_reasons(by_run)
    lines, total, ids = [], 0, []
    for run_id, (delta, adj_ids) in sorted(by_run.items()):
        total += delta
        ids.extend(adj_ids)
        if delta == 0:
            continue
        reason = (reasons.get(run_id) or "").strip()[:150]
        lines.append(
            Line(
                LineKind.ADJUSTMENT,
                f"Re-rating adjustment #{run_id} ({len(adj_ids)} calls)"
                + (f": {reason}" if reason else ""),
                delta,
                quantity=len(adj_ids),
                adjustment_ids=adj_ids,
            )
        )
    return lines, total, ids


def compute_invoice(org: Organization, start: datetime, end: datetime) -> Computed:
    profile = BillingProfile.objects.filter(organization=org).first()
    discount_ppm = profile.invoice_discount_ppm if profile else 0
    tax_ppm = profile.tax_rate_ppm if profile else 0
    lines, calls, usage = _usage_lines(org, start, end)
    adj_lines, adjustments, adj_ids = _adjustment_lines(org, end)
    lines.extend(adj_lines)
    subtotal = usage + adjustments
    discount = div_round(subtotal * discount_ppm, PPM)
    if discount:
        lines.append(Line(LineKind.DISCOUNT, f"Discount {format_rate(discount_ppm)}", -discount))
    tax = div_round((subtotal - discount) * tax_ppm, PPM)
    if tax_ppm:
        lines.append(Line(LineKind.TAX, f"Tax {format_rate(tax_ppm)}", tax))
    total = subtotal - discount + tax
    # Prepaid organizations paid their usage from the balance, call batch by batch.
    credits = 0
    if org.billing_mode == BillingMode.PREPAID:
        credits = max(0, min(usage, total))
        if credits:
            lines.append(Line(LineKind.CREDITS, "Paid from the prepaid balance", -credits))
    due = total - credits
    return Computed(
        currency=org.currency,
        lines=lines,
        calls=calls,
        usage_amount=usage,
        adjustment_amount=adjustments,
        subtotal=subtotal,
        discount_ppm=discount_ppm,
        discount_amount=discount,
        tax_rate_ppm=tax_ppm,
        tax_amount=tax,
        total=total,
        credits_applied=credits,
        amount_due_initial=due,
        amount_due_initial_minor=to_minor(due, org.currency),
        adjustment_ids=adj_ids,
    )
