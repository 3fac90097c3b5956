"""Each kind of alert rule, evaluated as beat evaluates it: it fires once when
its condition is crossed, not again on the next evaluation, and resolves when
the condition clears, each time one ``alert.fired`` / ``alert.resolved``
event on ``console.kernel.hooks.OUTBOUND_EVENT`` with a stable event id."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from accounts.models import ApiKey
from console.features.alerts.models import AlertRule, Incident, Kind, Scope
from console.features.alerts.services import evaluate
from inference_node.models import CredentialStatus, NodeHealth
from invoicing.models import Invoice
from invoicing.services import invoice_draft, invoice_finalize, prepaid_adjust
from tests.alerts.conftest import NOW, calls
from tests.factories import SubAccountFactory
from tests.inference_node.factories import CredentialFactory, NodeFactory

pytestmark = pytest.mark.django_db

COST = 240  # micro-units of one test call (1,200 input and 300 output tokens of sim-chat-small)


def rule(org, kind, **fields) -> AlertRule:
    fields.setdefault("name", f"{kind} rule")
    fields.setdefault("scope", Scope.ORG)
    return AlertRule.objects.create(organization=org, kind=kind, **fields)


def test_a_key_driven_through_50_80_100_percent_of_its_daily_cap_fires_exactly_three_times(
    org, key, outbound
):
    ApiKey.objects.filter(pk=key.pk).update(spend_cap_daily=10 * COST)
    r = rule(org, Kind.SPEND_CAP, scope=Scope.KEY, api_key=key, percents=[50, 80, 100])
    start = NOW - timedelta(hours=3)

    calls(key, 5, at=start)  # 50 %
    evaluate(now=NOW)
    evaluate(now=NOW + timedelta(minutes=1))  # nothing new: no storm
    calls(key, 3, at=start + timedelta(minutes=5))  # 80 %
    evaluate(now=NOW + timedelta(minutes=2))
    calls(key, 2, at=start + timedelta(minutes=10))  # 100 %
    evaluate(now=NOW + timedelta(minutes=3))
    evaluate(now=NOW + timedelta(minutes=4))

    fired = outbound.fired
    assert [e["data"]["threshold_key"] for e in fired] == ["50", "80", "100"]
    assert len({e["event_id"] for e in fired}) == 3
    first = fired[0]
    assert first["organization_id"] == org.pk
    assert first["event_id"] == f"alert:{first['data']['incident_id']}:fired"
    assert first["data"]["rule"] == {
        "id": r.pk,
        "name": r.name,
        "kind": "spend_cap",
        "scope": "key",
    }
    assert first["data"]["subject_label"] == f"prod ({key.prefix}…)"
    assert first["data"]["value"] == str(5 * COST)
    assert first["data"]["threshold"] == str(5 * COST)
    assert first["data"]["period"] == "d:2026-12-04"
    assert first["data"]["url"] == f"/alerts/history/?rule={r.pk}"
    assert outbound.resolved == []

    # The next day the daily cap starts again: the three resolve, none fires again.
    evaluate(now=NOW + timedelta(days=1))
    assert len(outbound.resolved) == 3
    assert {e["event_id"] for e in outbound.resolved} == {
        f"alert:{e['data']['incident_id']}:resolved" for e in fired
    }
    evaluate(now=NOW + timedelta(days=1, minutes=1))
    assert len(outbound.fired) == 3 and len(outbound.resolved) == 3


def test_a_sub_account_monthly_cap_fires_under_an_organization_wide_rule(
    org, owner_actor, outbound
):
    from tests.factories import issue_key

    team = SubAccountFactory(organization=org, name="research", spend_cap_monthly=4 * COST)
    k, _ = issue_key(owner_actor, name="research-key", sub_account_id=team.pk)
    rule(org, Kind.SPEND_CAP, scope=Scope.ORG, percents=[100])
    calls(k, 4, at=NOW - timedelta(days=2))
    evaluate(now=NOW)
    evaluate(now=NOW + timedelta(minutes=1))
    assert [(e["data"]["subject"], e["data"]["period"]) for e in outbound.fired] == [
        (f"sub_account:{team.pk}", "m:2026-12")
    ]
    # The cap raised: the condition clears and the incident resolves.
    team.spend_cap_monthly = 100 * COST
    team.save()
    evaluate(now=NOW + timedelta(minutes=2))
    assert len(outbound.resolved) == 1


@pytest.fixture
def prepaid(org):
    org.billing_mode = "prepaid"
    org.save()
    return org


def test_balance_below_an_amount_fires_once_and_resolves_after_a_top_up(
    prepaid, finance, key, outbound
):
    from accounts.actors import Actor

    fin = Actor(finance, "127.0.0.1")
    prepaid_adjust(actor=fin, amount=10 * COST, reason="start", kind="grant")
    rule(prepaid, Kind.BALANCE_LOW, amount=5 * COST)
    evaluate(now=NOW)
    assert outbound.fired == []
    calls(key, 6, at=NOW - timedelta(minutes=30))  # balance 4 calls' worth
    evaluate(now=NOW)
    evaluate(now=NOW + timedelta(minutes=1))
    assert len(outbound.fired) == 1
    assert outbound.fired[0]["data"]["value"] == str(4 * COST)
    assert outbound.fired[0]["data"]["currency"] == "USD"
    prepaid_adjust(actor=fin, amount=100 * COST, reason="top up", kind="grant")
    evaluate(now=NOW + timedelta(minutes=2))
    assert len(outbound.resolved) == 1
    assert outbound.resolved[0]["data"]["resolved_value"] == str(104 * COST)


def test_balance_running_out_within_n_days_at_the_weeks_burn_rate(prepaid, finance, key, outbound):
    from accounts.actors import Actor

    fin = Actor(finance, "127.0.0.1")
    prepaid_adjust(actor=fin, amount=100 * COST, reason="start", kind="grant")
    # 70 calls over the last week: 10 a day; 30 left = 3 days of runway.
    calls(key, 70, at=NOW - timedelta(days=6), spacing=timedelta(hours=2))
    rule(prepaid, Kind.BALANCE_RUNWAY, threshold=Decimal(5))
    evaluate(now=NOW)
    evaluate(now=NOW + timedelta(minutes=1))
    assert len(outbound.fired) == 1
    assert Decimal(outbound.fired[0]["data"]["value"]) == Decimal(3)
    prepaid_adjust(actor=fin, amount=1000 * COST, reason="top up", kind="grant")
    evaluate(now=NOW + timedelta(minutes=2))
    assert len(outbound.resolved) == 1


def test_error_rate_of_a_model_over_a_window_fires_and_resolves_when_the_window_passes(
    org, key, outbound
):
    r = rule(
        org,
        Kind.ERROR_RATE,
        scope=Scope.MODEL,
        model="sim-chat-small",
        threshold=Decimal(10),
        window_minutes=5,
        min_calls=10,
    )
    at = NOW - timedelta(minutes=4)
    calls(key, 8, at=at)
    calls(key, 4, at=at + timedelta(seconds=20), status_code=500, error_type="upstream_error")
    evaluate(now=NOW)
    evaluate(now=NOW + timedelta(seconds=30))
    assert len(outbound.fired) == 1
    assert outbound.fired[0]["data"]["subject"] == "model:sim-chat-small"
    assert Decimal(outbound.fired[0]["data"]["value"]) == Decimal("33.333")
    # Healthy calls since, and the failing ones out of the window: resolved.
    calls(key, 12, at=NOW + timedelta(minutes=3))
    evaluate(now=NOW + timedelta(minutes=6))
    assert len(outbound.resolved) == 1
    assert Incident.objects.get(rule=r).resolved_at == NOW + timedelta(minutes=6)


def test_too_few_calls_in_the_window_never_fire(org, key, outbound):
    rule(org, Kind.ERROR_RATE, threshold=Decimal(1), window_minutes=5, min_calls=50)
    calls(key, 5, at=NOW - timedelta(minutes=2), status_code=500, error_type="upstream_error")
    evaluate(now=NOW)
    assert outbound.fired == []


def test_latency_p99_over_a_window_spanning_whole_and_partial_hours(org, key, outbound):
    rule(
        org,
        Kind.LATENCY_P99,
        threshold=Decimal(2000),
        window_minutes=120,
        min_calls=5,
    )
    # Slow calls in the whole hour inside the window (read from the rollup).
    calls(key, 10, at=NOW - timedelta(minutes=50), duration_us=3_000_000)
    evaluate(now=NOW + timedelta(minutes=5))
    evaluate(now=NOW + timedelta(minutes=6))
    assert len(outbound.fired) == 1
    assert 2900 <= float(outbound.fired[0]["data"]["value"]) <= 3100
    evaluate(now=NOW + timedelta(minutes=200))
    assert len(outbound.resolved) == 1


def test_ttft_p99_of_a_node(org, key, outbound):
    node = NodeFactory(organization=org, name="gpu-1")
    rule(
        org,
        Kind.TTFT_P99,
        scope=Scope.NODE,
        node=node,
        threshold=Decimal(500),
        window_minutes=10,
        min_calls=3,
    )
    calls(key, 3, at=NOW - timedelta(minutes=5), node_id=node.pk, ttft_us=900_000)
    calls(key, 3, at=NOW - timedelta(minutes=5), node_id=node.pk + 1000, ttft_us=10_000)
    evaluate(now=NOW)
    assert [e["data"]["subject"] for e in outbound.fired] == [f"node:{node.pk}"]
    evaluate(now=NOW + timedelta(minutes=11))
    assert len(outbound.resolved) == 1


def test_a_node_down_and_a_credential_disabled_fire_and_resolve(org, outbound):
    node = NodeFactory(organization=org, name="vendor-a")
    cred = CredentialFactory(node=node)
    rule(org, Kind.UPSTREAM_DOWN)
    evaluate(now=NOW)
    assert outbound.fired == []
    node.health = NodeHealth.UNHEALTHY
    node.save()
    cred.status = CredentialStatus.DISABLED
    cred.save()
    evaluate(now=NOW)
    evaluate(now=NOW + timedelta(minutes=1))
    assert sorted(e["data"]["subject"] for e in outbound.fired) == sorted(
        [f"node:{node.pk}", f"credential:{cred.pk}"]
    )
    node.health = NodeHealth.HEALTHY
    node.save()
    evaluate(now=NOW + timedelta(minutes=2))
    assert [e["data"]["subject"] for e in outbound.resolved] == [f"node:{node.pk}"]


def test_requests_per_minute_near_a_keys_limit(org, key, outbound):
    ApiKey.objects.filter(pk=key.pk).update(rpm_limit=10)
    rule(org, Kind.RATE_NEAR_LIMIT, scope=Scope.KEY, api_key=key, threshold=Decimal(80))
    calls(key, 7, at=NOW - timedelta(seconds=40))
    evaluate(now=NOW)
    assert outbound.fired == []
    calls(key, 2, at=NOW - timedelta(seconds=10))
    evaluate(now=NOW)
    evaluate(now=NOW + timedelta(seconds=5))
    assert [(e["data"]["threshold_key"], e["data"]["value"]) for e in outbound.fired] == [
        ("rpm", "90")
    ]
    evaluate(now=NOW + timedelta(minutes=2))
    assert len(outbound.resolved) == 1


def test_an_invoice_past_its_due_date_unpaid(org, key, outbound):
    calls(key, 3, at=NOW.replace(month=11, day=10), input_tokens=1_000_000)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2026-11").pk
    )
    rule(org, Kind.INVOICE_OVERDUE)
    Invoice.objects.filter(pk=invoice.pk).update(due_at=NOW + timedelta(days=1))
    evaluate(now=NOW)
    assert outbound.fired == []
    evaluate(now=NOW + timedelta(days=2))
    evaluate(now=NOW + timedelta(days=2, minutes=1))
    assert [e["data"]["subject"] for e in outbound.fired] == [f"invoice:{invoice.pk}"]
    invoice.refresh_from_db()
    Invoice.objects.filter(pk=invoice.pk).update(
        status="paid", paid_minor=invoice.amount_due_initial_minor
    )
    evaluate(now=NOW + timedelta(days=3))
    assert len(outbound.resolved) == 1


def test_a_disabled_rule_resolves_its_open_alerts_and_stays_quiet(org, owner_actor, outbound):
    from console.features.alerts.services import rule_update

    node = NodeFactory(organization=org, health=NodeHealth.UNHEALTHY)
    r = rule(org, Kind.UPSTREAM_DOWN, scope=Scope.NODE, node=node)
    evaluate(now=NOW)
    assert len(outbound.fired) == 1
    rule_update(actor=owner_actor, rule=r, data={"enabled": False})
    assert len(outbound.resolved) == 1
    evaluate(now=NOW + timedelta(minutes=1))
    assert len(outbound.fired) == 1


def test_one_broken_rule_does_not_stop_the_others(org, outbound, monkeypatch):
    from console.features.alerts import observe

    node = NodeFactory(organization=org, health=NodeHealth.UNHEALTHY)
    rule(org, Kind.BALANCE_LOW, amount=1)
    rule(org, Kind.UPSTREAM_DOWN, scope=Scope.NODE, node=node)

    def broken(rule, now):
        raise RuntimeError("boom")

    monkeypatch.setitem(observe.OBSERVERS, Kind.BALANCE_LOW, broken)
    summary = evaluate(now=NOW)
    assert summary.failed == 1
    assert [e["data"]["subject"] for e in outbound.fired] == [f"node:{node.pk}"]


def test_another_organizations_calls_never_fire_a_rule(org, other_org, catalog, outbound):
    from accounts.actors import Actor
    from tests.factories import MembershipFactory, issue_key

    theirs, _ = issue_key(Actor(MembershipFactory(organization=other_org, role="owner")))
    rule(org, Kind.ERROR_RATE, threshold=Decimal(1), window_minutes=5, min_calls=1)
    calls(theirs, 5, at=NOW - timedelta(minutes=2), status_code=500, error_type="x")
    evaluate(now=NOW)
    assert outbound.fired == []


def test_beat_evaluates_the_rules_every_minute(org, settings, outbound):
    from console.kernel.celery import registered_task

    entry = settings.CELERY_BEAT_SCHEDULE["alerts-evaluate"]
    assert entry["task"] == "alerts.evaluate" and entry["schedule"] == 60.0
    node = NodeFactory(organization=org, health=NodeHealth.UNHEALTHY)
    rule(org, Kind.UPSTREAM_DOWN, scope=Scope.NODE, node=node)
    result = registered_task("alerts.evaluate").apply().get()
    assert result == {"rules": 1, "fired": 1, "resolved": 0, "failed": 0}
    assert [e["data"]["subject"] for e in outbound.fired] == [f"node:{node.pk}"]


def test_a_postpaid_organizations_balance_rules_stay_quiet(org, outbound):
    rule(org, Kind.BALANCE_LOW, amount=1_000_000)
    rule(org, Kind.BALANCE_RUNWAY, threshold=Decimal(30))
    evaluate(now=NOW)
    assert outbound.fired == []
