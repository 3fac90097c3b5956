"""``{{ value|state_label }}``: the words a page shows for the state codes of
keys, sub-accounts, tokens and invitations, and for the spend periods (the
code itself stays in classes and data attributes)."""

from __future__ import annotations

from django import template
from django.utils.translation import gettext_lazy as _

register = template.Library()

_LABELS = {
    "active": _("active"),
    "revoked": _("revoked"),
    "expired": _("expired"),
    "suspended": _("suspended"),
    "pending": _("pending"),
    "accepted": _("accepted"),
    "today": _("today"),
    "this month": _("this month"),
    "lifetime": _("lifetime"),
}


@register.filter
def state_label(value) -> str:
    """The translated word for a state or period code; anything else as is."""
    label = _LABELS.get(str(value))
    return str(label) if label is not None else value


# The parameters audit events record, by their stored key (the key itself is
# the English text, so an English page reads as before).
_PARAMS = {
    "name": _("name"),
    "prefix": _("prefix"),
    "email": _("email"),
    "role": _("role"),
    "from": _("from"),
    "to": _("to"),
    "expires_at": _("expires_at"),
    "currency": _("currency"),
    "billing_mode": _("billing_mode"),
    "amount": _("amount"),
    "reason": _("reason"),
    "invoice": _("invoice"),
    "refund": _("refund"),
    "effect": _("effect"),
    "required": _("required"),
    "brand": _("brand"),
    "last4": _("last4"),
    "replaced": _("replaced"),
    "changed": _("changed"),
    "status": _("status"),
    "error": _("error"),
    "models": _("models"),
    "credentials": _("credentials"),
    "allowed_models": _("allowed_models"),
    "spend_cap_daily": _("spend_cap_daily"),
    "spend_cap_monthly": _("spend_cap_monthly"),
    "spend_cap_lifetime": _("spend_cap_lifetime"),
    "rpm_limit": _("rpm_limit"),
    "tpm_limit": _("tpm_limit"),
    "ip_allowlist": _("ip_allowlist"),
    "priority": _("priority"),
    "sub_account": _("sub_account"),
    "timezone": _("timezone"),
    "developer_key_cap": _("developer_key_cap"),
    "discount_rate": _("discount_rate"),
    "grace_seconds": _("grace_seconds"),
    "scope": _("scope"),
    "members": _("members"),
}


@register.filter
def param_label(key) -> str:
    """An audit event's parameter name in the page's language; unknown keys as stored."""
    label = _PARAMS.get(str(key))
    return str(label) if label is not None else key
