"""A key's ceiling: the limits a key manager set, which the key's owner
without ``KEYS_MANAGE_ALL`` (a developer) may tighten but not loosen or
clear, and the organization's cap on developers' keys (monthly spend).

``check_ceiling`` refuses an owner's change beyond them; ``ceiling_after``
is the ceiling a key keeps after someone set its limits."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils.translation import gettext as _

from accounts.actors import Actor
from accounts.models import ApiKey, Organization
from accounts.permissions import Perm
from accounts.services._common import CAP_FIELDS, LIMIT_FIELDS, RATE_FIELDS, FieldErrors
from console.kernel.money import format_amount

# The limits a key manager's setting makes a ceiling for the key's owner.
CEILING_FIELDS = (*LIMIT_FIELDS, "ip_allowlist", "expires_at")


def manages_all_keys(actor: Actor) -> bool:
    return actor.can(Perm.KEYS_MANAGE_ALL)


def _ceiling_value(field: str, value: Any) -> Any:
    """A limit as the ceiling stores it (JSON); None when it restricts nothing."""
    if value in (None, [], ""):
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    return list(value) if isinstance(value, (list, tuple)) else value


def _within_networks(entry: str, ceiling: list[str]) -> bool:
    try:
        net = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    for allowed in ceiling:
        try:
            outer = ipaddress.ip_network(allowed, strict=False)
        except ValueError:
            continue
        if outer.version == net.version and net.subnet_of(outer):  # type: ignore[arg-type]  # same version
            return True
    return False


def developer_cap(actor: Actor) -> int | None:
    """The organization's cap on developers' keys, read now (not from the
    actor's possibly older copy of the organization)."""
    return (
        Organization.objects.filter(pk=actor.organization_id)
        .values_list("developer_key_cap", flat=True)
        .first()
    )


def _cap_breach(actor: Actor, limit: int, new: int | None, *, by_admin: bool) -> str | None:
    if new is not None and new <= limit:
        return None
    message = (
        _("Capped at %(cap)s by an admin: you may lower it, not raise or remove it.")
        if by_admin
        else _("Capped at %(cap)s by your organization: you may lower it, not raise or remove it.")
    )
    return message % {"cap": format_amount(limit, actor.organization.currency, exact=True)}


def _rate_breach(limit: int, new: int | None) -> str | None:
    if new is not None and new <= limit:
        return None
    return _("Limited to %(limit)s by an admin: you may lower it, not raise or remove it.") % {
        "limit": limit
    }


def _models_breach(limit: list[str], new: list[str] | None) -> str | None:
    if new and all(m in limit for m in new):
        return None
    return _(
        "An admin allowed only %(allowed)s: you may narrow the list, not widen or clear it."
    ) % {"allowed": ", ".join(limit)}


def _tag_keys_breach(limit: list[str], new: list[str] | None) -> str | None:
    if all(k in (new or []) for k in limit):
        return None
    return _("An admin requires the tag keys %(keys)s: you may add keys, not remove them.") % {
        "keys": ", ".join(limit)
    }


def _networks_breach(limit: list[str], new: list[str] | None) -> str | None:
    if new and all(_within_networks(e, limit) for e in new):
        return None
    return _("An admin allowed only %(allowed)s: you may narrow it, not widen or clear it.") % {
        "allowed": ", ".join(limit)
    }


def _expiry_breach(limit: str, new: datetime | None) -> str | None:
    ends = datetime.fromisoformat(limit)
    if new is not None and new <= ends:
        return None
    return _(
        "An admin set this key to expire by %(ends)s UTC: "
        "you may bring it forward, not postpone or remove it."
    ) % {"ends": f"{ends:%Y-%m-%d %H:%M}"}


def _breach(actor: Actor, field: str, limit: Any, new: Any, *, by_admin: bool) -> str | None:
    """Why setting ``field`` to ``new`` goes beyond its ceiling ``limit``; None if it does not."""
    if field in CAP_FIELDS:
        return _cap_breach(actor, limit, new, by_admin=by_admin)
    if field in RATE_FIELDS:
        return _rate_breach(limit, new)
    checks: dict[str, Callable[[Any, Any], str | None]] = {
        "allowed_models": _models_breach,
        "required_tag_keys": _tag_keys_breach,
        "ip_allowlist": _networks_breach,
        "expires_at": _expiry_breach,
    }
    check = checks.get(field)
    return check(limit, new) if check is not None else None


def check_ceiling(actor: Actor, values: dict[str, Any], *, key: ApiKey | None) -> None:
    """For a key's owner who is not a key manager: each limit they change must
    stay within what a manager set (the key's ceiling) and, for the monthly
    cap, within the organization's cap for developers' keys."""
    if manages_all_keys(actor):
        return
    ceiling = dict(key.ceiling or {}) if key is not None else {}
    org_cap = developer_cap(actor)
    if org_cap is not None:
        current = ceiling.get("spend_cap_monthly")
        ceiling["spend_cap_monthly"] = org_cap if current is None else min(current, org_cap)
    errors = FieldErrors()
    by_admin = key is not None and bool(key.ceiling)
    for field, limit in ceiling.items():
        if field not in values or limit is None:
            continue
        new = values[field]
        if key is not None and getattr(key, field) == new:
            continue  # unchanged: only a change must respect the ceiling
        message = _breach(actor, field, limit, new, by_admin=by_admin)
        if message is not None:
            errors.add(field, message)
    errors.raise_if_any()


def ceiling_after(
    actor: Actor, key: ApiKey, values: dict[str, Any], *, issued: bool
) -> dict[str, Any]:
    """The key's ceiling after ``actor`` set ``values``: a manager's setting of a
    limit (every limit when issuing, a changed one when updating) becomes its
    ceiling, or lifts it when cleared; an owner's own changes leave it alone,
    except that a developer's key keeps the organization's cap as a ceiling."""
    ceiling = dict(key.ceiling or {})
    if manages_all_keys(actor):
        for field in CEILING_FIELDS:
            if field not in values:
                continue
            if not issued and getattr(key, field) == values[field]:
                continue
            value = _ceiling_value(field, values[field])
            if value is None:
                ceiling.pop(field, None)
            else:
                ceiling[field] = value
    elif issued and (org_cap := developer_cap(actor)) is not None:
        ceiling["spend_cap_monthly"] = org_cap
    return ceiling
