"""How an incident's figures read to a person: money in the organization's
currency (``console.kernel.money``), rates in percent, p99s in milliseconds, a
runway in days, a period as the day or month it counts."""

from __future__ import annotations

from decimal import Decimal

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from console.features.alerts.models import Kind
from console.kernel.money import format_amount

NONE = "—"


def _plain(value: Decimal) -> str:
    return f"{value.normalize():f}" if value == value.to_integral() else f"{value:f}".rstrip("0")


def figure(kind: str, value: Decimal | None, currency: str, *, exact: bool = False) -> str:
    if value is None:
        return NONE
    if kind in (Kind.SPEND_CAP, Kind.BALANCE_LOW):
        return format_amount(int(value), currency, exact=exact)
    if kind == Kind.INVOICE_OVERDUE:
        return format_amount(int(value), currency, unit="minor")
    if kind in (Kind.ERROR_RATE, Kind.RATE_NEAR_LIMIT):
        return f"{_plain(value.quantize(Decimal('0.01')))} %"
    if kind in (Kind.LATENCY_P99, Kind.TTFT_P99):
        return f"{_plain(value.quantize(Decimal('1')))} ms"
    if kind == Kind.BALANCE_RUNWAY:
        days = value.quantize(Decimal("0.1"))
        return ngettext("%(n)s day", "%(n)s days", int(days) if days == int(days) else 2) % {
            "n": _plain(days)
        }
    return _plain(value)


def which(incident) -> str:
    """The threshold and period an incident is about: "80 % of today's cap (2026-12-04)"."""
    key, period = incident.threshold_key, incident.period
    if incident.rule.kind == Kind.SPEND_CAP and key:
        if period.startswith("d:"):
            return _("%(pct)s %% of the daily cap, %(day)s") % {"pct": key, "day": period[2:]}
        if period.startswith("m:"):
            return _("%(pct)s %% of the monthly cap, %(month)s") % {"pct": key, "month": period[2:]}
        return _("%(pct)s %% of the lifetime cap") % {"pct": key}
    if key == "rpm":
        return _("requests per minute")
    if key == "tpm":
        return _("tokens per minute")
    if key == "health":
        return _("unhealthy")
    if key == "credential":
        return _("credential disabled")
    return ""


def value_and_threshold(incident, currency: str) -> tuple[str, str]:
    """The incident's value and threshold, with as many decimals as it takes
    for two different amounts not to read as the same number."""
    kind = incident.rule.kind
    texts = figure(kind, incident.value, currency), figure(kind, incident.threshold, currency)
    alike = texts[0] == texts[1] or texts[0][:1] in "<>" or texts[1][:1] in "<>"
    if alike and incident.value != incident.threshold:
        exact = (
            figure(kind, incident.value, currency, exact=True),
            figure(kind, incident.threshold, currency, exact=True),
        )
        return exact
    return texts


def decorate(incidents, currency: str) -> list:
    out = list(incidents)
    for i in out:
        i.value_text, i.threshold_text = value_and_threshold(i, currency)
        i.resolved_text = figure(i.rule.kind, i.resolved_value, currency)
        i.which_text = which(i)
    return out


def rule_summary(rule) -> str:
    """The rule's watched subject and threshold in a few words, for the list."""
    currency = rule.organization.currency
    if rule.kind == Kind.SPEND_CAP:
        text = ", ".join(f"{p} %" for p in rule.percents)
    elif rule.kind == Kind.BALANCE_LOW:
        text = figure(rule.kind, None if rule.amount is None else Decimal(rule.amount), currency)
    elif rule.threshold is not None:
        text = figure(rule.kind, rule.threshold, currency)
    else:
        text = ""
    if rule.kind in (Kind.ERROR_RATE, Kind.LATENCY_P99, Kind.TTFT_P99):
        text += " · " + ngettext("%(n)d minute", "%(n)d minutes", rule.window_minutes) % {
            "n": rule.window_minutes
        }
    return text


def rule_target(rule) -> str:
    if rule.api_key_id:
        return f"{rule.api_key.name} ({rule.api_key.prefix}…)"
    if rule.sub_account_id:
        return rule.sub_account.name
    if rule.node_id:
        return rule.node.name
    if rule.model:
        return rule.model
    return _("Whole organization")
