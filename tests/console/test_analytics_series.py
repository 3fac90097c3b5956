"""``usage.charts.series`` and ``cache_savings``, the reads behind the
analytics charts: local-day buckets, groups, list filters, percentiles per
bucket, and never a call record."""

from __future__ import annotations

import zoneinfo
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.console.test_analytics_data import END, START, exact_ms
from usage import charts, quantiles
from usage.models import CallRecord

pytest_plugins = ["tests.console.test_analytics_data"]
pytestmark = pytest.mark.django_db
NY = zoneinfo.ZoneInfo("America/New_York")


def test_local_days_follow_daylight_saving_time():
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    start = datetime(2025, 3, 29, 0, tzinfo=berlin)
    days = charts.bucket_starts(start, start + timedelta(days=3), "day", berlin)
    assert [d.isoformat() for d in days] == [
        "2025-03-29T00:00:00+01:00",
        "2025-03-30T00:00:00+01:00",
        "2025-03-31T00:00:00+02:00",
    ]
    index = charts._hour_index(start, start + timedelta(days=3), "day", berlin)
    per_day = defaultdict(int)
    for i in index.values():
        per_day[i] += 1
    assert dict(per_day) == {0: 24, 1: 23, 2: 24}  # the 30th has 23 hours
    assert charts.bucket_starts(start, start + timedelta(hours=2), None) == [start.astimezone(UTC)]
    with pytest.raises(ValueError, match="bucket"):
        charts.bucket_starts(start, start + timedelta(hours=2), "week")


def test_series_per_local_day_and_model_equals_the_call_records(data):
    s = charts.series(
        data.org.pk, START, END, group_by="model", bucket="day", tz=NY, quantiles=(0.5, 0.99)
    )
    assert [b.date().isoformat() for b in s.buckets] == ["2025-02-02", "2025-02-03", "2025-02-04"]
    calls = list(CallRecord.objects.filter(organization_id=data.org.pk))
    want = defaultdict(list)
    for c in calls:
        want[(c.model, c.started_at.astimezone(NY).date())].append(c)
    # Busiest model first.
    per_model = [sum(p["calls"] for p in points) for points in s.groups.values()]
    assert per_model == sorted(per_model, reverse=True)
    assert set(s.groups) == {c.model for c in calls}
    for model, points in s.groups.items():
        for p in points:
            group = want.get((model, p["start"].date()), [])
            assert p["calls"] == len(group)
            assert p["cost"] == sum(c.cost for c in group)
            assert p["cache_read_tokens"] == sum(c.cache_read_tokens for c in group)
            if group:
                for q in (0.5, 0.99):
                    exact = exact_ms([c.latency_us for c in group], q)
                    assert abs(p["latency_ms"][q] - exact) <= exact * 0.01 * (1 + 1e-9)


def test_list_filters_and_whole_range_buckets(data):
    keys = [data.dev_key.pk, data.key_ids[0]]
    s = charts.series(
        data.org.pk, START, END, filters={"api_key_id": keys}, group_by="api_key_id", bucket=None
    )
    calls = CallRecord.objects.filter(organization_id=data.org.pk, api_key_id__in=keys)
    assert set(s.groups) == set(keys)
    assert s.total("calls") == calls.count()
    assert charts.series(data.org.pk, START, END, filters={"api_key_id": []}).total("calls") == 0
    # A list with another filter reads the full grain, still one query per part.
    model = calls.first().model
    s = charts.series(
        data.org.pk, START, END, filters={"api_key_id": keys, "model": model}, quantiles=(0.5,)
    )
    assert s.total("calls") == calls.filter(model=model).count()


def test_the_whole_range_beside_the_buckets_equals_one_bucket_for_the_range(data):
    """``whole=True`` (the overview's figure beside its trend) is what a
    single bucket over the range says, from the same read."""
    qs = (0.5, 0.99)
    for bucket, tz in (("hour", UTC), ("day", NY)):
        both = charts.series(
            data.org.pk, START, END, bucket=bucket, tz=tz, quantiles=qs, whole=True
        )
        (one,) = charts.series(data.org.pk, START, END, bucket=None, tz=tz, quantiles=qs).groups[
            None
        ]
        whole = both.whole[None]
        assert whole["calls"] == one["calls"] == both.total("calls") > 0
        assert whole["cost"] == one["cost"]
        assert whole["latency_ms"] == one["latency_ms"]
        assert whole["ttft_ms"] == one["ttft_ms"]
    values = [c.latency_us for c in CallRecord.objects.filter(organization_id=data.org.pk)]
    assert abs(whole["latency_ms"][0.5] - exact_ms(values, 0.5)) <= exact_ms(values, 0.5) * 0.01


def test_only_the_sums_asked_for_and_the_same_figures(data):
    full = charts.series(data.org.pk, START, END, group_by="model", quantiles=(0.99,))
    few = charts.series(
        data.org.pk, START, END, group_by="model", quantiles=(0.99,), sums=("ttft_count",)
    )
    assert list(few.groups) == list(full.groups)
    for model, points in few.groups.items():
        for p, f in zip(points, full.groups[model], strict=True):
            assert set(p) == {"start", "calls", "ttft_count", "latency_ms", "ttft_ms"}
            assert (p["calls"], p["ttft_count"], p["latency_ms"]) == (
                f["calls"], f["ttft_count"], f["latency_ms"])  # fmt: skip
    with pytest.raises(ValueError, match="not a sum"):
        charts.series(data.org.pk, START, END, sums=("calls; drop",))


def test_series_never_reads_call_records_and_refuses_bad_groups(data):
    with CaptureQueriesContext(connection) as queries:
        charts.series(data.org.pk, START, END, group_by="node_id", quantiles=(0.9,))
        charts.cache_savings(data.org.pk, START, END, discount_ppm=10**6, bucket="day")
    assert len(queries.captured_queries) <= 4
    assert not any("usage_call" in q["sql"] for q in queries.captured_queries)
    with pytest.raises(ValueError, match="group_by"):
        charts.series(data.org.pk, START, END, group_by="colour")


def test_cache_savings_follow_the_organization_discount(data):
    full = charts.cache_savings(data.org.pk, START, END, discount_ppm=10**6, bucket=None)
    half = charts.cache_savings(data.org.pk, START, END, discount_ppm=500_000, bucket=None)
    assert set(full) == set(half)
    for model in full:
        saved, halved = full[model][0]["saved"], half[model][0]["saved"]
        assert saved > 0
        # Rounded half up once per hour: within an hour's rounding of half.
        assert abs(halved - saved / 2) <= 48


@pytest.mark.parametrize("counts", [(1, 2), (300, 5), (70_000, 1), (2**33, 3), (2**63, 2**63)])
def test_merging_encodings_of_any_width_adds_every_bucket(counts):
    import random

    from usage.sketch import LogHistogram, merge_encoded

    rng = random.Random(sum(counts) % 1000)
    parts = []
    for big in counts:
        h = LogHistogram()
        for _ in range(50):
            h.add(int(rng.lognormvariate(12, 1.5)))
        h.add(1234, big)
        h.add(0, 3)
        parts.append(h.to_bytes())
    lo, zero, dense = quantiles._merged_dense(parts)
    want = merge_encoded(parts)
    assert zero == want.zero_count
    assert {lo + i: c for i, c in enumerate(dense) if c} == want.bins
    qs = (0.0, 0.5, 0.99, 1.0)
    assert quantiles.encoded_quantiles(parts, qs) == {q: want.quantile(q) / 1000 for q in qs}
