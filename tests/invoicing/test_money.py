"""Amounts said to people: exact decimals of the currency, never micro- or
minor units (``invoicing.money``)."""

from __future__ import annotations


def test_money_texts_are_exact_decimals_of_the_currency():
    from invoicing.money import micro_text, minor_text

    assert micro_text(5_407_911, "USD") == "5.407911 USD"
    assert micro_text(5_410_000, "USD") == "5.41 USD"
    assert micro_text(1_234_500_000, "USD") == "1,234.50 USD"
    assert micro_text(7_000_000, "JPY") == "7 JPY"
    assert minor_text(468, "USD") == "4.68 USD"
    assert minor_text(468, "JPY") == "468 JPY"
