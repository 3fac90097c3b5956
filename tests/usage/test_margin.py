"""Vendor cost and margin: ingest stores each call's credential and vendor
charge as the gateway sent them (PostgreSQL's COPY and staging paths, the
SQLite writer), the rollups sum the charges comparable with the
organization's currency and count the rest, and ``margin_report`` reads
revenue, cost and margin back from the rollups exactly as the call records
add up."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from tests.services import require
from tests.usage.factories import event, expected_rollups, stored_rollups
from tests.usage.margin_fixtures import T0, USD_COST, brute_force, seed_margin
from usage import ingest
from usage.facade import PPM, margin_basis_points, margin_report, rate
from usage.ingest import generic, ingest_events, pg
from usage.margin import NO_UPSTREAM, grouped_query
from usage.models import CallRecord, Rollup

pytestmark = pytest.mark.django_db


# Refused before any upstream: nothing to pay a vendor for.
REFUSED = {"node_id": None, "status_code": 429, "error_type": "rpm_limit_exceeded",
           "input_tokens": 0, "output_tokens": 0, "ttft_us": None}  # fmt: skip


def _charged(key, **fields) -> dict:
    e = event(key, started_at=T0, **fields)
    tokens = (
        e["input_tokens"],
        e["cache_read_tokens"],
        e["cache_write_tokens"],
        e["output_tokens"],
    )
    e.update(upstream_cost=rate(tokens, USD_COST, PPM), upstream_currency="USD")
    return e


def _batch(key, team_key) -> list[dict]:
    return [
        _charged(key, credential_id=11, input_tokens=1234, output_tokens=567),
        _charged(team_key, credential_id=12, model="sim-chat-large", node_id=2),
        {**event(key, started_at=T0), "upstream_cost": 500, "upstream_currency": "EUR"},
        event(key, started_at=T0),  # served by a node without a cost price
        event(key, started_at=T0, **REFUSED),
    ]


def _stored_as_sent(events: list[dict]) -> None:
    records = CallRecord.objects.in_bulk([e["request_id"] for e in events])
    for e in events:
        r = records[e["request_id"]]
        sent = (e["credential_id"], e["upstream_cost"], e["upstream_currency"])
        assert (r.credential_id, r.upstream_cost, r.upstream_currency) == sent


def test_the_credential_and_the_vendors_charge_are_stored_and_rolled_up(
    catalog, org, key, team_key
):
    # Given a USD organization's calls: two at a USD cost price, one charged
    # in EUR, one from a node without a cost price, one refused
    events = _batch(key, team_key)
    # When they are ingested (COPY on PostgreSQL, the bulk insert on SQLite)
    assert ingest_events(events).accepted == 5
    # Then each call keeps its credential and charge as sent
    _stored_as_sent(events)
    assert CallRecord.objects.get(request_id=events[0]["request_id"]).upstream_cost == 256
    # ... the rollups sum the comparable charges and count the two uncosted calls
    row = Rollup.objects.get(organization_id=org.pk, grain="org")
    assert row.upstream_cost == events[0]["upstream_cost"] + events[1]["upstream_cost"]
    assert row.uncosted_calls == 2
    # ... at every grain, exactly as the call records add up
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
    # And an overlapping redelivery (PostgreSQL: through the staging table) adds only the new call
    extra = _charged(key, credential_id=13)
    assert ingest_events([*events[:3], extra]).accepted == 1
    _stored_as_sent([*events, extra])
    assert stored_rollups(org.pk) == expected_rollups(org.pk)


def test_the_generic_writer_stores_them_too(catalog, org, key, team_key):
    """SQLite's writer; on PostgreSQL the same writer, run on purpose."""
    events = _batch(key, team_key)
    ingest._ingest(events[:3], generic.STORE)
    ingest._ingest(events, generic.STORE)
    _stored_as_sent(events)
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
    if connection.vendor == "postgresql":
        later = [_charged(key, credential_id=14) for _ in range(3)]
        ingest._ingest(later, pg.STORE)
        _stored_as_sent(later)
        assert stored_rollups(org.pk) == expected_rollups(org.pk)


def _figures(lines) -> dict[tuple, list[int]]:
    return {(m.key, m.currency): [m.calls, m.revenue, m.cost, m.uncosted_calls] for m in lines}


