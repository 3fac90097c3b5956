"""Template helpers of the nodes pages: a preset's label, a cost price per
million tokens (exact micro-units, through ``console.kernel.money``), choice labels
of raw values, and the prober's and key pool's stored English reasons shown
in the user's language where they are ones this app wrote (others, such as
a vendor's own message, are shown as they are)."""

from __future__ import annotations

import re

from django import template
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, pgettext

from console.kernel.money import format_amount
from inference_node.models import HealthCheck, NodeHealth, NodeKind
from inference_node.presets import get_preset

register = template.Library()

# Reasons stored in English (Node.last_error, a pool's down reason, a probe's
# error: inference_node.probes, vendor_probe, selectors) that are ours. Exact
# ones: the msgids equal the stored texts.
_KNOWN_REASONS = frozenset(
    (
        gettext_noop("every API key is disabled"),  # selectors.ALL_KEYS_DISABLED
        gettext_noop("no API key"),  # selectors.NO_API_KEY
        gettext_noop("refused: the node's address is not a public address"),
        gettext_noop("refused: the host now resolves to a non-public address"),
        gettext_noop("no answer within the timeout"),
        gettext_noop("cannot connect (connection refused)"),
        gettext_noop("cannot connect"),
    )
)
# Ones with a path, a status or a key's hint in them.
_PATTERNS = tuple(
    (re.compile(pattern), message)
    for pattern, message in (
        (
            r"(?P<path>\S+) answered more than (?P<n>\d+) bytes",
            gettext_noop("%(path)s answered more than %(n)s bytes"),
        ),
        (
            r"(?P<path>\S+): no answer within the timeout",
            gettext_noop("%(path)s: no answer within the timeout"),
        ),
        (
            r"(?P<path>\S+): the server closed the connection",
            gettext_noop("%(path)s: the server closed the connection"),
        ),
        (
            r"(?P<path>\S+) answered HTTP (?P<status>\d+) \(check the node's token\)",
            gettext_noop("%(path)s answered HTTP %(status)s (check the node's token)"),
        ),
        (
            r"(?P<path>\S+) answered HTTP (?P<status>\d+)",
            gettext_noop("%(path)s answered HTTP %(status)s"),
        ),
        (
            r"(?P<path>\S+) answered HTTP (?P<status>\d+): the vendor refused the API key "
            r"(?P<hint>\S+)",
            gettext_noop(
                "%(path)s answered HTTP %(status)s: the vendor refused the API key %(hint)s"
            ),
        ),
        (
            r"(?P<path>\S+) answered HTTP (?P<status>\d+): the vendor refused the API key",
            gettext_noop("%(path)s answered HTTP %(status)s: the vendor refused the API key"),
        ),
        (r"(?P<path>\S+) did not answer JSON", gettext_noop("%(path)s did not answer JSON")),
        (r"(?P<path>\S+) answered no model list", gettext_noop("%(path)s answered no model list")),
        (r"probe failed \((?P<name>\w+)\)", gettext_noop("probe failed (%(name)s)")),
    )
)
_DISABLED_BY = re.compile(r"^disabled by (?P<who>\S+)$")


@register.filter
def preset_label(key: str) -> str:
    preset = get_preset(key)
    return preset.label if preset else key


@register.simple_tag
def cost_price(micro, currency):
    """A cost per million tokens, with as many decimals as it needs."""
    return "—" if micro is None or not currency else format_amount(micro, currency, exact=True)


def _label(choices, value) -> str:
    try:
        return choices(value).label
    except ValueError:
        return value


@register.filter
def kind_label(value: str) -> str:
    return _label(NodeKind, value)


@register.filter
def health_check_label(value: str) -> str:
    return _label(HealthCheck, value)


@register.filter
def health_label(value: str) -> str:
    """A health value ("healthy") as its label, lower-case like the badges."""
    return str(_label(NodeHealth, value)).lower()


def _reason(part: str) -> str:
    if part in _KNOWN_REASONS:
        return _(part)
    for pattern, message in _PATTERNS:
        match = pattern.fullmatch(part)
        if match:
            return _(message) % match.groupdict()
    return part


@register.filter
def node_error(text: str) -> str:
    """A stored reason in the user's language where it is one of ours (a
    probe joins its failures with "; "); anything else as it is."""
    if not text:
        return text
    return pgettext("between a probe's failures", "; ").join(
        _reason(part) for part in str(text).split("; ")
    )


@register.filter
def key_reason(text: str) -> str:
    """A key's disabled reason: "disabled by <email>" (a person) translated;
    a vendor's refusal ("401: …") as it is."""
    match = _DISABLED_BY.match(text or "")
    if match:
        return _("disabled by %(who)s") % {"who": match["who"]}
    return text


@register.filter
def model_ids(models) -> str:
    """The ids of a probe's model list, comma-separated."""
    ids = (m.get("id") if isinstance(m, dict) else getattr(m, "id", m) for m in models or ())
    return ", ".join(str(i) for i in ids)
