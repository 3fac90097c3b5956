"""The 100 % spend alert fires at the cap itself: the gateway refuses a key
at its daily cap (429 ``key_daily_cap_exceeded``) while the recorded spend
is still short of the cap (it reserves each call's worst case), so the
refusal counts as the cap reached. Real calls go through the real gateway
to the bundled simulator; their usage events go through the real ingest;
beat's evaluation fires 50 %, 80 %, then 100 % at the refusal, once."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from accounts.actors import Actor
from accounts.models import ApiKey, Role
from console.features.alerts.models import AlertRule, Kind, Scope
from console.features.alerts.services import evaluate
from tests.alerts.conftest import NOW, calls
from tests.factories import MembershipFactory, OrganizationFactory, SubAccountFactory, issue_key
from tests.gateway_bridge.harness import running_gateway
from tests.inference_node.factories import NodeFactory
from tests.simulator_faults import CHAT, TOKEN, request, simulator
from usage.facade import call_rows
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db(transaction=True)

COST = 240  # micro-units of one ingested test call (as in test_evaluate.py)
SHORT = {**CHAT, "max_tokens": 16}  # a small worst case: the cap is reached call by call


@pytest.fixture(scope="module")
def sim():
    with simulator() as node:
        yield node


@pytest.fixture
def org(sim, settings, tmp_path, catalog):
    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_QUEUE_TIMEOUT = 2.0
    org = OrganizationFactory(name="Acme", slug="acme-cap-refusal")
    NodeFactory(
        organization=None,
        name="sim-caps",
        base_url=sim.base_url,
        token=TOKEN,
        serves=[("sim-chat-small", "sim-chat-small", 8192)],
    )
    return org


def call(gw, raw) -> int:
    """One call through the gateway, its usage event ingested; the status."""
    before = gw.emitter.emitted
    reply = request(
        gw.url,
        "POST",
        "/v1/chat/completions",
        SHORT,
        {"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
    )
    ingest_events(gw.emitter.wait_for(before + 1)[before:])
    return reply.status


def fired_percents(outbound) -> list[str]:
    return [e["data"]["threshold_key"] for e in outbound.fired]


def test_a_key_refused_at_its_daily_cap_fires_the_100_percent_alert_once(org, outbound):
    owner = Actor(MembershipFactory(organization=org, role=Role.OWNER), "127.0.0.1")
    probe_key, probe_raw = issue_key(owner, name="probe")
    key, raw = issue_key(owner, name="prod")
    with running_gateway() as gw:
        assert call(gw, probe_raw) == 200
        (probe,) = call_rows(api_key_id=probe_key.pk)
        # Twenty calls' cost and half of one: the 21st call's worst case is refused.
        cap = 20 * probe.cost + probe.cost // 2
        ApiKey.objects.filter(pk=key.pk).update(spend_cap_daily=cap)
        AlertRule.objects.create(
            organization=org,
            name="prod daily cap",
            kind=Kind.SPEND_CAP,
            scope=Scope.KEY,
            api_key=key,
            percents=[50, 80, 100],
        )
        statuses = []
        seen_at_refusal = None
        for _ in range(60):
            statuses.append(call(gw, raw))
            evaluate()
            if statuses[-1] == 429:
                seen_at_refusal = fired_percents(outbound)
                break
    assert statuses[-1] == 429, statuses
    assert set(statuses[:-1]) == {200}
    refused = [c for c in call_rows(api_key_id=key.pk) if c.status_code == 429]
    assert [c.error_type for c in refused] == ["key_daily_cap_exceeded"]
    spent = sum(c.cost for c in call_rows(api_key_id=key.pk))
    assert spent < cap  # the recorded spend never crosses the cap ...
    # ... yet 50 % and 80 % fired on the way, and 100 % on the refusal.
    assert seen_at_refusal == ["50", "80", "100"]
    assert len(outbound.fired) == 3
    hundred = outbound.fired[-1]["data"]
    assert Decimal(hundred["value"]) == cap
    evaluate()
    assert len(outbound.fired) == 3


def test_only_a_refusal_for_the_sub_accounts_own_cap_in_the_period_counts_as_reaching_it(
    org, outbound
):
    """Under an organization-wide rule: a refusal of last month, or for the
    key's own daily cap, reaches nothing of the sub-account's monthly cap;
    this month's ``sub_account_monthly_cap_exceeded`` reaches 100 %."""
    owner = Actor(MembershipFactory(organization=org, role=Role.OWNER), "127.0.0.1")
    team = SubAccountFactory(organization=org, name="research", spend_cap_monthly=10 * COST)
    key, _raw = issue_key(owner, name="research-key", sub_account_id=team.pk)
    AlertRule.objects.create(
        organization=org, name="caps", kind=Kind.SPEND_CAP, scope=Scope.ORG, percents=[100]
    )
    refusal = {"status_code": 429, "input_tokens": 0, "output_tokens": 0}
    calls(key, 4, at=NOW - timedelta(hours=2))
    calls(
        key, 1, at=NOW - timedelta(days=5), error_type="sub_account_monthly_cap_exceeded", **refusal
    )
    calls(key, 1, at=NOW - timedelta(hours=1), error_type="key_daily_cap_exceeded", **refusal)
    evaluate(now=NOW)
    assert outbound.fired == []

    calls(
        key,
        1,
        at=NOW - timedelta(minutes=5),
        error_type="sub_account_monthly_cap_exceeded",
        **refusal,
    )
    evaluate(now=NOW + timedelta(minutes=1))
    evaluate(now=NOW + timedelta(minutes=2))
    (fired,) = outbound.fired
    assert (fired["data"]["subject"], fired["data"]["period"]) == (
        f"sub_account:{team.pk}",
        "m:2026-12",
    )
    assert Decimal(fired["data"]["value"]) == 10 * COST