def test_the_rollup_figures_equal_the_call_records_to_the_micro_unit(catalog):
    # Given calls of a USD and an EUR organization over two days
    world = seed_margin()
    start, end = T0, T0 + timedelta(days=2)
    # When the margin of the two days is read from the rollups
    report = margin_report(start=start, end=end)
    # Then every table equals the call records' sums, per currency
    assert _figures(report.by_model) == brute_force("model", start, end)
    assert _figures(report.by_channel) == brute_force("node_id", start, end)
    assert _figures(report.by_organization) == brute_force("organization_id", start, end)
    totals = {}
    for (_org, cur), sums in brute_force("organization_id", start, end).items():
        totals[("", cur)] = [
            a + b for a, b in zip(totals.get(("", cur), [0] * 4), sums, strict=True)
        ]
    assert _figures(report.totals) == totals
    # ... the revenue is real money and some of it has a comparable cost
    usd = next(t for t in report.totals if t.currency == "USD")
    assert usd.revenue > usd.cost > 0 and usd.margin == usd.revenue - usd.cost
    assert report.uncosted_calls == 4  # per day: the USD node without a price, the EUR at USD
    # ... the days split the same totals
    for t in report.totals:
        days = [d for d in report.days if d.currency == t.currency]
        assert [d.day for d in days] == [T0.date(), T0.date() + timedelta(days=1)]
        assert sum(d.revenue for d in days) == t.revenue
        assert sum(d.cost for d in days) == t.cost
    # ... and the groups are named
    labels = {m.key: m.label for m in report.by_channel}
    assert labels == {world.vendor.pk: "vendor-openai", world.local.pk: "gpu-local", 0: NO_UPSTREAM}
    assert {m.label for m in report.by_organization} == {"Acme", "=Globex"}


def test_a_range_reads_only_its_hours(catalog):
    seed_margin()
    first_day = margin_report(start=T0, end=T0 + timedelta(days=1))
    assert _figures(first_day.by_model) == brute_force("model", T0, T0 + timedelta(days=1))
    assert all(d.day == T0.date() for d in first_day.days)
    nothing = margin_report(start=T0 - timedelta(days=3), end=T0)
    assert (nothing.totals, nothing.by_model, nothing.days) == ([], [], [])


def test_a_range_is_whole_utc_hours():
    with pytest.raises(ValueError, match="whole UTC hour"):
        margin_report(start=T0 + timedelta(minutes=30), end=T0 + timedelta(hours=2))
    with pytest.raises(ValueError, match="end must be after start"):
        margin_report(start=T0, end=T0)


@pytest.mark.parametrize(
    ("margin", "revenue", "bp"),
    [
        (1, 3, 3333),
        (2, 3, 6667),
        (1, 8, 1250),
        (-1, 8, -1250),
        (5, 20_000, 3),  # 2.5 basis points: a half rounds away from zero
        (-5, 20_000, -3),
        (1, 40_000, 0),  # 0.25
        (7, 7, 10_000),
        (-21, 7, -30_000),  # cost three times revenue above it
        (0, 5, 0),
        (3, 0, None),  # no revenue: no share
    ],
)
def test_the_margin_share_is_integer_basis_points(margin, revenue, bp):
    assert margin_basis_points(margin, revenue) == bp


# The platform's rollups: a year of hours, every grain, the FULL grain
# (sub-account x key x model x node x protocol x streaming) by far the largest.
ROLLUPS_SQL = """
INSERT INTO usage_rollup (
    organization_id, grain, sub_account_id, api_key_id, model, node_id, hour, currency,
    calls, calls_2xx, calls_4xx, calls_429, calls_5xx, stream_calls, cache_hit_calls,
    unpriced_calls, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
    reasoning_tokens, cost, latency_sum_us, ttft_count, ttft_sum_us, latency_hist, ttft_hist,
    updated_at
)
SELECT 1 + g %% 40,
       (ARRAY['full','full','full','full','full','full','key','sub','traffic','org','model',
              'node'])[1 + g %% 12],
       g %% 7, g %% 97, 'm' || (g %% 9), g %% 5, %s - (g / 40) * interval '1 hour', 'USD',
       1, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 5, 0, 7, 1000, 0, 0, '', '', now()
FROM generate_series(1, 200000) AS g
"""


def test_on_postgresql_the_margin_reads_an_index_range_of_its_grain():
    require(connection.vendor == "postgresql", "query plans are checked on PostgreSQL")
    with connection.cursor() as cur:
        cur.execute(ROLLUPS_SQL, [T0])
        cur.execute("ANALYZE usage_rollup")
    for grain, column in (("model", "model"), ("node", "node_id"), ("org", "organization_id")):
        qs = grouped_query(grain, T0 - timedelta(days=7), T0, column)
        text = qs.explain()
        assert "Seq Scan on usage_rollup" not in text, text
        assert "usage_rollup_platform" in text, text
