"""Ingest: idempotent, never drops an event silently, rates once, and keeps
every rollup equal to the sum of its billed call records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from accounts.models import ApiKey
from tests.usage.factories import PriceFactory, event, expected_rollups, stored_rollups
from usage.ingest import IngestResult, ingest_events
from usage.ingest.pg import copy_stamp
from usage.models import CallRecord, CatalogModel, DeadLetter, Price, Rollup
from usage.prices import unpriced_models

pytestmark = pytest.mark.django_db
T0 = datetime(2025, 3, 4, 10, 15, tzinfo=UTC)
# sim-chat-small list price: input 0.10 $/Mtok, output 0.40 $/Mtok (seed).
SMALL_COST = 1200 * 100_000 // 10**6 + 300 * 400_000 // 10**6  # 120 + 120


def assert_consistent(org_id: int) -> None:
    assert stored_rollups(org_id) == expected_rollups(org_id)


def test_a_batch_is_stored_rated_and_rolled_up(catalog, org, key, team_key):
    events = [event(key), event(team_key, stream=True, node_id=None), event(key, ttft_us=None)]
    assert ingest_events(events) == IngestResult(accepted=3, duplicates=0, dead_lettered=0)
    calls = CallRecord.objects.filter(organization_id=org.pk)
    assert calls.count() == 3
    assert {c.cost for c in calls} == {SMALL_COST}
    assert all(c.priced and c.currency == "USD" and c.price_id for c in calls)
    org_row = Rollup.objects.get(organization_id=org.pk, grain="org")
    assert (org_row.calls, org_row.cost, org_row.stream_calls, org_row.ttft_count) == (
        3,
        3 * SMALL_COST,
        1,
        2,
    )
    assert org_row.hour == T0.replace(minute=0)
    # org, sub-accounts, keys, model, nodes, protocol x streaming, and full cells.
    assert Rollup.objects.filter(organization_id=org.pk).count() == 1 + 2 + 2 + 1 + 2 + 2 + 2
    assert_consistent(org.pk)


def test_the_same_batch_twice_changes_nothing(catalog, org, key):
    events = [event(key) for _ in range(5)]
    ingest_events(events)
    before = stored_rollups(org.pk)
    assert ingest_events(events) == IngestResult(accepted=0, duplicates=5, dead_lettered=0)
    assert CallRecord.objects.count() == 5
    assert stored_rollups(org.pk) == before


def test_duplicates_inside_a_batch_and_overlapping_batches_count_once(catalog, org, key):
    a, b, c, d = (event(key) for _ in range(4))
    assert ingest_events([a, b, a, a]) == IngestResult(2, 2, 0)
    assert ingest_events([b, c, d, c]) == IngestResult(2, 2, 0)
    assert CallRecord.objects.count() == 4
    assert Rollup.objects.get(organization_id=org.pk, grain="org").calls == 4
    assert_consistent(org.pk)


def test_every_bad_event_is_dead_lettered_and_the_rest_still_ingested(
    catalog, org, key, team_key, other_key
):
    future = datetime.now(UTC) + timedelta(hours=2)
    bad = {
        "malformed": "not an object",
        "missing": {k: v for k, v in event(key).items() if k != "model"},
        "unknown org": event(key, organization_id=999_999),
        "unknown key": event(key, api_key_id=999_999),
        "key of another org": event(other_key, organization_id=org.pk),
        "sub-account mismatch": event(team_key, sub_account_id=None),
        "negative tokens": event(key, output_tokens=-1),
        "far future": event(key, started_at=future),
        "bad version": event(key, version=7),
    }
    good = [event(key), event(team_key)]
    result = ingest_events([good[0], *bad.values(), good[1]])
    assert result == IngestResult(accepted=2, duplicates=0, dead_lettered=len(bad))
    reasons = {d.request_id: d.reason for d in DeadLetter.objects.all()}
    assert "unknown organization_id 999999" in reasons[bad["unknown org"]["request_id"]]
    assert "unknown api_key_id 999999" in reasons[bad["unknown key"]["request_id"]]
    assert "belongs to another organization" in reasons[bad["key of another org"]["request_id"]]
    assert (
        "does not match the key's sub-account" in reasons[bad["sub-account mismatch"]["request_id"]]
    )
    assert "output_tokens is negative" in reasons[bad["negative tokens"]["request_id"]]
    assert "in the future" in reasons[bad["far future"]["request_id"]]
    assert "unsupported version 7" in reasons[bad["bad version"]["request_id"]]
    assert "missing field(s): model" in reasons[bad["missing"]["request_id"]]
    assert DeadLetter.objects.get(request_id="").payload == "not an object"
    assert DeadLetter.objects.get(request_id=bad["unknown key"]["request_id"]).organization_id == (
        org.pk
    )
    assert CallRecord.objects.count() == 2
    # Redelivery neither stores them twice nor loses them.
    ingest_events(list(bad.values())[1:])
    assert DeadLetter.objects.count() == len(bad)


def test_a_model_without_a_price_is_recorded_unpriced_flagged_and_counted(catalog, org, key):
    ingest_events([event(key, model="mystery-model"), event(key)])
    call = CallRecord.objects.get(model="mystery-model")
    assert (call.priced, call.cost, call.price_id) == (False, 0, None)
    org_row = Rollup.objects.get(organization_id=org.pk, grain="org")
    assert (org_row.unpriced_calls, org_row.cost) == (1, SMALL_COST)
    assert unpriced_models(org.pk) == ["mystery-model"]
    assert_consistent(org.pk)


def test_late_events_land_in_their_own_hour(catalog, org, key):
    ingest_events([event(key, started_at=T0)])
    late = T0 - timedelta(hours=5, minutes=3)
    ingest_events([event(key, started_at=T0 + timedelta(minutes=1)), event(key, started_at=late)])
    hours = dict(
        Rollup.objects.filter(organization_id=org.pk, grain="org").values_list("hour", "calls")
    )
    assert hours == {T0.replace(minute=0): 2, late.replace(minute=0): 1}
    assert_consistent(org.pk)


def test_the_price_in_effect_at_the_calls_start_is_used(org, key):
    model = CatalogModel.objects.create(name="dated", display_name="Dated")
    change = datetime(2025, 6, 1, tzinfo=UTC)
    PriceFactory(model=model, input_per_mtok=1_000_000, output_per_mtok=0)
    new = PriceFactory(
        model=model, input_per_mtok=3_000_000, output_per_mtok=0, effective_from=change
    )
    just_before = event(key, model="dated", started_at=change - timedelta(microseconds=1))
    at_change = event(key, model="dated", started_at=change)
    ingest_events([just_before, at_change])
    assert CallRecord.objects.get(request_id=just_before["request_id"]).cost == 1200
    call = CallRecord.objects.get(request_id=at_change["request_id"])
    assert (call.cost, call.price_id) == (3600, new.pk)


def test_discount_applies_to_list_prices_and_an_override_replaces_them(
    catalog, org, other_org, key, other_key
):
    org.discount_rate = Decimal("0.850000")
    org.save()
    other_org.discount_rate = Decimal("0.500000")
    other_org.save()
    model = CatalogModel.objects.get(name="sim-chat-small")
    PriceFactory(
        model=model,
        organization=other_org,
        input_per_mtok=50_000,
        output_per_mtok=200_000,
        effective_from=datetime(2025, 1, 1, tzinfo=UTC),
    )
    ingest_events([event(key), event(other_key)])
    # list price x 0.85 = 204
    assert CallRecord.objects.get(organization_id=org.pk).cost == 204
    # negotiated price, not discounted again: 1200 x 0.05 + 300 x 0.2 = 120
    assert CallRecord.objects.get(organization_id=other_org.pk).cost == 120
    # before the override took effect, the org pays the discounted list price
    ingest_events([event(other_key, started_at=datetime(2024, 12, 31, tzinfo=UTC))])
    assert CallRecord.objects.filter(organization_id=other_org.pk, cost=120).count() == 2


def test_a_price_added_later_is_picked_up_without_waiting_for_the_cache(org, key):
    model = CatalogModel.objects.create(name="fresh", display_name="Fresh")
    ingest_events([event(key, model="fresh")])
    Price.objects.create(
        model=model,
        currency="USD",
        input_per_mtok=1_000_000,
        cache_read_per_mtok=0,
        cache_write_per_mtok=0,
        output_per_mtok=0,
        effective_from=datetime(2024, 1, 1, tzinfo=UTC),
    )
    ingest_events([event(key, model="fresh")])
    assert sorted(CallRecord.objects.values_list("priced", flat=True)) == [False, True]


def test_last_used_moves_forward_only(catalog, org, key):
    ingest_events([event(key, started_at=T0), event(key, started_at=T0 + timedelta(minutes=5))])
    key.refresh_from_db()
    latest = key.last_used_at
    assert latest == T0 + timedelta(minutes=5, microseconds=850_000)
    ingest_events([event(key, started_at=T0 - timedelta(days=1))])
    key.refresh_from_db()
    assert key.last_used_at == latest


def test_status_classes_cache_hits_and_token_classes_are_summed(catalog, org, key):
    ingest_events(
        [
            event(key, status_code=429, error_type="rate_limited", output_tokens=0, ttft_us=None),
            event(key, status_code=503, error_type="overloaded", output_tokens=0),
            event(key, status_code=400, error_type="bad_request"),
            event(
                key,
                cache_status="prefix_hit",
                cache_read_tokens=800,
                cache_write_tokens=10,
                reasoning_tokens=100,
            ),
            event(key, latency_us=0, ttft_us=0),
        ]
    )
    row = Rollup.objects.get(organization_id=org.pk, grain="org")
    assert (row.calls_2xx, row.calls_4xx, row.calls_429, row.calls_5xx) == (2, 2, 1, 1)
    assert (row.cache_hit_calls, row.cache_read_tokens, row.reasoning_tokens) == (1, 800, 100)
    assert_consistent(org.pk)


def test_moving_a_key_between_sub_accounts_is_seen_before_refusing(catalog, org, key, team):
    ingest_events([event(key)])
    ApiKey.objects.filter(pk=key.pk).update(sub_account=team)  # no signal: cache is stale
    key.refresh_from_db()
    assert ingest_events([event(key)]).accepted == 1


def test_the_celery_task_is_registered_and_calls_ingest(catalog, org, key):
    from console.kernel.celery import app
    from usage.tasks import ingest_batch

    assert "usage.ingest_batch" in app.tasks
    assert "usage.prune_calls" in app.tasks
    assert ingest_batch.acks_late
    assert ingest_batch.run([event(key)]) == {"accepted": 1, "duplicates": 0, "dead_lettered": 0}


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("2025-03-04T10:15:00.123456+00:00", True),
        ("2025-03-04T10:15:00.123456-05:30", True),
        ("2025-03-04T10:15:00+00:00", True),
        ("2025-03-04T10:15:00.5Z", True),
        ("2025-03-04 10:15:00+01:00", True),
        ("2025-03-04T10:15:00.1234567+00:00", False),  # PostgreSQL rounds, Python truncates
        ("2025-03-04x10:15:00.123456+00:00", False),
        ("20250304T101500+0000", False),
        ("2025-W10-2T10:15:00+00:00", False),
        ("2025-03-04T10:15+00:00", False),
    ],
)
def test_copy_text_keeps_only_timestamps_postgresql_reads_the_same_way(raw, kept):
    parsed = datetime.fromisoformat(raw)
    text = copy_stamp(raw, parsed)
    assert (text == raw) is kept
    assert datetime.fromisoformat(text) == parsed
