"""Money for people: the one module that parses amounts people type and
formats amounts people read, on every page, chart, table, CSV header, PDF,
audit entry, e-mail and gateway message.

Money is an integer count of micro-units of a currency (1 USD = 1,000,000).
``Decimal`` only, never ``float``.

The display rules:

* ``format_amount``: the currency's minor units (ISO 4217, as Babel's CLDR
  data has them: 2 for USD, 0 for JPY and KRW, 3 for BHD and KWD), rounded
  **half up** (half away from zero: the project's one rounding rule, see
  ``invoicing/money.py``), the locale's digit grouping, and the ISO code
  after the amount: ``"1,234.56 USD"``, ``"1,235 JPY"``, ``"1.235 BHD"``.
  A non-zero amount too small to show is ``"< 0.01 USD"``, never a
  misleading ``"0.00 USD"``. Never scientific notation, never a raw count of
  micro-units.
  ``exact=True``: as many decimals as the amount needs (at least the
  currency's, at most six), only where a user asks for exact figures (a
  call's cost, CSV exports, limit refusals that name the very amount).
  ``unit="minor"``: an amount held in the currency's minor unit (cents).
  ``small=True``: the small-amount form, for analytics tables and chart
  hover labels, where many amounts are fractions of a cent and must be told
  apart: the same text, except that a non-zero amount that would round to
  zero shows two significant digits (at most six decimals) instead of
  ``"< 0.01 USD"``: ``"0.0042 USD"``, ``"0.000031 USD"``, ``"-0.0047 USD"``.
* ``format_rate``: a rate stored in parts per million as a percentage
  (``190_000`` → ``"19 %"``, ``75_000`` → ``"7.5 %"``).
* ``money_decimal``: the same two roundings (``exact``) as ``Decimal``
  values, for CSV cells and chart data; ``chart_tickformat``
  gives a chart axis or hover label the currency's decimals.

``locale`` (``"en"``, ``"de_DE"``, ``"zh_Hans_CN"``…) chooses the digit
grouping and decimal sign; by default it is Django's active language
(``"en"`` when none is active). Nothing is translated here.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import lru_cache
from typing import Literal

from babel import Locale, UnknownLocaleError
from babel.numbers import NumberPattern, get_currency_precision, parse_pattern
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import get_language, to_locale

MICRO = 1_000_000
MICRO_PLACES = 6
PPM = 1_000_000  # parts per million: a rate's whole (1 = 100 %)
_MICRO_D = Decimal(MICRO)
CURRENCY_CODES = (
    "USD", "EUR", "GBP", "JPY", "CNY", "CHF", "CAD", "AUD", "SGD", "HKD", "INR", "KRW",
    "BRL", "SEK", "NOK", "DKK", "PLN", "NZD", "MXN", "ZAR",
)  # fmt: skip
DEFAULT_LOCALE = "en"
NONE_TEXT = "—"


# --- currencies and locales -----------------------------------------------------------


@lru_cache(maxsize=256)
def minor_units(currency: str) -> int:
    """The currency's number of decimals (ISO 4217 minor unit, from Babel's
    CLDR data; 2 for a code it does not know)."""
    return get_currency_precision(currency.upper())


@lru_cache(maxsize=64)
def _locale(name: str) -> Locale:
    try:
        return Locale.parse(name.replace("-", "_"))
    except (UnknownLocaleError, ValueError, TypeError):
        return Locale.parse(DEFAULT_LOCALE)


def current_locale() -> str:
    """Django's active language as a Babel locale name (``"en-us"`` →
    ``"en_US"``), or ``"en"`` outside a request or without a language."""
    try:
        language = get_language()
    except ImproperlyConfigured:  # no Django settings: a plain script
        return DEFAULT_LOCALE
    return to_locale(language) if language else DEFAULT_LOCALE


@lru_cache(maxsize=256)
def _pattern(locale: str, places: int) -> NumberPattern:
    """The locale's decimal pattern with exactly ``places`` fraction digits."""
    base = _locale(locale).decimal_formats[None]
    pattern = parse_pattern(base.pattern)
    pattern.frac_prec = (places, places)
    return pattern


def _number(value: Decimal, places: int, locale: str | None) -> str:
    """``value`` (already rounded to ``places``) with the locale's grouping
    and signs, plain digits, never an exponent."""
    name = locale or current_locale()
    return _pattern(name, places).apply(value, _locale(name))


# --- parsing ------------------------------------------------------------------------------


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


# --- values -------------------------------------------------------------------------------


def micro_to_decimal(micro: int) -> Decimal:
    """Micro-units as an exact ``Decimal`` of currency units (no rounding)."""
    return Decimal(micro) / _MICRO_D


def _round(micro: int | Decimal, places: int) -> Decimal:
    return (
        Decimal(micro)
        .scaleb(-MICRO_PLACES)
        .quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    )


def money_decimal(micro: int, currency: str, *, exact: bool = False) -> Decimal:
    """Micro-units rounded half up to the currency's minor unit:
    ``Decimal("12.35")`` (USD), ``Decimal("1235")`` (JPY); ``exact``: with as
    many decimals as it needs, at least the currency's (``Decimal("5.407911")``,
    ``Decimal("5.41")``). For CSV cells and chart data; ``str()`` of it is
    never in scientific notation."""
    places = exact_places(micro, currency) if exact else minor_units(currency)
    return _round(micro, places)


def exact_places(micro: int, currency: str) -> int:
    """How many decimals ``micro`` needs to be exact: at least the currency's,
    at most six."""
    places = minor_units(currency)
    while places < MICRO_PLACES and micro * 10**places % MICRO:
        places += 1
    return places


