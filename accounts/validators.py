"""Validation and normalization of the restrictions a key or sub-account
carries. Each returns the normalized value or raises ``ValueError`` with a
message a person can act on."""

from __future__ import annotations

import re
from datetime import datetime

from django.utils import timezone

from console import ipnet

# Caps above this (one billion currency units, in micro-units) are a typo.
MAX_SPEND_CAP = 10**15
MAX_RATE_LIMIT = 10_000_000
MAX_TOKENS_PER_MINUTE = 10**10
MAX_ALLOWLIST_ENTRIES = 100
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")


def normalize_ip_allowlist(entries: list[str] | str) -> list[str]:
    """Parse IPv4/IPv6 addresses and CIDR ranges; return them normalized
    (``10.0.0.7/8`` → ``10.0.0.0/8``, single addresses as /32 or /128),
    de-duplicated, in input order (``console.ipnet.validate``)."""
    return ipnet.validate(entries, max_entries=MAX_ALLOWLIST_ENTRIES)


def normalize_models(models: list[str] | str) -> list[str]:
    if isinstance(models, str):
        models = [m for m in re.split(r"[\s,]+", models) if m]
    out: list[str] = []
    for raw in models:
        name = str(raw).strip()
        if not name:
            continue
        if not MODEL_NAME_RE.match(name):
            raise ValueError(f"'{name[:60]}' is not a valid model name.")
        if name not in out:
            out.append(name)
    return out


def validate_cap(value: int | None, label: str = "Spend cap") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{label} must be a whole number of micro-units.")
    if value < 0:
        raise ValueError(f"{label} cannot be negative.")
    if value > MAX_SPEND_CAP:
        raise ValueError(f"{label} is absurdly large (over {MAX_SPEND_CAP // 10**6:,} units).")
    return value


def validate_rate(value: int | None, label: str, maximum: int = MAX_RATE_LIMIT) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{label} must be a whole number.")
    if value < 1:
        raise ValueError(f"{label} must be at least 1 (leave it empty for no limit).")
    if value > maximum:
        raise ValueError(f"{label} cannot exceed {maximum:,}.")
    return value


def validate_future(value: datetime | None, label: str = "Expiry") -> datetime | None:
    if value is None:
        return None
    if timezone.is_naive(value):
        raise ValueError(f"{label} needs a time zone.")
    if value <= timezone.now():
        raise ValueError(f"{label} must be in the future.")
    return value
