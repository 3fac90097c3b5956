"""What the analytics charts say around their figures: the range's total on
Spend and Cache (above the chart and as the CSV's last row), the bucket that
is still running marked as such, p99 and p99.9 told apart, the two cache
figures named apart with a word on each, and no page banner that is always
on."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts.models import Role
from console.kernel.money import format_amount
from tests.console.test_analytics_data import RANGE
from tests.console.test_analytics_unknown_models import _ingest
from tests.console.test_analytics_views import calls_of, figure_of, login

pytest_plugins = ["tests.console.test_analytics_data"]

pytestmark = pytest.mark.django_db


def _csv(client, chart: str, params=RANGE, **extra) -> list[dict]:
    r = client.get(reverse(f"analytics:chart_{chart}"), {**params, **extra, "format": "csv"})
    assert r.status_code == 200
    return list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))


def test_spend_says_the_total_for_the_range_above_the_chart_and_in_the_csv(client, data):
    login(client, data)
    cost = sum(c.cost for c in calls_of(data))
    html = client.get(reverse("analytics:chart_spend"), RANGE).content.decode()
    assert 'id="summary-spend"' in html
    assert f"{format_amount(cost, 'USD')} in all over this range" in html
    rows = _csv(client, "spend", stack="key")
    total = rows.pop()
    assert total["bucket_start"] == "total" and total["series"] == "Total"
    assert Decimal(total["spend_USD"]) * 10**6 == cost
    assert int(total["calls"]) == sum(int(r["calls"]) for r in rows) == len(calls_of(data))


def test_cache_says_the_share_and_the_savings_for_the_range(client, data):
    login(client, data)
    calls = calls_of(data)
    cached = sum(c.cache_read_tokens for c in calls)
    prompt = sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens for c in calls)
    html = client.get(reverse("analytics:chart_cache_hit"), RANGE).content.decode()
    share = f"{100 * cached / prompt:.1f} %"
    assert f"Over this range: {share} of prompt tokens served from cache" in html
    assert f"({cached:,} of {prompt:,})" in html
    total = _csv(client, "cache_hit").pop()
    assert total["bucket_start"] == "total"
    assert int(total["cached_prompt_tokens"]) == cached
    assert int(total["prompt_tokens"]) == prompt

    rows = _csv(client, "cache_savings")
    total = rows.pop()
    assert total["bucket_start"] == "total"
    saved = sum(Decimal(r["saved_USD"]) for r in rows)
    assert Decimal(total["saved_USD"]) == saved > 0
    html = client.get(reverse("analytics:chart_cache_savings"), RANGE).content.decode()
    assert f"{format_amount(int(saved * 10**6), 'USD')} saved in all over this range" in html


def test_the_bucket_still_running_is_marked_and_a_finished_range_is_not(client, data):
    login(client, data)
    now = datetime.now(UTC)
    _ingest(data, now.replace(minute=0, second=0, microsecond=0), 2, model="sim-chat-small",
            served=True)  # fmt: skip
    r = client.get(reverse("analytics:chart_spend"), {"range": "24h"})
    html = r.content.decode()
    assert "The last hour" in html and "is still running" in html
    fig = figure_of(r)
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert bars and all(t["marker"]["opacity"][-1] < 1 == t["marker"]["opacity"][0] for t in bars)
    assert any(s["type"] == "rect" for s in fig["layout"]["shapes"])
    # Lines get the band behind the running hour too.
    fig = figure_of(client.get(reverse("analytics:chart_latency"), {"range": "24h"}))
    assert fig["layout"]["shapes"]
    # A range that ended long ago has nothing running.
    r = client.get(reverse("analytics:chart_spend"), RANGE)
    assert "still running" not in r.content.decode()
    assert not figure_of(r)["layout"].get("shapes")


def test_p99_and_p999_are_drawn_in_different_dashes(client, data):
    login(client, data)
    fig = figure_of(client.get(reverse("analytics:chart_latency"), RANGE))
    dash = {t["name"]: t["line"].get("dash") for t in fig["data"]}
    assert dash["p99"] and dash["p99.9"] and dash["p99"] != dash["p99.9"]
    assert len({dash["p50"], dash["p99"], dash["p99.9"]}) == 3
    assert fig["layout"]["legend"]


def test_the_two_cache_figures_have_different_names_and_a_word_each(client, data):
    login(client, data)
    now = datetime.now(UTC)
    _ingest(data, now - timedelta(minutes=10), 1, model="sim-chat-small", served=True)
    kpis = client.get(reverse("analytics:chart_overview_kpis")).content.decode()
    assert "Cached prompt share" in kpis and "Cache hit rate" not in kpis
    assert "engine prefix-cache hit rate" in kpis
    load = client.get(reverse("analytics:chart_node_load"), RANGE).content.decode()
    assert "Engine prefix-cache hit rate" in load
    assert "cached prompt share" in load
    table = client.get(reverse("analytics:chart_node_table"), RANGE).content.decode()
    assert "Cached prompt share" in table and ">Cache hit<" not in table


def test_no_page_banner_is_always_on(client, data):
    login(client, data, Role.ADMIN)
    for page in ("latency", "cache", "spend", "errors", "nodes"):
        html = client.get(reverse(f"analytics:{page}"), RANGE).content.decode()
        assert 'class="note"' not in html, page
        assert "rollups" not in html, page
    # The word on the protocol filter comes with the filter, in plain words.
    html = client.get(reverse("analytics:latency"), {**RANGE, "protocol": "openai"}).content
    assert b"older calls do not appear under these two filters" in html
    html = client.get(reverse("analytics:latency"), RANGE).content
    assert b"older calls do not appear" not in html
