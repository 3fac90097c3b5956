"""Percentiles of few calls are exact: the nearest-rank order statistics of
the stored calls (p100 is the slowest call, p99.9 never above it); of many
calls they come from the sketches, within their 1 %."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import ApiKey
from tests.usage.factories import event
from usage import analytics
from usage.charts import series
from usage.ingest import ingest_events
from usage.models import CallRecord, Rollup
from usage.percentiles import EXACT_BELOW, nearest_rank
from usage.sketch import RELATIVE_ACCURACY
from usage.synth import ensure_org
from usage.windows import window_stats

pytestmark = pytest.mark.django_db
START = datetime(2025, 3, 4, tzinfo=UTC)
END = START + timedelta(days=1)
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def ranked(values_us, q):
    """The ceil(q * n)-th smallest value, in ms."""
    ordered = sorted(values_us)
    return ordered[max(1, math.ceil(round(q * len(ordered), 9))) - 1] / 1000


def _store(key, latencies_us, ttfts_us=None):
    ttfts_us = ttfts_us or [None] * len(latencies_us)
    events = [
        event(
            key,
            started_at=START + timedelta(minutes=7 * i % 1440),
            duration_us=lat,
            ttft_us=ttft,
            upstream_us=None,
            overhead_us=None,
        )
        for i, (lat, ttft) in enumerate(zip(latencies_us, ttfts_us, strict=True))
    ]
    for i in range(0, len(events), 500):
        ingest_events(events[i : i + 500])


@pytest.fixture
def org_key(catalog):
    org, _keys = ensure_org("exact-percentiles")
    return org, ApiKey.objects.filter(organization=org).first()


latencies = st.lists(st.integers(min_value=1, max_value=120_000_000), min_size=1, max_size=40)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lats=latencies, data=st.data())
def test_few_calls_give_the_nearest_rank_of_the_stored_calls(org_key, lats, data):
    org, key = org_key
    CallRecord.objects.all().delete()
    Rollup.objects.all().delete()
    ttfts = data.draw(
        st.lists(
            st.one_of(st.none(), st.integers(min_value=0, max_value=10_000_000)),
            min_size=len(lats),
            max_size=len(lats),
        )
    )
    _store(key, lats, ttfts)
    stored = list(CallRecord.objects.filter(organization_id=org.pk))
    got = analytics.percentiles(org.pk, START, END, quantiles=(*QUANTILES, 1.0))
    lat_us = [c.latency_us for c in stored]
    ttft_us = [c.ttft_us for c in stored if c.ttft_us is not None]
    assert got["calls"] == len(stored) == len(lats)
    for q in QUANTILES:
        assert got["latency_ms"][q] == ranked(lat_us, q)
        assert got["ttft_ms"][q] == (ranked(ttft_us, q) if ttft_us else None)
    assert got["latency_ms"][1.0] == max(lat_us) / 1000
    assert got["latency_ms"][0.999] <= max(lat_us) / 1000


def test_sixteen_calls_p99_and_p999_are_the_slowest_call(org_key):
    org, key = org_key
    lats = [300_000 + 97_000 * i for i in range(15)] + [2_450_000]
    _store(key, lats)
    got = analytics.percentiles(org.pk, START, END, quantiles=QUANTILES)
    assert got["latency_ms"][0.99] == got["latency_ms"][0.999] == 2450.0
    assert got["latency_ms"][0.5] == ranked(lats, 0.5)


def test_nearest_rank_reads_the_ceil_rank():
    assert nearest_rank([40, 10, 30, 20], (0.0, 0.25, 0.26, 0.5, 1.0)) == {
        0.0: 0.01, 0.25: 0.01, 0.26: 0.02, 0.5: 0.02, 1.0: 0.04,
    }  # fmt: skip
    assert nearest_rank(list(range(1, 1001)), (0.999,)) == {0.999: 0.999}
    assert nearest_rank([], (0.5,)) == {0.5: None}


def test_many_calls_use_the_sketch_within_one_percent(org_key):
    org, key = org_key
    n = EXACT_BELOW + 50
    lats = [1_000 + (i * 7919) % 3_000_000 for i in range(n)]
    _store(key, lats)
    with CaptureQueriesContext(connection) as queries:
        got = analytics.percentiles(org.pk, START, END, quantiles=QUANTILES)
    assert got["calls"] == n
    assert not any("usage_call" in q["sql"] for q in queries.captured_queries)
    ordered = sorted(lats)
    for q in QUANTILES:
        want = ordered[math.floor(q * (n - 1))] / 1000
        assert abs(got["latency_ms"][q] - want) <= want * RELATIVE_ACCURACY * (1 + 1e-9)


def test_a_chart_of_many_calls_uses_the_sketch_and_of_few_the_records(org_key):
    org, key = org_key
    n = EXACT_BELOW + 50
    lats = [1_000 + (i * 7919) % 3_000_000 for i in range(n)]
    _store(key, lats)
    with CaptureQueriesContext(connection) as queries:
        got = series(org.pk, START, END, bucket=None, quantiles=QUANTILES, hists=("latency",))
    assert not any("usage_call" in q["sql"] for q in queries.captured_queries)
    ordered = sorted(lats)
    point = got.groups[None][0]
    for q in QUANTILES:
        want = ordered[math.floor(q * (n - 1))] / 1000
        assert abs(point["latency_ms"][q] - want) <= want * RELATIVE_ACCURACY * (1 + 1e-9)
    # The hours of a shorter range hold few calls: exact, from the records.
    short = series(
        org.pk, START, START + timedelta(hours=2), quantiles=QUANTILES, hists=("latency",)
    )
    for hour, point in zip(short.buckets, short.groups[None], strict=True):
        mine = [
            c.latency_us
            for c in CallRecord.objects.filter(
                started_at__gte=hour, started_at__lt=hour + timedelta(hours=1)
            )
        ]
        assert point["calls"] == len(mine) > 0
        assert point["latency_ms"] == {q: ranked(mine, q) for q in QUANTILES}


def test_an_alert_window_of_few_calls_has_the_exact_p99(org_key):
    org, key = org_key
    lats = [300_000 + 97_000 * i for i in range(15)] + [2_450_000]
    _store(key, lats)  # spread over hours, some in whole hours, some at the edges
    stats = window_stats(
        organization_id=org.pk, start=START + timedelta(minutes=30), end=START + timedelta(hours=3)
    )
    inside = [
        c.latency_us
        for c in CallRecord.objects.filter(
            started_at__gte=START + timedelta(minutes=30), started_at__lt=START + timedelta(hours=3)
        )
    ]
    assert stats.calls == len(inside) > 1
    assert stats.latency_p99_ms == max(inside) / 1000
