"""Money is an integer count of micro-units of a currency (1 USD = 1,000,000).
This module is the edge: parse what a person typed, format for display.
``Decimal`` only, never ``float``."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

MICRO = 1_000_000
_MICRO_D = Decimal(MICRO)
# ISO 4217 minor units for currencies that differ from 2.
_MINOR_UNITS = {"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "BHD": 3, "KWD": 3, "JOD": 3}
CURRENCY_CODES = (
    "USD", "EUR", "GBP", "JPY", "CNY", "CHF", "CAD", "AUD", "SGD", "HKD", "INR", "KRW",
    "BRL", "SEK", "NOK", "DKK", "PLN", "NZD", "MXN", "ZAR",
)  # fmt: skip


def minor_units(currency: str) -> int:
    return _MINOR_UNITS.get(currency.upper(), 2)


def parse_amount(text: str | int | Decimal) -> int:
    """``"12.5"`` → 12_500_000 micro-units. More than six decimals is an error,
    not a silent rounding."""
    if isinstance(text, bool):
        raise ValueError("Enter an amount such as 25 or 12.50.")
    try:
        value = Decimal(str(text).strip().replace(",", "").replace("_", ""))
    except InvalidOperation:
        raise ValueError(
            f"'{text}' is not an amount; enter a number such as 25 or 12.50."
        ) from None
    if not value.is_finite():
        raise ValueError("Enter a finite amount.")
    micro = value * _MICRO_D
    if micro != micro.to_integral_value():
        raise ValueError("Amounts have at most six decimal places.")
    return int(micro)


def micro_to_decimal(micro: int) -> Decimal:
    return Decimal(micro) / _MICRO_D


def format_amount(micro: int | None, currency: str = "USD", *, places: int | None = None) -> str:
    """Display form, rounded half up to the currency's minor unit unless
    ``places`` asks for more (prices per million tokens want more)."""
    if micro is None:
        return "—"
    digits = minor_units(currency) if places is None else places
    quantum = Decimal(1).scaleb(-digits)
    value = micro_to_decimal(micro).quantize(quantum, rounding=ROUND_HALF_UP)
    return f"{value:,} {currency.upper()}"


def format_exact(micro: int | None, currency: str) -> str:
    """An amount with as many decimals as it needs (at least the currency's,
    at most six): a call's cost is often a fraction of a cent, and rounding
    it to cents would show most calls as free."""
    if micro is None:
        return "—"
    places = minor_units(currency)
    while places < 6 and micro * 10**places % MICRO:
        places += 1
    return format_amount(micro, currency, places=places)
