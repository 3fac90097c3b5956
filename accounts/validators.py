"""Validation and normalization of the restrictions a key or sub-account
carries. Each returns the normalized value or raises ``ValueError`` with a
message a person can act on."""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from console.kernel import ipnet

# Caps above this (one billion currency units, in micro-units) are a typo.
MAX_SPEND_CAP = 10**15
MAX_RATE_LIMIT = 10_000_000
MAX_TOKENS_PER_MINUTE = 10**10
MAX_ALLOWLIST_ENTRIES = 100
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")


def normalize_ip_allowlist(entries: list[str] | str) -> list[str]:
    """Parse IPv4/IPv6 addresses and CIDR ranges; return them normalized
    (``10.0.0.7/8`` → ``10.0.0.0/8``, single addresses as /32 or /128),
    de-duplicated, in input order (``console.kernel.ipnet.validate``). The problems
    a person can fix are worded here, in the page's language."""
    items = ipnet.split(entries) if isinstance(entries, str) else list(entries)
    if len(items) > MAX_ALLOWLIST_ENTRIES:
        raise ValueError(
            _("At most %(n)d IP allowlist entries are allowed.") % {"n": MAX_ALLOWLIST_ENTRIES}
        )
    bad = []
    for raw in items:
        entry = str(raw).strip()
        if not entry:
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            bad.append(entry)
    if bad:
        raise ValueError(
            ngettext(
                "%(entries)s is not a valid IP address or CIDR range.",
                "%(entries)s are not valid IP addresses or CIDR ranges.",
                len(bad),
            )
            % {"entries": ", ".join(f"'{b}'" for b in bad)}
        )
    return ipnet.validate(items, max_entries=MAX_ALLOWLIST_ENTRIES)


def normalize_models(models: list[str] | str) -> list[str]:
    if isinstance(models, str):
        models = [m for m in re.split(r"[\s,]+", models) if m]
    out: list[str] = []
    for raw in models:
        name = str(raw).strip()
        if not name:
            continue
        if not MODEL_NAME_RE.match(name):
            raise ValueError(_("'%(name)s' is not a valid model name.") % {"name": name[:60]})
        if name not in out:
            out.append(name)
    return out


def validate_cap(value: int | None, label: str | None = None) -> int | None:
    if value is None:
        return None
    label = label or _("Spend cap")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(_("%(label)s must be a whole number of micro-units.") % {"label": label})
    if value < 0:
        raise ValueError(_("%(label)s cannot be negative.") % {"label": label})
    if value > MAX_SPEND_CAP:
        raise ValueError(
            _("%(label)s is absurdly large (over %(max)s units).")
            % {"label": label, "max": f"{MAX_SPEND_CAP // 10**6:,}"}
        )
    return value


def validate_rate(value: int | None, label: str, maximum: int = MAX_RATE_LIMIT) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(_("%(label)s must be a whole number.") % {"label": label})
    if value < 1:
        raise ValueError(
            _("%(label)s must be at least 1 (leave it empty for no limit).") % {"label": label}
        )
    if value > maximum:
        raise ValueError(
            _("%(label)s cannot exceed %(max)s.") % {"label": label, "max": f"{maximum:,}"}
        )
    return value


def validate_future(value: datetime | None, label: str | None = None) -> datetime | None:
    if value is None:
        return None
    label = label or _("Expiry")
    if timezone.is_naive(value):
        raise ValueError(_("%(label)s needs a time zone.") % {"label": label})
    if value <= timezone.now():
        raise ValueError(_("%(label)s must be in the future.") % {"label": label})
    return value


# Cost-attribution tags (``x-gateway-tags``): the tag-key rule. It lives here,
# in the lowest app, because a key's and a sub-account's ``required_tag_keys``
# are validated with it; ``usage.attribution_rules`` (the header parser, the value
# and end-user rules) re-exports it, so it is spelled once.
MAX_TAGS = 10
MAX_TAG_KEY = 32
TAG_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,%d}\Z" % MAX_TAG_KEY)  # noqa: UP031 - a regex


def is_tag_key(key: object) -> bool:
    """Whether ``key`` is a valid tag key: 1 to 32 of A-Z a-z 0-9 _ . - (case kept)."""
    return isinstance(key, str) and TAG_KEY_RE.fullmatch(key) is not None


def normalize_tag_keys(keys: list[str] | str) -> list[str]:
    """Required tag keys from a list or a comma/space separated string:
    stripped, de-duplicated in input order, each a valid tag key, at most
    ``MAX_TAGS`` of them (a call carries no more tags than that)."""
    if isinstance(keys, str):
        keys = re.split(r"[\s,]+", keys)
    elif not isinstance(keys, (list, tuple)):
        raise ValueError(_("Required tag keys must be a list of tag keys."))
    out: list[str] = []
    bad: list[str] = []
    for raw in keys:
        if not isinstance(raw, str):
            bad.append(str(raw)[:40])
            continue
        key = raw.strip()
        if not key:
            continue
        if not is_tag_key(key):
            bad.append(key[:40])
        elif key not in out:
            out.append(key)
    if bad:
        raise ValueError(
            ngettext(
                "%(keys)s is not a valid tag key: use 1 to %(n)d letters, digits, '_', '.' or '-'.",
                "%(keys)s are not valid tag keys: use 1 to %(n)d letters, digits, '_', '.' or '-'.",
                len(bad),
            )
            % {"keys": ", ".join(f"'{b}'" for b in bad), "n": MAX_TAG_KEY}
        )
    if len(out) > MAX_TAGS:
        raise ValueError(_("At most %(n)d required tag keys are allowed.") % {"n": MAX_TAGS})
    return out
