"""Error-rate and latency alerts from real traffic: calls go through the real
gateway to the bundled simulator, whose fault controls (``POST
/admin/faults``) make it answer 500s or stall before the first token; the
usage events the gateway emits are ingested, beat's evaluation fires the
alert once, and after the faults are cleared and the window has passed it
resolves."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from accounts.actors import Actor
from accounts.models import Role
from console.features.alerts.models import AlertRule, Kind, Scope
from console.features.alerts.services import evaluate
from tests.factories import MembershipFactory, OrganizationFactory, issue_key
from tests.gateway_bridge.harness import running_gateway
from tests.inference_node.factories import NodeFactory
from tests.simulator_faults import TOKEN, drive, faults, simulator

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def sim():
    """A simulator of this module's own: its faults reach no other test."""
    with simulator() as node:
        yield node


@pytest.fixture
def setup(sim, settings, tmp_path, catalog):
    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_RETRY_BACKOFF_SECONDS = 0.001
    settings.GATEWAY_QUEUE_TIMEOUT = 2.0
    org = OrganizationFactory(name="Acme", slug="acme-alerts")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    _key, raw = issue_key(Actor(owner, "127.0.0.1"))
    node = NodeFactory(
        organization=None,
        name="sim-alerts",
        base_url=sim.base_url,
        token=TOKEN,
        serves=[("sim-chat-small", "sim-chat-small", 8192)],
    )
    try:
        yield org, raw, node
    finally:
        faults(sim, fault_500_rate=0.0, spike_rate=0.0)


def test_the_simulators_500s_fire_an_error_rate_alert_that_resolves_once_cleared(
    setup, sim, outbound
):
    org, raw, _node = setup
    AlertRule.objects.create(
        organization=org,
        name="errors",
        kind=Kind.ERROR_RATE,
        scope=Scope.MODEL,
        model="sim-chat-small",
        threshold=Decimal(20),
        window_minutes=5,
        min_calls=8,
    )
    with running_gateway() as gw:
        assert set(drive(gw, raw, 6)) == {200}
        evaluate()
        assert outbound.fired == []
        faults(sim, fault_500_rate=1.0)
        statuses = drive(gw, raw, 4)
        assert all(s >= 500 for s in statuses), statuses
        evaluate()
        evaluate()
        assert len(outbound.fired) == 1
        fired = outbound.fired[0]["data"]
        assert fired["subject"] == "model:sim-chat-small"
        assert Decimal(fired["value"]) == Decimal(40)
        faults(sim, fault_500_rate=0.0)
        assert set(drive(gw, raw, 2)) == {200}
    # The failing calls leave the five-minute window: resolved, once.
    evaluate(now=timezone.now() + timedelta(minutes=6))
    evaluate(now=timezone.now() + timedelta(minutes=7))
    assert len(outbound.resolved) == 1
    assert len(outbound.fired) == 1


def test_latency_spikes_fire_a_latency_p99_alert_that_resolves_once_cleared(setup, sim, outbound):
    org, raw, node = setup
    AlertRule.objects.create(
        organization=org,
        name="slow",
        kind=Kind.LATENCY_P99,
        scope=Scope.NODE,
        node=node,
        threshold=Decimal(300),
        window_minutes=5,
        min_calls=3,
    )
    with running_gateway() as gw:
        drive(gw, raw, 3)
        evaluate()
        assert outbound.fired == []
        faults(sim, spike_rate=1.0, spike_ms=600)
        drive(gw, raw, 3)
        evaluate()
        evaluate()
        assert len(outbound.fired) == 1
        assert Decimal(outbound.fired[0]["data"]["value"]) >= 300
        faults(sim, spike_rate=0.0)
    evaluate(now=timezone.now() + timedelta(minutes=6))
    assert len(outbound.resolved) == 1
