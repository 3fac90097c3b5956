"""Display helpers for usage pages."""

from __future__ import annotations

from django import template

from console.money import MICRO, format_amount, minor_units

register = template.Library()


@register.simple_tag
def exact_money(micro: int | None, currency: str) -> str:
    """An amount with as many decimals as it needs (at least the currency's,
    at most six): a call's cost is often a fraction of a cent, and rounding
    it to cents would show most calls as free."""
    if micro is None:
        return "—"
    places = minor_units(currency)
    while places < 6 and micro * 10**places % MICRO:
        places += 1
    return format_amount(micro, currency, places=places)


@register.filter
def us_to_ms(us: int | None) -> str:
    """Microseconds as milliseconds with one decimal (``12.3``), or a dash."""
    if us is None:
        return "—"
    tenths, rest = divmod(us, 100)
    tenths += rest >= 50  # round half up, in integers
    return f"{tenths // 10:,}.{tenths % 10}"


@register.simple_tag
def query_with(params: dict, **changes) -> str:
    """The filter query string with ``changes`` applied (``None`` drops a key)."""
    from urllib.parse import urlencode

    merged = {**params}
    for key, value in changes.items():
        if value in (None, ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    return urlencode(merged)
