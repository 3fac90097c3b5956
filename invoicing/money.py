"""Micro-units to the currency's minor unit, and the invoice arithmetic.

The one rounding rule: **round half away from zero** (for the non-negative
amounts on an invoice that is round half up, the same rule rating uses).

* Usage lines are exact sums of call costs (each call was rounded once, at
  ingest); see ``allocate`` for how a group's cost is split across the four
  token-class lines without losing or inventing a micro-unit.
* Discount and tax are computed in micro-units from the subtotal, each
  rounded once with ``div_round``.
* Only the amount due is converted to the minor unit (``to_minor``), once
  per invoice. A credit note's minor amount is the difference of the rounded
  running totals (``to_minor(credited_after) - to_minor(credited_before)``),
  so the credit notes of an invoice sum, in minor units, to the rounded sum
  of their micro amounts, and a full credit equals the amount due exactly.
"""

from __future__ import annotations

from decimal import Decimal

from console.kernel.money import minor_units


def div_round(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded half away from zero, in integers."""
    if denominator <= 0:
        raise ValueError("denominator must be positive")
    q, r = divmod(abs(numerator), denominator)
    if 2 * r >= denominator:
        q += 1
    return q if numerator >= 0 else -q


def minor_factor(currency: str) -> int:
    return 10 ** (6 - minor_units(currency))


def to_minor(micro: int, currency: str) -> int:
    """Micro-units to the currency's minor unit (cents for USD), half away from zero."""
    return div_round(micro, minor_factor(currency))


def from_minor(minor: int, currency: str) -> int:
    return minor * minor_factor(currency)


def minor_to_decimal(minor: int, currency: str) -> Decimal:
    """For display and CSV: ``1234`` USD cents → ``Decimal("12.34")``."""
    return Decimal(minor).scaleb(-minor_units(currency))


def micro_to_currency(micro: int, currency: str) -> Decimal:
    """Micro-units as currency units with the currency's decimals (half away from zero)."""
    return minor_to_decimal(to_minor(micro, currency), currency)


def allocate(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` into parts proportional to ``weights`` that sum to
    ``total`` exactly (largest remainder: every part gets the floor of its
    exact share, then the micro-units left over go one each to the parts
    with the largest remainders, ties to the earlier part).

    Why not rate each token class separately: a call's cost is rounded once,
    over all four classes, so per-class sums would drift from the call costs
    by up to half a micro-unit per call. Splitting the group's exact cost in
    proportion to each class's unrounded value (tokens x price) keeps the
    lines equal to the calls to the micro-unit, and each line within one
    micro-unit of tokens x price x discount summed over the group's rounding."""
    if total < 0:
        return [-p for p in allocate(-total, weights)]
    weight = sum(weights)
    if weight == 0:
        if total:
            raise ValueError("cannot allocate a non-zero amount over zero weights")
        return [0] * len(weights)
    parts = [total * w // weight for w in weights]
    left = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % weight), i))
    for i in order[:left]:
        parts[i] += 1
    return parts
