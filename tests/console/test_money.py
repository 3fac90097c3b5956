from __future__ import annotations

from decimal import Decimal

import pytest

from console.money import MICRO, format_amount, micro_to_decimal, minor_units, parse_amount


@pytest.mark.parametrize(
    ("text", "micro"),
    [
        ("12.5", 12_500_000),
        ("25", 25_000_000),
        (" 0.000001 ", 1),
        ("1,234.56", 1_234_560_000),
        ("1_000", 1_000_000_000),
        ("-3.25", -3_250_000),
        ("0", 0),
        (7, 7_000_000),
        (Decimal("0.123456"), 123_456),
        ("1E+2", 100_000_000),
    ],
)
def test_parse_amount(text, micro):
    result = parse_amount(text)
    assert result == micro
    assert isinstance(result, int)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "is not an amount"),
        ("", "is not an amount"),
        ("1.0000001", "at most six decimal places"),
        ("NaN", "finite"),
        ("Infinity", "finite"),
        (True, "Enter an amount"),
    ],
)
def test_parse_amount_rejects(text, message):
    with pytest.raises(ValueError, match=message):
        parse_amount(text)


def test_no_float_drift():
    assert parse_amount("0.1") + parse_amount("0.2") == parse_amount("0.3")


@pytest.mark.parametrize(
    ("micro", "currency", "places", "expected"),
    [
        (1_234_567_890, "USD", None, "1,234.57 USD"),
        (5_000, "usd", None, "0.01 USD"),  # half up
        (4_999, "USD", None, "0.00 USD"),
        (1_500_000, "JPY", None, "2 JPY"),
        (1_234_567, "BHD", None, "1.235 BHD"),
        (1_234_567, "USD", 6, "1.234567 USD"),
        (0, "EUR", None, "0.00 EUR"),
        (-2_505_000, "USD", None, "-2.51 USD"),
        (None, "USD", None, "—"),
    ],
)
def test_format_amount(micro, currency, places, expected):
    assert format_amount(micro, currency, places=places) == expected


def test_helpers():
    assert MICRO == 1_000_000
    assert micro_to_decimal(1_500_000) == Decimal("1.5")
    assert minor_units("jpy") == 0
    assert minor_units("KWD") == 3
    assert minor_units("EUR") == 2
