"""Seed values rebuilt from the database: calls stored by the real ingest,
periods in the organization's timezone, the prepaid ledger."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from accounts.keys import authenticated_view
from accounts.models import ApiKey
from gateway_bridge.limits import Limits, MemoryLimitStore, plan
from gateway_bridge.limits.rebuild import seed_values
from tests.factories import SubAccountFactory
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.models import CallRecord
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # 17:30 in Kolkata (UTC+05:30)


@pytest.fixture(autouse=True)
def _usage(settings):
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    settings.USAGE_RETENTION_DAYS = 0
    invalidate_price_book()
    invalidate_directory()
    seed_catalog()
    yield
    invalidate_price_book()
    invalidate_directory()


def make_key(org, name, sub=None, **limits) -> ApiKey:
    return ApiKey.objects.create(
        organization=org, sub_account=sub, name=name, secret_hash="0" * 64,
        public_id=f"lim{ApiKey.objects.count():07d}", **limits,
    )  # fmt: skip


def view(key):
    return authenticated_view(
        ApiKey.objects.select_related("organization", "sub_account").get(pk=key.pk)
    )


def calls_at(key, *times, output=300):
    """One call per time; output tokens differ per call so every cost differs."""
    events = [
        event(key, started_at=t, output_tokens=output + 37 * i, input_tokens=1000 + 11 * i)
        for i, t in enumerate(times)
    ]
    assert ingest_events(events).accepted == len(events)


def cost_between(start, end, **filters) -> int:
    rows = CallRecord.objects.filter(started_at__gte=start, started_at__lt=end, **filters)
    return sum(rows.values_list("cost", flat=True))


def test_spend_today_this_month_and_lifetime_in_a_half_hour_timezone(org):
    org.timezone = "Asia/Kolkata"
    org.save()
    team = SubAccountFactory(organization=org, name="team-a", spend_cap_daily=10**9,
                             spend_cap_monthly=10**9, spend_cap_lifetime=10**9)  # fmt: skip
    key = make_key(org, "k", team, spend_cap_daily=10**9, spend_cap_monthly=10**9,
                   spend_cap_lifetime=10**9)  # fmt: skip
    other = make_key(org, "other", team)
    z = UTC
    calls_at(
        key,
        datetime(2026, 12, 1, 18, 10, tzinfo=z),  # 23:40 Dec 1 local: yesterday, same UTC hour
        datetime(2026, 12, 1, 18, 40, tzinfo=z),  # 00:10 Dec 2 local: today, partial hour
        datetime(2026, 12, 2, 9, 0, tzinfo=z),  # today, a whole hour
        datetime(2026, 11, 30, 18, 20, tzinfo=z),  # 23:50 Nov 30 local: last month
        datetime(2026, 11, 30, 18, 45, tzinfo=z),  # 00:15 Dec 1 local: this month
        datetime(2026, 10, 5, 3, 0, tzinfo=z),  # lifetime only
    )
    calls_at(other, datetime(2026, 12, 1, 18, 50, tzinfo=z), datetime(2026, 11, 1, tzinfo=z))
    a = view(key)

    values = seed_values(a, NOW)

    day = (datetime(2026, 12, 1, 18, 30, tzinfo=z), datetime(2026, 12, 2, 18, 30, tzinfo=z))
    month = (datetime(2026, 11, 30, 18, 30, tzinfo=z), datetime(2026, 12, 31, 18, 30, tzinfo=z))
    ever = (datetime(2000, 1, 1, tzinfo=z), datetime(2100, 1, 1, tzinfo=z))
    mine, team_calls = {"api_key_id": key.pk}, {"sub_account_id": team.pk}
    expected = {
        f"{{o:{org.pk}}}cap:k:{key.pk}:d:2026-12-02": cost_between(*day, **mine),
        f"{{o:{org.pk}}}cap:k:{key.pk}:m:2026-12": cost_between(*month, **mine),
        f"{{o:{org.pk}}}cap:k:{key.pk}:life": cost_between(*ever, **mine),
        f"{{o:{org.pk}}}cap:s:{team.pk}:d:2026-12-02": cost_between(*day, **team_calls),
        f"{{o:{org.pk}}}cap:s:{team.pk}:m:2026-12": cost_between(*month, **team_calls),
        f"{{o:{org.pk}}}cap:s:{team.pk}:life": cost_between(*ever, **team_calls),
    }
    assert values == expected
    # Guard the guard: the boundary calls really split the periods.
    costs = [c.cost for c in CallRecord.objects.filter(api_key_id=key.pk).order_by("started_at")]
    _oct5, _nov30a, nov30b, dec1, dec2a, dec2b = costs
    assert values[f"{{o:{org.pk}}}cap:k:{key.pk}:d:2026-12-02"] == dec2a + dec2b
    assert values[f"{{o:{org.pk}}}cap:k:{key.pk}:m:2026-12"] == nov30b + dec1 + dec2a + dec2b
    assert values[f"{{o:{org.pk}}}cap:k:{key.pk}:life"] == sum(costs)
    assert len(set(costs)) == 6


def test_whole_hour_timezones_read_rollups_only(org, django_assert_num_queries):
    org.timezone = "Europe/Berlin"
    org.save()
    key = make_key(org, "k", spend_cap_daily=10**9, spend_cap_monthly=10**9)
    calls_at(
        key, datetime(2026, 12, 1, 22, 59, tzinfo=UTC), datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
    )
    a = view(key)
    late, early = CallRecord.objects.filter(api_key_id=key.pk).order_by("-started_at")
    with django_assert_num_queries(1):
        values = seed_values(a, NOW)
    assert values == {
        f"{{o:{org.pk}}}cap:k:{key.pk}:d:2026-12-02": late.cost,  # 00:00 Dec 2 in Berlin
        f"{{o:{org.pk}}}cap:k:{key.pk}:m:2026-12": late.cost + early.cost,
    }


def test_the_prepaid_bucket_is_minus_the_ledger_balance(org):
    from invoicing.services.ledger import ledger_entry_create

    org.billing_mode = "prepaid"
    org.save()
    key = make_key(org, "k")
    ledger_entry_create(organization_id=org.pk, kind="top_up", amount=5_000_000, reference="t1")
    calls_at(key, datetime(2026, 12, 2, 9, 0, tzinfo=UTC))  # ingest debits the ledger
    spent = CallRecord.objects.get(api_key_id=key.pk).cost
    a = view(key)
    assert seed_values(a, NOW) == {f"{{o:{org.pk}}}bal:o:{org.pk}": -(5_000_000 - spent)}


@pytest.mark.django_db(transaction=True)  # the seeding thread reads committed rows
def test_limits_seed_missing_buckets_from_the_database_and_admit(org):
    key = make_key(org, "k", spend_cap_daily=10_000)
    calls_at(key, datetime(2026, 12, 2, 9, 0, tzinfo=UTC))
    spent = CallRecord.objects.get(api_key_id=key.pk).cost
    a = view(key)
    (day,), _ = plan(a, NOW)

    async def scenario():
        limits = Limits(MemoryLimitStore(clock=NOW.timestamp))
        results = await asyncio.gather(
            limits.admit(a, NOW, "r1", 10_000 - spent, 0, hold_seconds=60),
            limits.admit(a, NOW, "r2", 1, 0, hold_seconds=60),
            return_exceptions=True,
        )
        return results, await limits.store.snapshot(day.key)

    results, (used, reserved) = asyncio.run(scenario())
    # Seeded once with what the database holds: the two together do not fit.
    assert used == spent
    assert sum(1 for r in results if not isinstance(r, Exception)) == 1
    assert reserved in (10_000 - spent, 1)
    assert [getattr(r, "code", None) for r in results if isinstance(r, Exception)] == [
        "key_daily_cap_exceeded"
    ]


def test_a_load_test_key_is_seeded_with_its_own_calls_and_its_sub_account_with_billed_ones(org):
    # A load test marked "not billed" ran in a sub-account next to a billed key.
    team = SubAccountFactory(organization=org, name="team-a", spend_cap_lifetime=10**9)
    load = make_key(org, "load", team, spend_cap_lifetime=10**9, test_traffic=True)
    billed = make_key(org, "billed", team)
    t = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    ingest_events([event(load, started_at=t, is_test=True) for _ in range(3)])
    calls_at(billed, t)
    test_cost = sum(CallRecord.objects.filter(api_key_id=load.pk).values_list("cost", flat=True))
    billed_cost = CallRecord.objects.get(api_key_id=billed.pk).cost

    values = seed_values(view(load), NOW)

    # The key's lifetime cap is the load test's budget: its calls count after a
    # re-seed; it spends no sub-account cap at all ...
    assert values[f"{{o:{org.pk}}}cap:k:{load.pk}:life"] == test_cost > 0
    assert f"{{o:{org.pk}}}cap:s:{team.pk}:life" not in values
    # ... while the sub-account's spend is what its invoice bills.
    team_values = seed_values(view(billed), NOW)
    assert team_values[f"{{o:{org.pk}}}cap:s:{team.pk}:life"] == billed_cost
