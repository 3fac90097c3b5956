"""The breakdown charts through the real views: where time goes (Latency),
429s and refusals by cause (Errors), response-cache hits apart from
prefix-cache hits (Cache). Their numbers equal sums over the call records,
their CSVs hold them, and a developer or another organization sees only
their own calls."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from accounts.models import ApiKey, Role
from tests.console.test_analytics_data import RANGE, START
from tests.console.test_analytics_views import figure_of, login
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.models import CallRecord

pytest_plugins = ["tests.console.test_analytics_data"]
pytestmark = pytest.mark.django_db

RATE = {"rpm_limit_exceeded", "tpm_limit_exceeded"}
QUEUE = {"queue_timeout", "queue_full"}
CODES = (
    (429, "rpm_limit_exceeded"),
    (429, "tpm_limit_exceeded"),
    (429, "key_monthly_cap_exceeded"),
    (429, "sub_account_daily_cap_exceeded"),
    (402, "prepaid_balance_exhausted"),
    (503, "queue_timeout"),
    (429, "queue_full"),
    (429, "upstream_rate_limited"),
)


def add_breakdown_calls(dataset, hours: int = 6) -> None:
    """Calls with queue times, response-cache hits and every refusal code, on
    every key of the organization (the developer's too), over a few hours:
    the synthetic traffic has none of these."""
    keys = list(ApiKey.objects.filter(pk__in=dataset.key_ids).order_by("pk"))
    events = []
    for i in range(hours * 20):
        k = keys[i % len(keys)]
        kw = {
            "queue_us": (None, 0, 3_000, 25_000)[i % 4],
            "overhead_us": 1_000 + 37 * i,
            "upstream_us": None if i % 9 == 0 else 300_000 + 11 * i,
            "ttft_us": None if i % 5 == 0 else 150_000 + 13 * i,
            "cache_status": ("miss", "prefix_hit", "response_hit")[i % 3],
        }
        if i % 4 == 1:
            status, code = CODES[i // 4 % len(CODES)]
            kw.update(status_code=status, error_type=code, output_tokens=0, ttft_us=None)
        when = START + timedelta(hours=i % hours, minutes=i % 53, seconds=i)
        events.append(event(k, started_at=when, duration_us=400_000 + 101 * i, **kw))
    assert ingest_events(events).accepted == len(events)


@pytest.fixture
def mixed(data):
    add_breakdown_calls(data)
    return data


def csv_rows(client, chart, **extra) -> list[dict]:
    r = client.get(reverse(f"analytics:chart_{chart}"), {**RANGE, **extra, "format": "csv"})
    assert r.status_code == 200
    assert r["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))


def hourly(calls) -> dict[datetime, list]:
    out = defaultdict(list)
    for c in calls:
        out[c.started_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)].append(c)
    return out


def rows_by_hour(rows) -> dict[datetime, dict]:
    """The CSV's buckets by their start (the range's total row left out)."""
    return {
        datetime.fromisoformat(r["bucket_start"]): r for r in rows if r["bucket_start"] != "total"
    }


def per_call_ms(total_us: int, calls: int) -> float:
    return round(total_us / calls / 1000, 3)


def cause(c) -> str | None:
    if c.error_type in RATE:
        return "rate_limited_calls"
    if c.error_type.endswith("_cap_exceeded") or c.error_type == "prepaid_balance_exhausted":
        return "cap_refused_calls"
    if c.error_type in QUEUE:
        return "queue_refused_calls"
    return None


def check_time_breakdown(rows, calls) -> int:
    """Each bucket's figures against the call records; returns the hours checked."""
    want = hourly(calls)
    checked = 0
    for hour, row in rows_by_hour(rows).items():
        group = want.get(hour, [])
        assert int(row["calls"]) == len(group)
        if not group:
            assert row["mean_latency_ms"] == ""
            continue
        n = len(group)
        lat = sum(c.latency_us for c in group)
        ttft = sum(c.ttft_us for c in group if c.ttft_us is not None)
        queue = sum(c.queue_us or 0 for c in group)
        overhead = sum(c.overhead_us or 0 for c in group)
        upstream = sum(c.upstream_us or 0 for c in group)
        assert int(row["calls_with_ttft"]) == sum(c.ttft_us is not None for c in group)
        assert [int(row[f"{k}_sum_us"]) for k in ("latency", "ttft", "queue", "overhead")] == [
            lat,
            ttft,
            queue,
            overhead,
        ]
        assert int(row["upstream_sum_us"]) == upstream
        assert float(row["mean_latency_ms"]) == per_call_ms(lat, n)
        if not (queue or overhead or upstream):
            assert row["queue_ms"] == row["decode_ms"] == ""
            continue
        assert float(row["queue_ms"]) == per_call_ms(queue, n)
        assert float(row["overhead_ms"]) == per_call_ms(overhead, n)
        assert float(row["first_token_ms"]) == per_call_ms(max(0, ttft - queue - overhead), n)
        assert float(row["decode_ms"]) == per_call_ms(max(0, lat - ttft), n)
        assert float(row["mean_upstream_ms"]) == per_call_ms(upstream, n)
        parts = sum(float(row[k]) for k in ("queue_ms", "overhead_ms", "first_token_ms"))
        if ttft >= queue + overhead:
            # No floor applied: the parts add up to the mean latency.
            assert abs(parts + float(row["decode_ms"]) - float(row["mean_latency_ms"])) < 0.01
        checked += 1
    return checked


