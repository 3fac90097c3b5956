"""The analytics pages in real headless Chromium: log in, open every page,
read the drawn Plotly figures back from the page and check them against the
call records, change a filter and watch the chart change, with no
JavaScript errors. Screenshots go to test-artifacts/."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlencode

import pytest

from accounts.models import Role
from tests.console.test_analytics_data import RANGE, exact_ms
from tests.services import sign_in
from usage.models import CallRecord

pytest_plugins = ["tests.console.test_analytics_data"]
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PAGE_CHARTS = {
    "latency": "latency",
    "cache": "cache_hit",
    "spend": "spend",
    "errors": "error_rate",
    "nodes": "node_latency",
    "billing": "billing",
}


def plot_data(page, chart: str) -> list[dict]:
    selector = f"#chart-{chart} .js-plotly-plot"
    page.wait_for_selector(selector, timeout=15000)
    return page.evaluate(
        """(sel) => document.querySelector(sel).data.map(
               t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))""",
        selector,
    )


def test_analytics_pages_draw_the_rollups(live_server, browser_page, data):
    page, errors = browser_page
    user = data.members[Role.OWNER].user
    ARTIFACTS.mkdir(exist_ok=True)
    calls = list(CallRecord.objects.filter(organization_id=data.org.pk))
    hours = defaultdict(list)
    for c in calls:
        hours[c.started_at.strftime("%Y-%m-%d %H:00")].append(c)

    sign_in(page, live_server.url, user)
    page.click("nav.sidebar >> text=Analytics")
    page.wait_for_url("**/analytics/latency/**")

    invoice_january(data)
    query = urlencode(RANGE)
    for name, chart in PAGE_CHARTS.items():
        page.goto(f"{live_server.url}/analytics/{name}/?{query}")
        drawn = plot_data(page, chart)
        if name == "billing":
            invoiced = next(t for t in drawn if t["name"] == "Invoiced (by issue date)")
            assert invoiced["y"][invoiced["x"].index("2025-02-03")] == 123.45
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(ARTIFACTS / f"analytics-{name}.png"), full_page=True)

    # Latency: the drawn p50 and p99 lines are the exact percentiles within 1 %.
    page.goto(f"{live_server.url}/analytics/latency/?{query}")
    traces = {t["name"]: t for t in plot_data(page, "latency")}
    assert list(traces) == ["p50", "p90", "p99", "p99.9"]
    checked = 0
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        for x, y in zip(traces[name]["x"], traces[name]["y"], strict=True):
            values = [c.latency_us for c in hours.get(x, [])]
            if values:
                want = exact_ms(values, q)
                assert abs(y - want) <= want * 0.01 * (1 + 1e-9), (name, x)
                checked += 1
    assert checked >= 90

    # Change a filter: compare by model draws one line per model, and the
    # address keeps the filter.
    page.select_option("#id_compare", "model")
    page.wait_for_url("**compare=model**")
    page.wait_for_function(
        "() => { const p = document.querySelector('#chart-latency .js-plotly-plot');"
        " return p && p.data.length > 1; }",
        timeout=15000,
    )
    names = {t["name"] for t in plot_data(page, "latency")}
    assert names == {c.model for c in calls}
    page.screenshot(path=str(ARTIFACTS / "analytics-latency-by-model.png"), full_page=True)

    # Spend: stacked bars per model add up to what the calls cost.
    page.goto(f"{live_server.url}/analytics/spend/?{query}")
    bars = plot_data(page, "spend")
    drawn = sum(Decimal(str(y)) for t in bars for y in t["y"])
    assert abs(drawn - Decimal(sum(c.cost for c in calls)) / 10**6) < Decimal("0.001")
    page.select_option("#id_stack", "key")
    page.wait_for_url("**stack=key**")
    page.wait_for_function(
        "(n) => { const p = document.querySelector('#chart-spend .js-plotly-plot');"
        " return p && p.data.length === n; }",
        arg=len({c.api_key_id for c in calls}),
        timeout=15000,
    )
    page.wait_for_selector("#chart-top_spenders table a[href*='/usage/calls/?']")

    # Errors: the 5xx line per hour is the share of 5xx calls.
    page.goto(f"{live_server.url}/analytics/errors/?{query}")
    five = next(t for t in plot_data(page, "error_rate") if t["name"].startswith("5xx"))
    for x, y in zip(five["x"], five["y"], strict=True):
        group = hours.get(x, [])
        if group:
            want = 100.0 * sum(c.status_code >= 500 for c in group) / len(group)
            assert abs(y - want) < 0.01, x

    # A preset with no calls in it: the charts say what to do instead.
    page.select_option("#id_range", "1h")
    page.wait_for_url("**range=1h**")
    page.wait_for_selector("#chart-error_rate .chart-empty")
    assert "Widen the time range" in page.inner_text("#chart-error_rate")

    # Overview: today's and this month's figures, each with its trend chart.
    recent = calls_today(data)
    page.goto(f"{live_server.url}/")
    page.wait_for_selector("#kpi-1-calls .spark.js-plotly-plot")
    assert page.inner_text("#kpi-1-calls .tile-value") == f"{len(recent):,}"
    spark = page.evaluate(
        "() => Array.from(document.querySelector('#kpi-1-calls .js-plotly-plot').data[0].y)"
    )
    assert sum(spark) == len(recent)
    page.wait_for_selector("#chart-overview_top table a[href*='/usage/calls/?']")
    page.screenshot(path=str(ARTIFACTS / "analytics-overview.png"), full_page=True)
    assert errors == []


def invoice_january(dataset) -> None:
    from datetime import UTC, datetime

    from invoicing.models import Invoice

    Invoice.objects.create(
        organization=dataset.org,
        period="2025-01",
        period_start=datetime(2025, 1, 1, tzinfo=UTC),
        period_end=datetime(2025, 2, 1, tzinfo=UTC),
        currency="USD",
        status="finalized",
        number="INV-B-1",
        total=123_450_000,
        issued_at=datetime(2025, 2, 3, 9, tzinfo=UTC),  # inside RANGE: charted by issue date
    )


def calls_today(dataset) -> list:
    """A few hundred calls in the last hours, so today's overview has data."""
    from datetime import timedelta

    from django.utils import timezone

    from usage.ingest import ingest_events
    from usage.synth import batched, ensure_org, generate

    now = timezone.now()
    start = max(now.replace(hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=3))
    start = start.replace(minute=0, second=0, microsecond=0)
    _org, keys = ensure_org(dataset.org.slug)
    hours = max(1, int((now - start).total_seconds() // 3600) + 1)
    events = generate(keys, start=start, hours=hours, calls=300, seed=5, end_limit=now)
    for chunk in batched(events, 300):
        ingest_events(chunk)
    return list(CallRecord.objects.filter(organization_id=dataset.org.pk, started_at__gte=start))


def test_a_developer_sees_their_own_keys_drawn(live_server, browser_page, data):
    page, errors = browser_page
    user = data.members[Role.DEVELOPER].user
    mine = list(CallRecord.objects.filter(api_key_id=data.dev_key.pk))
    sign_in(page, live_server.url, user)
    page.goto(f"{live_server.url}/analytics/errors/?{urlencode(RANGE)}")
    bars = plot_data(page, "status_counts")
    assert sum(y for t in bars for y in t["y"]) == len(mine)
    assert "You see the calls of your own API keys only." in page.inner_text("main")
    assert page.locator("#tab-billing").count() == 0
    assert errors == []


def test_no_kpi_tile_is_left_alone_on_a_row_at_any_width(live_server, browser_page, data):
    """The overview's seven KPI tiles: one row when there is room, else rows
    that each hold at least two tiles (or one spanning the row)."""
    page, errors = browser_page
    calls_today(data)
    sign_in(page, live_server.url, data.members[Role.OWNER].user)
    for width in (1440, 1100, 800, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/")
        page.wait_for_selector("#kpi-1-calls .spark.js-plotly-plot")
        rows = page.evaluate(
            """() => {
                 const grid = document.querySelector('.kpi-tiles');
                 const rows = {};
                 for (const t of grid.children) {
                   const r = t.getBoundingClientRect();
                   const top = Math.round(r.top);
                   (rows[top] = rows[top] || []).push(r.width);
                 }
                 return {width: grid.getBoundingClientRect().width, rows: Object.values(rows)};
               }"""
        )
        for tiles in rows["rows"]:
            # A tile alone on its row must be the full width of the grid.
            assert len(tiles) > 1 or tiles[0] >= rows["width"] - 2, (width, rows)
        if width == 1440:
            assert len(rows["rows"]) == 1, rows
    assert errors == []


def test_the_running_hour_is_drawn_apart(live_server, browser_page, data):
    """The last hour of a range that ends now: its bars fade, a band marks
    it, and the note under the chart says it is still running."""
    page, errors = browser_page
    calls_today(data)
    sign_in(page, live_server.url, data.members[Role.OWNER].user)
    page.goto(f"{live_server.url}/analytics/spend/?range=24h")
    page.wait_for_selector("#chart-spend .js-plotly-plot")
    drawn = page.evaluate(
        """() => { const p = document.querySelector('#chart-spend .js-plotly-plot');
                   return {shapes: (p.layout.shapes || []).length,
                           faded: p.data.map(t => Array.from(t.marker.opacity || []).pop())}; }"""
    )
    assert drawn["shapes"] == 1 and drawn["faded"] and all(o < 1 for o in drawn["faded"])
    assert "still running" in page.inner_text("#partial-spend")
    assert page.locator("#chart-spend .shapelayer path").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "analytics-spend-running-hour.png"), full_page=True)
    assert errors == []
