from __future__ import annotations

from decimal import Decimal

import pytest

from console.kernel.money import (
    MICRO,
    amount_input,
    chart_tickformat,
    format_amount,
    format_rate,
    micro_to_decimal,
    minor_units,
    money_decimal,
    money_header,
    param_texts,
    parse_amount,
)


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
        (4_999, "USD", None, "< 0.01 USD"),  # spent, but less than a cent
        (1, "JPY", None, "< 1 JPY"),
        (-1, "USD", None, "> -0.01 USD"),
        (1_234_567_890, "JPY", None, "1,235 JPY"),
        (1_234_500_000, "KRW", None, "1,235 KRW"),  # half up, not to even
        (1_234_567, "KWD", None, "1.235 KWD"),
        (100_000_000, "USD", None, "100.00 USD"),
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


def test_minor_units_come_from_iso_4217():
    assert [minor_units(c) for c in ("USD", "JPY", "KRW", "BHD", "KWD", "CNY")] == [
        2,
        0,
        0,
        3,
        3,
        2,
    ]


def test_an_amount_typed_in_scientific_notation_prints_in_plain_digits():
    cap = parse_amount("1E+2")
    assert format_amount(cap, "USD") == "100.00 USD"
    assert format_amount(cap, "USD", exact=True) == "100.00 USD"
    assert str(money_decimal(cap, "USD")) == "100.00"
    assert str(money_decimal(parse_amount("1E+3"), "JPY")) == "1000"
    assert "E" not in format_amount(10**18, "USD")


@pytest.mark.parametrize(
    ("micro", "currency", "expected"),
    [
        (5_407_911, "USD", "5.407911 USD"),
        (5_410_000, "USD", "5.41 USD"),
        (1_234_500_000, "USD", "1,234.50 USD"),
        (7_000_000, "JPY", "7 JPY"),
        (1_500_000, "JPY", "1.5 JPY"),
        (14_293_328, "BHD", "14.293328 BHD"),
        (1, "USD", "0.000001 USD"),
        (0, "KWD", "0.000 KWD"),
        (None, "USD", "—"),
    ],
)
def test_format_exact_shows_what_the_amount_needs(micro, currency, expected):
    assert format_amount(micro, currency, exact=True) == expected


def test_decimals_for_exports_and_charts():
    assert money_decimal(14_293_328, "USD") == Decimal("14.29")
    assert str(money_decimal(2_500_000, "JPY")) == "3"  # half up
    assert str(money_decimal(14_293_328, "BHD")) == "14.293"
    assert str(money_decimal(14_293_328, "USD", exact=True)) == "14.293328"
    assert str(money_decimal(14_000_000, "USD", exact=True)) == "14.00"
    assert chart_tickformat("USD") == ",.2f"
    assert chart_tickformat("JPY") == ",.0f"
    assert chart_tickformat("BHD") == ",.3f"
    assert money_header("Total", "jpy") == "Total (JPY)"


def test_minor_amounts():
    assert format_amount(123_456, "USD", unit="minor") == "1,234.56 USD"
    assert format_amount(123_456, "JPY", unit="minor") == "123,456 JPY"
    assert format_amount(123_456, "BHD", unit="minor") == "123.456 BHD"


@pytest.mark.parametrize(
    ("ppm", "expected"),
    [
        (190_000, "19 %"),
        (75_000, "7.5 %"),
        (1_000_000, "100 %"),
        (0, "0 %"),
        (125, "0.0125 %"),
        (None, "—"),
    ],
)
def test_rates_in_ppm_show_as_percentages(ppm, expected):
    assert format_rate(ppm) == expected


def test_the_locale_chooses_grouping_and_decimal_sign_not_the_decimals():
    assert format_amount(1_234_567_890, "EUR", locale="de_DE") == "1.234,57 EUR"
    assert format_amount(1_234_567_890, "JPY", locale="de_DE") == "1.235 JPY"
    assert format_amount(1_234_567_890, "CNY", locale="zh_Hans_CN") == "1,234.57 CNY"
    assert format_rate(75_000, locale="de") == "7,5 %"
    assert format_amount(1_000, "USD", locale="zz-unknown") == "< 0.01 USD"


def test_the_locale_defaults_to_the_active_language():
    from django.utils import translation

    with translation.override("de"):
        assert format_amount(1_234_567_890, "EUR") == "1.234,57 EUR"
    with translation.override(None):
        assert format_amount(1_234_567_890, "EUR") == "1,234.57 EUR"
    assert format_amount(1_234_567_890, "EUR") == "1,234.57 EUR"


@pytest.mark.parametrize(
    ("micro", "text"),
    [(100_000_000, "100"), (12_345_678, "12.345678"), (1, "0.000001"), (0, "0"), (None, "")],
)
def test_a_cap_is_edited_in_plain_digits_and_reads_back_exactly(micro, text):
    assert amount_input(micro) == text
    if micro is not None:
        assert parse_amount(text) == micro


def test_recorded_parameters_name_amounts_in_the_currency():
    # Given what services record: micro-units, minor units, ppm, changes, plain values
    params = {
        "total": 14_293_328,
        "amount_minor": 468,
        "spend_cap_daily": [None, 100_000_000],
        "tax_rate_ppm": 190_000,
        "reference": "wire-42",
        "calls": 14_293_328,  # not money: left as it is
        "replaced": True,
    }
    # Then a person reads money, rates and changes
    assert param_texts(params, "USD") == [
        ("total", "14.29 USD"),
        ("amount", "4.68 USD"),
        ("spend_cap_daily", "— → 100.00 USD"),
        ("tax_rate", "19 %"),
        ("reference", "wire-42"),
        ("calls", "14293328"),
        ("replaced", "True"),
    ]
    assert param_texts({"total": 14_293_328}, "JPY") == [("total", "14 JPY")]
    assert param_texts({"amount_minor": 12_345}, "BHD") == [("amount", "12.345 BHD")]
    # A currency recorded with the amounts wins over the organization's.
    assert param_texts({"amount_minor": 500, "currency": "JPY"}, "USD") == [
        ("amount", "500 JPY"),
        ("currency", "JPY"),
    ]
    assert param_texts(None, "USD") == []
