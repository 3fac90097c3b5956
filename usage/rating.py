"""Rating: the one function that turns a call's tokens into money.

The rule, applied once per call at ingest (and again only by an explicit
re-rating):

    cost = round_half_up(
        (input*p_in + cache_read*p_cr + cache_write*p_cw + output*p_out) * discount_ppm
        / (10^6 tokens per Mtok * 10^6 ppm)
    )

Prices ``p_*`` are integer micro-units per million tokens; the result is
integer micro-units of the price's currency. Only integers are used, so the
result is exact and the same on every machine. ``discount_ppm`` is the share
of the price the organization pays, in parts per million:
``organization.discount_rate * 10^6`` (exact: the rate has six decimals) for
list prices, and exactly 10^6 for a negotiated per-organization price, which
already is what the organization pays. Reasoning tokens are part of
``output`` and are never added a second time. Halves round up (all terms
are non-negative, so "up" and "away from zero" agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple, Protocol

from console.kernel.money import PPM

TOKENS_PER_MTOK = 1_000_000
_DIVISOR = TOKENS_PER_MTOK * PPM
_HALF = _DIVISOR // 2


class TokenCounts(NamedTuple):
    input: int
    cache_read: int
    cache_write: int
    output: int


@dataclass(frozen=True, slots=True)
class PriceRow:
    """A price-book row: micro-units per million tokens of each class."""

    id: int
    model: str
    currency: str
    organization_id: int | None
    input_per_mtok: int
    cache_read_per_mtok: int
    cache_write_per_mtok: int
    output_per_mtok: int
    effective_from: datetime

    @property
    def is_override(self) -> bool:
        return self.organization_id is not None


def rate(
    tokens: TokenCounts | tuple[int, int, int, int], price: PriceRow, discount_ppm: int
) -> int:
    """Cost of one call in integer micro-units (see the module docstring)."""
    inp, cache_read, cache_write, out = tokens
    if inp < 0 or cache_read < 0 or cache_write < 0 or out < 0 or discount_ppm < 0:
        raise ValueError("token counts and the discount cannot be negative")
    numerator = (
        inp * price.input_per_mtok
        + cache_read * price.cache_read_per_mtok
        + cache_write * price.cache_write_per_mtok
        + out * price.output_per_mtok
    ) * discount_ppm
    return (numerator + _HALF) // _DIVISOR


def discount_ppm_for(discount_rate: Decimal | str | int) -> int:
    """``discount_rate`` (six decimals, 1 = list price) as parts per million, exactly."""
    ppm = Decimal(discount_rate) * PPM
    if ppm != ppm.to_integral_value():
        raise ValueError(f"discount rate {discount_rate} has more than six decimals")
    return int(ppm)


class _PriceOwner(Protocol):
    organization_id: int | None


def discount_for(price: PriceRow | _PriceOwner, org_discount_ppm: int) -> int:
    """The one discount rule: the ``discount_ppm`` to ``rate`` a call at.

    A negotiated price (a row of one organization) is what the organization
    pays, so it pays full (``PPM``); a list price gets the organization's
    discount (``discount_ppm_for(organization.discount_rate)``). ``price`` is
    a ``PriceRow`` or a ``Price`` model row. Admission, ingest, re-rating and
    invoices all ask this function."""
    return PPM if price.organization_id is not None else org_discount_ppm