def check_refusals(rows, calls) -> int:
    want = hourly(calls)
    refused = 0
    for hour, row in rows_by_hour(rows).items():
        group = want.get(hour, [])
        assert int(row["calls"]) == len(group)
        assert int(row["calls_429"]) == sum(c.status_code == 429 for c in group)
        for column in ("rate_limited_calls", "cap_refused_calls", "queue_refused_calls"):
            assert int(row[column]) == sum(cause(c) == column for c in group), (hour, column)
            refused += int(row[column])
    return refused


def check_cache(rows, calls) -> int:
    want = hourly(calls)
    response = 0
    for hour, row in rows_by_hour(rows).items():
        group = want.get(hour, [])
        hits = sum(c.cache_status == "response_hit" for c in group)
        prefix = sum(c.cache_status == "prefix_hit" for c in group)
        assert int(row["calls"]) == len(group)
        assert int(row["response_cache_calls"]) == hits
        assert int(row["prefix_hit_calls"]) == prefix
        assert int(row["calls_with_cache_hit"]) == hits + prefix
        if group:
            assert float(row["response_hit_share_pct"]) == round(100 * hits / len(group), 3)
            assert float(row["prefix_hit_share_pct"]) == round(100 * prefix / len(group), 3)
        response += hits
    return response


def test_where_time_goes_equals_the_call_records(client, mixed):
    login(client, mixed)
    calls = list(CallRecord.objects.filter(organization_id=mixed.org.pk))
    rows = csv_rows(client, "time_breakdown")
    assert len(rows) == 48
    assert check_time_breakdown(rows, calls) > 40
    # Filtered by a model: the same, over that model's calls.
    rows = csv_rows(client, "time_breakdown", model="sim-chat-small")
    check_time_breakdown(rows, [c for c in calls if c.model == "sim-chat-small"])
    # The chart draws the CSV's numbers: four stacked parts and the mean latency.
    fig = figure_of(client.get(reverse("analytics:chart_time_breakdown"), RANGE))
    assert fig["layout"]["barmode"] == "stack"
    traces = {t["name"]: t for t in fig["data"]}
    assert list(traces) == [
        "Queue",
        "Gateway overhead",
        "Upstream to first token",
        "Decode",
        "Mean latency",
    ]
    rows = csv_rows(client, "time_breakdown")
    by_hour = rows_by_hour(rows)
    assert len(rows) == len(traces["Queue"]["y"])
    for name, column in (("Queue", "queue_ms"), ("Decode", "decode_ms")):
        got = [v for v in traces[name]["y"] if v is not None]
        assert got == [float(r[column]) for r in by_hour.values() if r[column]]
    html = client.get(reverse("analytics:chart_time_breakdown"), RANGE).content.decode()
    assert "upstream to first token = time to first token minus queue and overhead" in html


def test_refusals_by_cause_equal_the_call_records(client, mixed):
    login(client, mixed)
    calls = list(CallRecord.objects.filter(organization_id=mixed.org.pk))
    rows = csv_rows(client, "refusals")
    assert check_refusals(rows, calls) == sum(cause(c) is not None for c in calls) > 0
    fig = figure_of(client.get(reverse("analytics:chart_refusals"), RANGE))
    names = [t["name"] for t in fig["data"]]
    assert names == [
        "Rate limit (requests or tokens per minute)",
        "Spend cap or prepaid balance",
        "Queue full or timed out",
        "All 429s",
    ]
    caps = fig["data"][1]
    assert sum(caps["y"]) == sum(cause(c) == "cap_refused_calls" for c in calls)