def small_places(micro: int) -> int:
    """How many decimals show ``micro``'s first two significant digits (at
    most six): 4_200 → 4 (``0.0042``), 31 → 6 (``0.000031``)."""
    places = 0
    while places < MICRO_PLACES and abs(micro) * 10**places < 10 * MICRO:
        places += 1
    return places


# --- text ---------------------------------------------------------------------------------


def format_amount(
    amount: int | None,
    currency: str = "USD",
    *,
    unit: Literal["micro", "minor"] = "micro",
    exact: bool = False,
    small: bool = False,
    places: int | None = None,
    locale: str | None = None,
) -> str:
    """The display form of ``amount`` (micro-units; ``unit="minor"``: the
    currency's minor unit, cents for USD): rounded half up to the currency's
    minor unit (or to ``places``, for prices per million tokens), the
    locale's grouping, the code after the amount. A non-zero amount that
    would show as zero shows as ``"< 0.01 USD"`` (``"> -0.01 USD"`` when
    negative).

    ``exact``: with as many decimals as the amount needs (at least the
    currency's, at most six): a call's cost is often a fraction of a cent,
    and rounding it to cents would show most calls as free. Only where a
    user asks for exact figures (call detail, exports, a limit that names
    its amount).

    ``small``: a non-zero amount that would show as zero keeps two
    significant digits instead (``"0.0042 USD"``, at most six decimals):
    analytics tables and hover labels, where fractions of a cent are told
    apart."""
    if amount is None:
        return NONE_TEXT
    code = currency.upper()
    if unit == "minor":
        digits = minor_units(code)
        return f"{_number(Decimal(int(amount)).scaleb(-digits), digits, locale)} {code}"
    if exact:
        digits = exact_places(amount, currency)
    else:
        digits = minor_units(code) if places is None else places
    value = _round(amount, digits)
    if amount and not value and small:
        digits = small_places(amount)
        value = _round(amount, digits)
    if amount and not value:
        smallest = _number(Decimal(1).scaleb(-digits), digits, locale)
        return f"< {smallest} {code}" if amount > 0 else f"> -{smallest} {code}"
    return f"{_number(value, digits, locale)} {code}"


def rate_decimal(ppm: int) -> Decimal:
    """A rate in parts per million as an exact percentage: ``75_000`` → ``7.5``."""
    value = Decimal(int(ppm)).scaleb(-4).normalize()
    return value.quantize(Decimal(1)) if value == value.to_integral_value() else value


def format_rate(ppm: int | None, *, locale: str | None = None) -> str:
    """A rate stored in ppm (tax, discount) as a percentage:
    ``190_000`` → ``"19 %"``, ``75_000`` → ``"7.5 %"``."""
    if ppm is None:
        return NONE_TEXT
    value = rate_decimal(ppm)
    places = max(0, -int(value.as_tuple().exponent))  # finite: the exponent is a number
    return f"{_number(value, places, locale)} %"


def chart_tickformat(currency: str) -> str:
    """A d3 number format for chart axes and hover labels with the
    currency's decimals (``",.2f"`` for USD, ``",.0f"`` for JPY)."""
    return f",.{minor_units(currency)}f"


def money_header(label: str, currency: str) -> str:
    """A table or CSV column header that names the currency:
    ``"Total (USD)"``."""
    return f"{label} ({currency.upper()})"


def amount_input(micro: int | None) -> str:
    """An amount as a form field shows it for editing: plain digits, no
    grouping, no trailing zeros, never an exponent (a cap of 100 is ``"100"``,
    not ``"1E+2"``); ``parse_amount`` reads it back exactly."""
    if micro is None:
        return ""
    return format(micro_to_decimal(int(micro)).normalize(), "f")


# --- amounts recorded in event parameters (audit log, invoice history) ---------------------
# Audit entries and invoice events keep the numbers a service recorded, in
# the units the code holds them. Which unit a parameter is in is said by its
# name, one rule for every reader: ``*_minor`` is in the currency's minor unit
# (cents), ``*_ppm`` a rate in parts per million, and the names below are
# micro-units. A ``currency`` parameter, when recorded, names the currency;
# otherwise it is the organization's (or the invoice's).

MICRO_PARAMS = frozenset(
    {
        "amount",
        "total",
        "subtotal",
        "balance",
        "threshold",
        "low_balance_threshold",
        "spend_cap_daily",
        "spend_cap_monthly",
        "spend_cap_lifetime",
    }
)


def _param_value(name: str, value, currency: str) -> str:
    if isinstance(value, list | tuple):
        return " → ".join(_param_value(name, v, currency) for v in value)
    if value is None:
        return NONE_TEXT
    is_number = isinstance(value, int) and not isinstance(value, bool)
    if is_number and name.endswith("_minor"):
        return format_amount(value, currency, unit="minor")
    if is_number and name.endswith("_ppm"):
        return format_rate(value)
    if is_number and name in MICRO_PARAMS:
        return format_amount(value, currency)
    return str(value)


def param_texts(params: dict | None, currency: str) -> list[tuple[str, str]]:
    """Recorded parameters as ``(label, text)`` for people: amounts in the
    currency (``{"total": 14293328}`` → ``("total", "14.29 USD")``,
    ``{"amount_minor": 468}`` → ``("amount", "4.68 USD")``), rates as
    percentages, a change ``[old, new]`` as ``"old → new"``."""
    if not params:
        return []
    recorded = params.get("currency")
    code = recorded if isinstance(recorded, str) and len(recorded) == 3 else currency
    out = []
    for name, value in params.items():
        label = name.removesuffix("_minor").removesuffix("_ppm")
        out.append((label, _param_value(name, value, code)))
    return out
