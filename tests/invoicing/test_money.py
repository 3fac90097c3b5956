"""Amounts said to people: exact decimals of the currency, never micro- or
minor units (``invoicing.money``)."""

from __future__ import annotations

from console.kernel.money import format_amount


def test_money_texts_are_exact_decimals_of_the_currency():
    assert format_amount(5_407_911, "USD", exact=True) == "5.407911 USD"
    assert format_amount(5_410_000, "USD", exact=True) == "5.41 USD"
    assert format_amount(1_234_500_000, "USD", exact=True) == "1,234.50 USD"
    assert format_amount(7_000_000, "JPY", exact=True) == "7 JPY"
    assert format_amount(468, "USD", unit="minor") == "4.68 USD"
    assert format_amount(468, "JPY", unit="minor") == "468 JPY"