def test_response_cache_hits_are_their_own_series(client, mixed):
    login(client, mixed)
    calls = list(CallRecord.objects.filter(organization_id=mixed.org.pk))
    rows = csv_rows(client, "cache_hit")
    assert check_cache(rows, calls) == sum(c.cache_status == "response_hit" for c in calls) > 0
    fig = figure_of(client.get(reverse("analytics:chart_cache_hit"), RANGE))
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {
        "Prompt tokens served from cache",
        "Calls with a prefix-cache hit",
        "Calls answered from the response cache",
    }
    by_hour = rows_by_hour(rows)
    response = traces["Calls answered from the response cache"]
    assert [v for v in response["y"] if v is not None] == [
        float(r["response_hit_share_pct"]) for r in by_hour.values() if r["calls"] != "0"
    ]


def test_a_developer_sees_only_their_own_keys(client, mixed):
    login(client, mixed, Role.DEVELOPER)
    mine = list(CallRecord.objects.filter(api_key_id=mixed.dev_key.pk))
    everyone = CallRecord.objects.filter(organization_id=mixed.org.pk).count()
    assert mine and len(mine) < everyone
    assert check_time_breakdown(csv_rows(client, "time_breakdown"), mine)
    assert check_refusals(csv_rows(client, "refusals"), mine) == sum(
        cause(c) is not None for c in mine
    )
    assert check_cache(csv_rows(client, "cache_hit"), mine) == sum(
        c.cache_status == "response_hit" for c in mine
    )
    # A colleague's key as a filter is refused, not answered.
    other_key = next(k for k in mixed.key_ids if k != mixed.dev_key.pk)
    for chart in ("time_breakdown", "refusals"):
        r = client.get(reverse(f"analytics:chart_{chart}"), {**RANGE, "key": other_key})
        assert r.status_code == 400


def test_another_organization_sees_only_its_own_calls(client, mixed, other):
    add_breakdown_calls(other, hours=2)
    login(client, other)
    theirs = list(CallRecord.objects.filter(organization_id=other.org.pk))
    assert check_time_breakdown(csv_rows(client, "time_breakdown"), theirs)
    assert check_refusals(csv_rows(client, "refusals"), theirs) == sum(
        cause(c) is not None for c in theirs
    )
    assert check_cache(csv_rows(client, "cache_hit"), theirs)


def test_pages_show_the_breakdowns_and_no_longer_say_they_are_missing(client, mixed):
    login(client, mixed)
    pages = {
        "latency": "chart_time_breakdown",
        "errors": "chart_refusals",
        "cache": "chart_cache_hit",
    }
    for page, chart in pages.items():
        html = client.get(reverse(f"analytics:{page}"), RANGE).content.decode()
        assert f'hx-get="{reverse(f"analytics:{chart}")}?' in html, page
        for gone in ("is not shown", "not split by cause", "not shown on their own"):
            assert gone not in html, (page, gone)
    latency = client.get(reverse("analytics:latency"), RANGE).content.decode()
    assert 'name="protocol"' in latency and 'name="stream"' in latency
    assert "cannot be told apart" not in latency


def test_quiet_ranges_say_so(client, data):
    login(client, data)
    quiet = {"range": "custom", "from": "2024-06-01T00:00", "to": "2024-06-02T00:00"}
    for chart in ("time_breakdown", "refusals"):
        html = client.get(reverse(f"analytics:chart_{chart}"), quiet).content.decode()
        assert "No calls between 2024-06-01 00:00 and 2024-06-02 00:00" in html


def test_hours_without_these_times_are_left_blank(client, data):
    """Rows rolled up before the sums existed hold 0: no parts, not a bar
    that is all upstream to first token."""
    from usage.models import Rollup

    hour = START + timedelta(hours=5)
    Rollup.objects.filter(organization_id=data.org.pk, hour=hour).update(
        queue_sum_us=0, overhead_sum_us=0, upstream_sum_us=0
    )
    login(client, data)
    row = rows_by_hour(csv_rows(client, "time_breakdown"))[hour]
    assert float(row["mean_latency_ms"]) > 0
    assert [row[k] for k in ("queue_ms", "overhead_ms", "first_token_ms", "decode_ms")] == [""] * 4
    fig = figure_of(client.get(reverse("analytics:chart_time_breakdown"), RANGE))
    decode = next(t for t in fig["data"] if t["name"] == "Decode")
    assert decode["y"][5] is None and decode["y"][4] > 0
