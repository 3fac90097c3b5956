from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from accounts import validators
from accounts.validators import normalize_ip_allowlist


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["10.0.0.7/8"], ["10.0.0.0/8"]),
        (["10.0.0.7"], ["10.0.0.7/32"]),
        (["192.168.1.0/24", " 192.168.1.0/24 "], ["192.168.1.0/24"]),
        (["2001:DB8::1"], ["2001:db8::1/128"]),
        (["2001:db8::1/32"], ["2001:db8::/32"]),
        (["::1", "fe80::/10"], ["::1/128", "fe80::/10"]),
        (["", "  ", "1.2.3.4"], ["1.2.3.4/32"]),
        ("10.0.0.1, 10.0.0.2\n2001:db8::/48", ["10.0.0.1/32", "10.0.0.2/32", "2001:db8::/48"]),
        ([], []),
        ("", []),
    ],
)
def test_normalize_ip_allowlist(entries, expected):
    assert normalize_ip_allowlist(entries) == expected


def test_normalize_keeps_input_order():
    assert normalize_ip_allowlist(["10.0.0.0/8", "1.1.1.1", "10.0.0.5/8"]) == [
        "10.0.0.0/8",
        "1.1.1.1/32",
    ]


def test_one_invalid_entry_is_named():
    with pytest.raises(ValueError, match="is not a valid IP address") as exc:
        normalize_ip_allowlist(["10.0.0.1", "10.0.0.300"])
    assert "'10.0.0.300'" in str(exc.value)
    assert "10.0.0.1'" not in str(exc.value)


def test_every_invalid_entry_is_named():
    with pytest.raises(ValueError, match="are not valid IP addresses") as exc:
        normalize_ip_allowlist(["nonsense", "1.2.3.4", "10.0.0.0/33", "2001:db8::zz"])
    message = str(exc.value)
    for bad in ("'nonsense'", "'10.0.0.0/33'", "'2001:db8::zz'"):
        assert bad in message
    assert "1.2.3.4" not in message


def test_too_many_entries():
    entries = [f"10.0.{i // 256}.{i % 256}" for i in range(validators.MAX_ALLOWLIST_ENTRIES + 1)]
    with pytest.raises(ValueError, match="At most 100"):
        normalize_ip_allowlist(entries)


def test_normalize_models():
    assert validators.normalize_models("gpt-4o, llama-3.1:70b  gpt-4o") == [
        "gpt-4o",
        "llama-3.1:70b",
    ]
    with pytest.raises(ValueError, match="not a valid model name"):
        validators.normalize_models(["ok", "bad name!"])


@pytest.mark.parametrize("value", [None, 0, 1, validators.MAX_SPEND_CAP])
def test_validate_cap_accepts(value):
    assert validators.validate_cap(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "cannot be negative"),
        (validators.MAX_SPEND_CAP + 1, "absurdly large"),
        (1.5, "whole number"),
        ("100", "whole number"),
        (True, "whole number"),
    ],
)
def test_validate_cap_rejects(value, message):
    with pytest.raises(ValueError, match=message):
        validators.validate_cap(value, "Daily cap")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "at least 1"),
        (-5, "at least 1"),
        (validators.MAX_RATE_LIMIT + 1, "cannot exceed"),
        (False, "whole number"),
        (2.0, "whole number"),
    ],
)
def test_validate_rate_rejects(value, message):
    with pytest.raises(ValueError, match=message):
        validators.validate_rate(value, "RPM")


def test_validate_rate_accepts():
    assert validators.validate_rate(None, "RPM") is None
    assert validators.validate_rate(60, "RPM") == 60


def test_validate_future():
    future = timezone.now() + timedelta(minutes=5)
    assert validators.validate_future(future) == future
    assert validators.validate_future(None) is None
    with pytest.raises(ValueError, match="must be in the future"):
        validators.validate_future(timezone.now() - timedelta(seconds=1))
    with pytest.raises(ValueError, match="needs a time zone"):
        validators.validate_future(datetime(2999, 1, 1))  # noqa: DTZ001
