"""What each kind of rule sees now: a rule becomes ``Observation``s, one per
subject, threshold and period, each saying whether its condition holds.
Everything is read from the rollups, call records, ledger, node and invoice
rows through the apps' facades — never from the gateway's counters.

A spend cap counts as reached (100 %) once the gateway refused a call for it
in the period: the gateway refuses at its reserved worst case, so the spend
the records show stops just short of the cap and a 100 % threshold would
otherwise never be crossed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from accounts.facade import ApiKey, ApiKeyStatus, BillingMode, SubAccount, SubAccountStatus
from console.features.alerts.models import AlertRule, Kind, Scope
from console.kernel import hooks
from console.kernel.timezones import day_and_month
from inference_node.facade import (
    NodeHealth,
    NodeStatus,
    credential_states,
    nodes_own_and_shared,
)
from invoicing.facade import overdue_invoices, prepaid_balance
from usage.facade import (
    SPEND_BY_KEY,
    SPEND_BY_SUB_ACCOUNT,
    calls_and_tokens_by_key,
    first_cap_refusals,
    org_rollup_cost,
    spend_by_period,
)
from usage.facade import window_stats as usage_window_stats

BURN_DAYS = 7
_CAPS = (("d", "spend_cap_daily"), ("m", "spend_cap_monthly"), ("life", "spend_cap_lifetime"))


@dataclass(frozen=True)
class Observation:
    subject: str
    label: str
    breached: bool
    value: Decimal | None = None
    threshold: Decimal | None = None
    threshold_key: str = ""
    period: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.subject, self.threshold_key, self.period)


def _d(value) -> Decimal | None:
    if value is None:
        return None
    return Decimal(str(value)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)


def _key_label(key) -> str:
    return f"{key.name} ({key.prefix}…)"


def _active_keys(rule: AlertRule):
    qs = ApiKey.objects.filter(organization_id=rule.organization_id, status=ApiKeyStatus.ACTIVE)
    if rule.scope == Scope.KEY:
        qs = qs.filter(pk=rule.api_key_id)
    return list(qs.order_by("id"))


def _periods(rule: AlertRule, now: datetime) -> dict[str, tuple[datetime, datetime]]:
    return day_and_month(rule.organization.timezone, now)


def _period_names(bounds) -> dict[str, str]:
    day = bounds["d"][0].date()
    return {"d": f"d:{day.isoformat()}", "m": f"m:{day.year:04d}-{day.month:02d}", "life": "life"}


def _cap_observations(
    rule, subject, label, holder, spent: dict, refused: dict, names
) -> list[Observation]:
    """``refused``: the periods in which the gateway refused a call for this
    holder's cap; there the spend counts as the cap itself."""
    out = []
    for period, field in _CAPS:
        cap = getattr(holder, field)
        if not cap or cap <= 0:
            continue
        used = int(spent.get(period, 0))
        if period in refused:
            used = max(used, cap)
        for pct in sorted({int(p) for p in rule.percents}):
            out.append(
                Observation(
                    subject=subject,
                    label=label,
                    breached=used * 100 >= cap * pct,
                    value=_d(used),
                    threshold=_d(-(-cap * pct // 100)),
                    threshold_key=str(pct),
                    period=names[period],
                )
            )
    return out


def _refusals(rule: AlertRule, grain: str, holders: list, bounds) -> dict:
    """The holders' cap refusals; the whole history is read only when one of
    them has a lifetime cap (otherwise only the periods' calls)."""
    if not holders:
        return {}
    return first_cap_refusals(
        rule.organization_id,
        grain=grain,
        idents=[h.pk for h in holders],
        periods=bounds,
        lifetime=any(h.spend_cap_lifetime for h in holders),
    )


def spend_cap(rule: AlertRule, now: datetime) -> list[Observation]:
    bounds = _periods(rule, now)
    names = _period_names(bounds)
    out: list[Observation] = []
    if rule.scope in (Scope.KEY, Scope.ORG):
        keys = [
            k
            for k in _active_keys(rule)
            if k.spend_cap_daily or k.spend_cap_monthly or k.spend_cap_lifetime
        ]
        spent = (
            hooks.KEY_SPEND.ask(
                organization_id=rule.organization_id,
                key_ids=[k.pk for k in keys],
                periods=bounds,
            )
            if keys
            else {}
        )
        refused = _refusals(rule, SPEND_BY_KEY, keys, bounds)
        for k in keys:
            out += _cap_observations(
                rule,
                f"key:{k.pk}",
                _key_label(k),
                k,
                spent.get(k.pk, {}),
                refused.get(k.pk, {}),
                names,
            )
    if rule.scope in (Scope.SUB_ACCOUNT, Scope.ORG):
        subs = SubAccount.objects.filter(
            organization_id=rule.organization_id, status=SubAccountStatus.ACTIVE
        )
        if rule.scope == Scope.SUB_ACCOUNT:
            subs = subs.filter(pk=rule.sub_account_id)
        subs = [
            s
            for s in subs.order_by("id")
            if s.spend_cap_daily or s.spend_cap_monthly or s.spend_cap_lifetime
        ]
        refused = _refusals(rule, SPEND_BY_SUB_ACCOUNT, subs, bounds)
        for sub in subs:
            sub_spent = spend_by_period(
                organization_id=rule.organization_id,
                grain=SPEND_BY_SUB_ACCOUNT,
                ident=sub.pk,
                periods=bounds,
            )
            out += _cap_observations(
                rule,
                f"sub_account:{sub.pk}",
                sub.name,
                sub,
                sub_spent,
                refused.get(sub.pk, {}),
                names,
            )
    return out


def _prepaid(rule: AlertRule) -> bool:
    """Only a prepaid organization has a balance to run low (a postpaid one's
    ledger is empty: its rules stay quiet rather than fire on zero)."""
    return rule.organization.billing_mode == BillingMode.PREPAID


def balance_low(rule: AlertRule, now: datetime) -> list[Observation]:
    if not _prepaid(rule):
        return []
    balance = prepaid_balance(rule.organization_id)
    return [
        Observation(
            subject="org",
            label=rule.organization.name,
            breached=balance < (rule.amount or 0),
            value=_d(balance),
            threshold=_d(rule.amount),
        )
    ]


def balance_runway(rule: AlertRule, now: datetime) -> list[Observation]:
    """Days the balance lasts at the trailing week's spend (whole UTC hours)."""
    if not _prepaid(rule):
        return []
    balance = prepaid_balance(rule.organization_id)
    end = now.replace(minute=0, second=0, microsecond=0)
    burn = org_rollup_cost(rule.organization_id, since=end - timedelta(days=BURN_DAYS), until=end)
    days = rule.threshold or Decimal(0)
    if burn <= 0:
        return [Observation("org", rule.organization.name, False, None, _d(days))]
    runway = Decimal(balance) * BURN_DAYS / Decimal(burn)
    return [
        Observation(
            subject="org",
            label=rule.organization.name,
            breached=runway < days,
            value=_d(max(runway, Decimal(0))),
            threshold=_d(days),
        )
    ]


def _window_subject(rule: AlertRule) -> tuple[str, str, dict]:
    if rule.scope == Scope.MODEL:
        return f"model:{rule.model}", rule.model, {"model": rule.model}
    if rule.scope == Scope.NODE and rule.node_id:
        return f"node:{rule.node_id}", rule.node.name, {"node_id": rule.node_id}
    return "org", rule.organization.name, {}


def windowed(rule: AlertRule, now: datetime) -> list[Observation]:
    subject, label, dims = _window_subject(rule)
    stats = usage_window_stats(
        organization_id=rule.organization_id,
        start=now - timedelta(minutes=rule.window_minutes),
        end=now,
        **dims,
    )
    if rule.kind == Kind.ERROR_RATE:
        value = stats.error_percent if stats.calls else None
    elif rule.kind == Kind.LATENCY_P99:
        value = stats.latency_p99_ms
    else:
        value = stats.ttft_p99_ms
    enough = stats.calls >= max(1, rule.min_calls)
    threshold = rule.threshold or Decimal(0)
    breached = enough and value is not None and Decimal(str(value)) > threshold
    return [Observation(subject, label, breached, _d(value), _d(threshold))]


def upstream_down(rule: AlertRule, now: datetime) -> list[Observation]:
    nodes = nodes_own_and_shared(rule.organization_id).exclude(status=NodeStatus.DISABLED)
    if rule.scope == Scope.NODE:
        nodes = nodes.filter(pk=rule.node_id)
    out = []
    own_ids = []
    for node in nodes.order_by("id"):
        out.append(
            Observation(
                subject=f"node:{node.pk}",
                label=node.name,
                breached=node.health == NodeHealth.UNHEALTHY,
                threshold_key="health",
            )
        )
        if node.organization_id == rule.organization_id:
            own_ids.append(node.pk)
    # Credentials only of the organization's own channels: a shared channel's
    # key pool is the platform's business.
    for cred in credential_states(own_ids):
        out.append(
            Observation(
                subject=f"credential:{cred.id}",
                label=f"{cred.node_name}: {cred.name}",
                breached=cred.disabled,
                threshold_key="credential",
            )
        )
    return out


def rate_near_limit(rule: AlertRule, now: datetime) -> list[Observation]:
    keys = [k for k in _active_keys(rule) if k.rpm_limit or k.tpm_limit]
    if not keys:
        return []
    start = now - timedelta(minutes=1)
    used = calls_and_tokens_by_key(rule.organization_id, [k.pk for k in keys], start, now)
    pct = rule.threshold or Decimal(100)
    out = []
    for k in keys:
        calls, tokens = used.get(k.pk, (0, 0))
        for name, limit, count in (("rpm", k.rpm_limit, calls), ("tpm", k.tpm_limit, tokens)):
            if not limit:
                continue
            share = Decimal(count) * 100 / Decimal(limit)
            out.append(
                Observation(
                    subject=f"key:{k.pk}",
                    label=_key_label(k),
                    breached=share >= pct,
                    value=_d(share),
                    threshold=_d(pct),
                    threshold_key=name,
                )
            )
    return out


def invoice_overdue(rule: AlertRule, now: datetime) -> list[Observation]:
    return [
        Observation(
            subject=f"invoice:{inv['id']}",
            label=inv["number"],
            breached=True,
            value=_d(inv["amount_due_minor"]),
        )
        for inv in overdue_invoices(organization_id=rule.organization_id, now=now)
    ]


OBSERVERS = {
    Kind.SPEND_CAP: spend_cap,
    Kind.BALANCE_LOW: balance_low,
    Kind.BALANCE_RUNWAY: balance_runway,
    Kind.ERROR_RATE: windowed,
    Kind.LATENCY_P99: windowed,
    Kind.TTFT_P99: windowed,
    Kind.UPSTREAM_DOWN: upstream_down,
    Kind.RATE_NEAR_LIMIT: rate_near_limit,
    Kind.INVOICE_OVERDUE: invoice_overdue,
}


def observe(rule: AlertRule, now: datetime) -> list[Observation]:
    return OBSERVERS[rule.kind](rule, now)


__all__ = ["Observation", "observe"]
