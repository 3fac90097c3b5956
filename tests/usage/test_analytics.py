"""Analytics read rollups only; every answer equals a brute-force
recomputation from the call records (percentiles within 1 %)."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from usage import analytics
from usage.ingest import ingest_events
from usage.models import CallRecord, Grain
from usage.percentiles import EXACT_BELOW
from usage.sketch import RELATIVE_ACCURACY
from usage.synth import batched, ensure_org, generate

pytestmark = pytest.mark.django_db
START = datetime(2025, 2, 3, tzinfo=UTC)
END = START + timedelta(days=2)
FIELDS = ("calls", "calls_2xx", "calls_429", "calls_5xx", "cache_hit_calls", "input_tokens", "cost")


@pytest.fixture
def usage_data(catalog):
    org, keys = ensure_org("analytics")
    for chunk in batched(generate(keys, start=START, hours=48, calls=2500, seed=11), 400):
        ingest_events(chunk)
    return org, keys


def records(org, filters, start=START, end=END):
    qs = CallRecord.objects.filter(
        organization_id=org.pk, started_at__gte=start, started_at__lt=end
    )
    for dim, value in (filters or {}).items():
        qs = qs.filter(**({f"{dim}__isnull": True} if value == 0 else {dim: value}))
    return list(qs)


def brute_totals(calls) -> dict:
    return {
        "calls": len(calls),
        "calls_2xx": sum(200 <= c.status_code < 300 for c in calls),
        "calls_429": sum(c.status_code == 429 for c in calls),
        "calls_5xx": sum(c.status_code >= 500 for c in calls),
        "cache_hit_calls": sum(c.cache_status != "miss" for c in calls),
        "input_tokens": sum(c.input_tokens for c in calls),
        "cost": sum(c.cost for c in calls),
    }


def exact_ms(values, q):
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))] / 1000


def filter_cases(keys):
    team = next(k for k in keys if k.sub_account_id)
    # Combinations that occur in the data (each key calls a few models, each
    # model runs on a few nodes).
    team_model = (
        CallRecord.objects.filter(api_key_id=team.key_id).values_list("model", flat=True).first()
    )
    model, node = (
        CallRecord.objects.filter(organization_id=team.organization_id, node_id__isnull=False)
        .values_list("model", "node_id")
        .first()
    )
    return [
        None,
        {"sub_account_id": team.sub_account_id},
        {"sub_account_id": 0},
        {"api_key_id": keys[1].key_id},
        {"model": model},
        {"node_id": node},
        {"model": model, "node_id": node},
        {"api_key_id": team.key_id, "model": team_model, "sub_account_id": team.sub_account_id},
    ]


def test_grain_selection():
    assert analytics.choose_grain(None) == Grain.ORG
    assert analytics.choose_grain({"model": "m"}) == Grain.MODEL
    assert analytics.choose_grain({"api_key_id": 3, "model": None}) == Grain.KEY
    assert analytics.choose_grain({"model": "m", "node_id": 1}) == Grain.FULL
    assert analytics.choose_grain(None, "sub_account_id") == Grain.SUB_ACCOUNT
    assert analytics.choose_grain({"model": "m"}, "model") == Grain.MODEL
    assert analytics.choose_grain({"model": "m"}, "node_id") == Grain.FULL
    assert analytics.choose_grain({"model": "m"}, "day") == Grain.MODEL
    # Protocol and streaming: the traffic grain, which keeps the model too.
    assert analytics.choose_grain({"protocol": "gemini"}) == Grain.TRAFFIC
    assert analytics.choose_grain({"mode": "stream", "model": "m"}) == Grain.TRAFFIC
    assert analytics.choose_grain({"protocol": "openai"}, "model") == Grain.TRAFFIC
    assert analytics.choose_grain({"protocol": "openai", "api_key_id": 3}) == Grain.FULL
    with pytest.raises(ValueError, match="unknown filter"):
        analytics.choose_grain({"colour": "red"})


def test_totals_equal_the_call_records_for_every_filter(usage_data):
    org, keys = usage_data
    for filters in filter_cases(keys):
        got = analytics.totals(org.pk, START, END, filters=filters)
        assert {f: got[f] for f in FIELDS} == brute_totals(records(org, filters)), filters


@pytest.mark.parametrize("group_by", ["model", "api_key_id", "sub_account_id", "node_id", "day"])
def test_grouped_totals_equal_the_call_records(usage_data, group_by):
    org, _keys = usage_data
    for filters in (None, {"model": "sim-chat-small"}):
        groups = defaultdict(list)
        for c in records(org, filters):
            if group_by == "day":
                value = c.started_at.astimezone(UTC).replace(
                    hour=0, minute=0, second=0, microsecond=0
                )
            else:
                value = getattr(c, group_by)
                value = value if value is not None else (0 if group_by != "model" else "")
            groups[value].append(c)
        got = analytics.totals(org.pk, START, END, filters=filters, group_by=group_by)
        assert {g[group_by]: {f: g[f] for f in FIELDS} for g in got} == {
            value: brute_totals(calls) for value, calls in groups.items()
        }


def nearest_rank_ms(values, q):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(round(q * len(ordered), 9))) - 1] / 1000


def test_percentiles_are_exact_for_few_calls_and_within_one_percent_for_many(usage_data):
    org, keys = usage_data
    sizes = set()
    for filters in [None, *filter_cases(keys)]:
        calls = records(org, filters)
        assert calls, filters
        got = analytics.percentiles(org.pk, START, END, filters=filters, quantiles=(0.5, 0.9, 0.99))
        assert got["calls"] == len(calls)
        ttfts = [c.ttft_us for c in calls if c.ttft_us is not None]
        for which, values in (("latency_ms", [c.latency_us for c in calls]), ("ttft_ms", ttfts)):
            if not values:
                continue
            sizes.add(len(values) < EXACT_BELOW)
            for q in (0.5, 0.9, 0.99):
                if len(values) < EXACT_BELOW:
                    assert got[which][q] == nearest_rank_ms(values, q), (filters, which, q)
                else:
                    want = exact_ms(values, q)
                    assert abs(got[which][q] - want) <= want * RELATIVE_ACCURACY * (1 + 1e-9)
    assert sizes == {True, False}  # both ways were taken


def test_the_hourly_series_covers_every_hour_and_matches_the_records(usage_data):
    org, _keys = usage_data
    start = START + timedelta(hours=12, minutes=30)  # rounded down to 12:00
    end = START + timedelta(hours=18)
    series = analytics.latency_series(org.pk, start, end, filters={"model": "sim-chat-small"})
    assert [p["hour"] for p in series] == [START + timedelta(hours=h) for h in range(12, 18)]
    for point in series:
        calls = records(
            org, {"model": "sim-chat-small"}, point["hour"], point["hour"] + timedelta(hours=1)
        )
        assert point["calls"] == len(calls)
        want = exact_ms([c.latency_us for c in calls], 0.9)
        assert abs(point["latency_ms"][0.9] - want) <= want * RELATIVE_ACCURACY * (1 + 1e-9)
    empty = analytics.latency_series(
        org.pk, END + timedelta(days=1), END + timedelta(days=1, hours=2)
    )
    assert [p["calls"] for p in empty] == [0, 0]
    assert empty[0]["latency_ms"] == {0.5: None, 0.9: None, 0.99: None}


def test_analytics_of_many_calls_never_read_call_records(usage_data):
    org, _keys = usage_data
    assert len(records(org, None)) >= EXACT_BELOW
    with CaptureQueriesContext(connection) as queries:
        analytics.totals(org.pk, START, END, filters={"model": "sim-embed"}, group_by="hour")
        analytics.percentiles(org.pk, START, END)
        analytics.latency_series(org.pk, START, END)
    assert queries.captured_queries
    assert not any("usage_call" in q["sql"] for q in queries.captured_queries)


def test_bad_group_by_is_refused():
    with pytest.raises(ValueError, match="group_by"):
        analytics.totals(1, START, END, group_by="colour")


@pytest.mark.parametrize("rows", [1, 2, 7])
def test_encoded_quantiles_read_what_the_histogram_would(rows):
    import random

    from usage.sketch import LogHistogram

    rng = random.Random(rows)
    parts = []
    for _ in range(rows):
        h = LogHistogram()
        for _ in range(500):
            h.add(0 if rng.random() < 0.01 else int(rng.lognormvariate(12, 1.2)))
        parts.append(h)
    merged = LogHistogram()
    for h in parts:
        merged.merge(h)
    qs = (0.0, 0.001, 0.5, 0.9, 0.99, 1.0)
    got = analytics.encoded_quantiles([h.to_bytes() for h in parts] + [b""], qs)
    assert got == {q: merged.quantile(q) / 1000.0 for q in qs}
    assert analytics.encoded_quantiles([b"", None], qs) == dict.fromkeys(qs)
