"""Alert rules: who may manage which, their changes (audited), and the
evaluation beat runs every minute (``evaluate``).

Evaluation is one pass over every enabled rule. Each rule is observed
(``console.features.alerts.observe``) and compared with its open incidents, in one
transaction with the rule's row locked: an observation whose condition holds
and has no open incident opens one and fires ``alert.fired``; an open
incident whose condition no longer holds (or whose subject or period is
gone: yesterday's daily cap) is resolved and fires ``alert.resolved``. Both
go out through ``console.kernel.hooks.OUTBOUND_EVENT`` inside that transaction,
with an event id made of the incident's id, so a retried evaluation never
delivers twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.facade import Actor, NotFound, Perm, PermissionDenied, audit_record
from console.features.alerts.models import DEVELOPER_KINDS, AlertRule, Incident, Kind, Scope
from console.features.alerts.observe import Observation, observe
from console.kernel import hooks

logger = logging.getLogger(__name__)

FIRED = "alert.fired"
RESOLVED = "alert.resolved"
RULE_FIELDS = (
    "name",
    "kind",
    "scope",
    "api_key",
    "sub_account",
    "node",
    "model",
    "percents",
    "threshold",
    "amount",
    "window_minutes",
    "min_calls",
    "enabled",
)


# --- who may do what ------------------------------------------------------------------


def manages_all(actor: Actor) -> bool:
    """Owners, admins and finance manage every rule of the organization."""
    return actor.can(Perm.BILLING_MANAGE)


def may_use_alerts(actor: Actor) -> bool:
    """Developers too, for rules on their own keys."""
    return manages_all(actor) or actor.can(Perm.KEYS_MANAGE_OWN)


def require(actor: Actor) -> None:
    if not may_use_alerts(actor):
        raise PermissionDenied(_("Your role cannot manage alerts."))


def rule_list(*, actor: Actor) -> QuerySet[AlertRule]:
    require(actor)
    qs = AlertRule.objects.filter(organization_id=actor.organization_id).select_related(
        "api_key", "sub_account", "node"
    )
    if not manages_all(actor):
        qs = qs.filter(scope=Scope.KEY, kind__in=DEVELOPER_KINDS, api_key__owner_id=actor.user.pk)
    return qs


def rule_get(*, actor: Actor, rule_id) -> AlertRule:
    rule = rule_list(actor=actor).filter(pk=rule_id).first() if str(rule_id).isdigit() else None
    if rule is None:
        raise NotFound(_("No such alert rule in this organization."))
    return rule


def incident_list(*, actor: Actor, open_only: bool | None = None) -> QuerySet[Incident]:
    rules = rule_list(actor=actor)
    qs = Incident.objects.filter(
        organization_id=actor.organization_id, rule__in=rules
    ).select_related("rule")
    if open_only is True:
        qs = qs.filter(resolved_at__isnull=True)
    elif open_only is False:
        qs = qs.filter(resolved_at__isnull=False)
    return qs


def _audit_params(rule: AlertRule) -> dict:
    return {
        "kind": rule.kind,
        "scope": rule.scope,
        "enabled": rule.enabled,
        **({"api_key": rule.api_key_id} if rule.api_key_id else {}),
        **({"sub_account": rule.sub_account_id} if rule.sub_account_id else {}),
        **({"node": rule.node_id} if rule.node_id else {}),
        **({"model": rule.model} if rule.model else {}),
    }


@transaction.atomic
def rule_create(*, actor: Actor, data: dict) -> AlertRule:
    """``data``: a cleaned ``AlertRuleForm`` (the form decides what is valid
    and, for a developer, which keys)."""
    require(actor)
    rule = AlertRule(organization_id=actor.organization_id, created_by=actor.user)
    for field in RULE_FIELDS:
        if field in data:
            setattr(rule, field, data[field])
    rule.save()
    audit_record(actor=actor, action="alert_rule.created", target=rule, params=_audit_params(rule))
    return rule


@transaction.atomic
def rule_update(*, actor: Actor, rule: AlertRule, data: dict) -> AlertRule:
    rule = rule_get(actor=actor, rule_id=rule.pk)
    for field in RULE_FIELDS:
        if field in data:
            setattr(rule, field, data[field])
    rule.save()
    if not rule.enabled:
        close_disabled(rule)
    audit_record(actor=actor, action="alert_rule.updated", target=rule, params=_audit_params(rule))
    return rule


@transaction.atomic
def rule_delete(*, actor: Actor, rule: AlertRule) -> None:
    rule = rule_get(actor=actor, rule_id=rule.pk)
    audit_record(actor=actor, action="alert_rule.deleted", target=rule, params=_audit_params(rule))
    rule.delete()


# --- evaluation -----------------------------------------------------------------------


@dataclass
class EvaluationSummary:
    rules: int = 0
    fired: int = 0
    resolved: int = 0
    failed: int = 0


# How an incident's value and threshold of each kind count (``webhooks.formats``
# reads them so): micro-units or minor units of the currency, percent,
# milliseconds, days; "" for a plain number.
UNITS = {
    Kind.SPEND_CAP: "micro",
    Kind.BALANCE_LOW: "micro",
    Kind.INVOICE_OVERDUE: "minor",
    Kind.ERROR_RATE: "percent",
    Kind.RATE_NEAR_LIMIT: "percent",
    Kind.LATENCY_P99: "ms",
    Kind.TTFT_P99: "ms",
    Kind.BALANCE_RUNWAY: "days",
}


def event_data(incident: Incident, rule: AlertRule) -> dict:
    def num(v):
        return None if v is None else format(v.normalize(), "f")

    return {
        "incident_id": incident.pk,
        "rule": {"id": rule.pk, "name": rule.name, "kind": rule.kind, "scope": rule.scope},
        "rule_name": rule.name,
        "kind": rule.kind,
        "unit": UNITS.get(rule.kind, ""),
        "subject": incident.subject,
        "subject_label": incident.subject_label,
        "threshold_key": incident.threshold_key,
        "period": incident.period,
        "value": num(incident.value),
        "threshold": num(incident.threshold),
        "resolved_value": num(incident.resolved_value),
        "currency": rule.organization.currency,
        "fired_at": incident.fired_at.isoformat(),
        "resolved_at": incident.resolved_at.isoformat() if incident.resolved_at else None,
        "url": reverse("alerts:history") + f"?rule={rule.pk}",
        "console_url": settings.CONSOLE_BASE_URL + reverse("alerts:history") + f"?rule={rule.pk}",
    }


def _fire(incident: Incident, rule: AlertRule, event_type: str) -> None:
    suffix = "fired" if event_type == FIRED else "resolved"
    hooks.OUTBOUND_EVENT.fire(
        organization_id=rule.organization_id,
        event_type=event_type,
        data=event_data(incident, rule),
        event_id=f"alert:{incident.pk}:{suffix}",
    )


def apply_observations(
    rule: AlertRule, observations: list[Observation], now: datetime
) -> tuple[int, int]:
    """Open and resolve the rule's incidents to match ``observations``; the
    caller holds a transaction. Returns (fired, resolved)."""
    seen = {o.key: o for o in observations}
    breached = {k: o for k, o in seen.items() if o.breached}
    open_ = {
        (i.subject, i.threshold_key, i.period): i
        for i in Incident.objects.select_for_update().filter(rule=rule, resolved_at__isnull=True)
    }
    fired = resolved = 0
    for key, incident in open_.items():
        if key in breached:
            continue
        incident.resolved_at = now
        obs = seen.get(key)
        incident.resolved_value = obs.value if obs is not None else None
        incident.save(update_fields=["resolved_at", "resolved_value"])
        _fire(incident, rule, RESOLVED)
        resolved += 1
    for key, obs in breached.items():
        if key in open_:
            continue
        try:
            with transaction.atomic():
                incident = Incident.objects.create(
                    rule=rule,
                    organization_id=rule.organization_id,
                    subject=obs.subject,
                    subject_label=obs.label[:240],
                    threshold_key=obs.threshold_key,
                    period=obs.period,
                    value=obs.value,
                    threshold=obs.threshold,
                    fired_at=now,
                )
        except IntegrityError:  # another evaluation opened it meanwhile
            continue
        _fire(incident, rule, FIRED)
        fired += 1
    return fired, resolved


def evaluate_rule(rule: AlertRule, now: datetime) -> tuple[int, int]:
    with transaction.atomic():
        locked = (
            AlertRule.objects.select_for_update(of=("self",))
            .select_related("organization", "api_key", "sub_account", "node")
            .filter(pk=rule.pk, enabled=True)
            .first()
        )
        if locked is None:  # deleted or disabled since the list was read
            return 0, 0
        return apply_observations(locked, observe(locked, now), now)


def evaluate(now: datetime | None = None) -> EvaluationSummary:
    """Evaluate every enabled rule of every active organization at ``now``
    (default: the current time). A rule that fails is logged and skipped; the
    others still run."""
    now = now or timezone.now()
    summary = EvaluationSummary()
    rules = AlertRule.objects.filter(enabled=True, organization__is_active=True).order_by("id")
    for rule in rules.iterator():
        summary.rules += 1
        try:
            fired, resolved = evaluate_rule(rule, now)
        except Exception:
            logger.exception("alert rule %s (%s) could not be evaluated", rule.pk, rule.kind)
            summary.failed += 1
            continue
        summary.fired += fired
        summary.resolved += resolved
    return summary


def close_disabled(rule: AlertRule, now: datetime | None = None) -> int:
    """A disabled rule watches nothing: its open incidents resolve (and say so)."""
    with transaction.atomic():
        return apply_observations(rule, [], now or timezone.now())[1]


__all__ = [
    "FIRED",
    "RESOLVED",
    "EvaluationSummary",
    "Kind",
    "evaluate",
    "incident_list",
    "manages_all",
    "may_use_alerts",
    "rule_create",
    "rule_delete",
    "rule_get",
    "rule_list",
    "rule_update",
]
