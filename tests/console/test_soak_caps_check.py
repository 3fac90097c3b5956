"""The soak's ``caps`` check judges each cap within its own period: a run
that crosses midnight in the organization's time zone starts a daily cap
afresh (as the gateway does), so two days' spend under a daily cap each is
no overspend, while one day over it is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import ApiKey
from tests.factories import OrganizationFactory, SubAccountFactory
from tooling.soak.checks import caps
from tooling.soak.scenario import KeySpec, Scenario
from usage.models import CallRecord

pytestmark = pytest.mark.django_db

MIDNIGHT_IN_SHANGHAI = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)


def _calls(key: ApiKey, *spends: tuple[datetime, int]) -> None:
    CallRecord.objects.bulk_create(
        CallRecord(
            request_id=f"req-{key.pk}-{i}",
            organization_id=key.organization_id,
            sub_account_id=key.sub_account_id,
            api_key_id=key.pk,
            model="sim-chat-small",
            protocol="openai",
            endpoint="chat.completions",
            status_code=200,
            started_at=when,
            finished_at=when + timedelta(seconds=1),
            latency_us=1_000_000,
            currency="USD",
            cost=cost,
        )
        for i, (when, cost) in enumerate(spends)
    )


@pytest.fixture
def world():
    org = OrganizationFactory(timezone="Asia/Shanghai")
    team = SubAccountFactory(organization=org, spend_cap_daily=1_000)
    key = ApiKey.objects.create(
        organization=org, sub_account=team, name="k", secret_hash="0" * 64,
        public_id="soakcaps01", spend_cap_daily=800,
    )  # fmt: skip
    spec = KeySpec("k", "b", "sk-x", key.pk, caps={"spend_cap_daily": 800})
    scenario = Scenario(
        run="t", orgs={"b": org}, subs={"team": team}, keys={"k": spec}, actors={},
        prepaid_balance=10**9, node_ids=[],
    )  # fmt: skip
    return key, scenario


def _rows(report: dict) -> dict:
    return {r.get("key") or r.get("sub_account") or "prepaid": r for r in report["limits"]}


def test_a_run_across_midnight_spends_each_days_cap_afresh(world):
    key, scenario = world
    before, after = MIDNIGHT_IN_SHANGHAI - timedelta(minutes=5), MIDNIGHT_IN_SHANGHAI
    _calls(key, (before, 500), (before, 250), (after, 700))
    report = caps(scenario)
    rows = _rows(report)
    assert report["ok"] is True
    assert (rows["k"]["spent"], rows["k"]["cap"]) == (750, 800)
    assert (rows["team"]["spent"], rows["team"]["cap"]) == (750, 1_000)


def test_one_day_over_its_cap_fails(world):
    key, scenario = world
    after = MIDNIGHT_IN_SHANGHAI + timedelta(minutes=5)
    _calls(key, (after, 500), (after, 400), (MIDNIGHT_IN_SHANGHAI - timedelta(hours=1), 100))
    report = caps(scenario)
    rows = _rows(report)
    assert report["ok"] is False
    assert (rows["k"]["spent"], rows["k"]["ok"]) == (900, False)
    assert (rows["team"]["spent"], rows["team"]["ok"]) == (900, True)
