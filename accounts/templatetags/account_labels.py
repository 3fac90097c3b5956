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
