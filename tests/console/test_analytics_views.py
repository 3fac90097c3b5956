"""Analytics pages and chart partials through the real views: every page
and partial answers, roles and tenants see only what they may, CSVs hold
the numbers behind the charts, bad filters are form errors."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.urls import reverse

from accounts.models import Role
from console.features.analytics.views import CHARTS, PAGES
from tests.console.test_analytics_data import RANGE, exact_ms, shown_ms

pytest_plugins = ["tests.console.test_analytics_data"]

pytestmark = pytest.mark.django_db


def login(client, dataset, role=Role.OWNER):
    client.force_login(dataset.members[role].user)
    return client


def figure_of(response) -> dict:
    html = response.content.decode()
    m = re.search(
        r'<script type="application/json" class="js-figure"[^>]*>(.*?)</script>', html, re.S
    )
    assert m, html[:2000]
    return json.loads(m.group(1))


def test_every_page_and_partial_answers_for_the_owner(client, data):
    login(client, data)
    for name in PAGES:
        r = client.get(reverse(f"analytics:{name}"), RANGE)
        assert r.status_code == 200, name
    for name in CHARTS:
        r = client.get(reverse(f"analytics:chart_{name}"), RANGE)
        assert r.status_code == 200, (name, r.content[:500])
        r = client.get(reverse(f"analytics:chart_{name}"), {**RANGE, "format": "csv"})
        assert r.status_code == 200, name
        assert r["Content-Type"].startswith("text/csv")


# --- numbers agree with the call records --------------------------------------

QS = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}


def calls_of(dataset, **filters):
    from usage.models import CallRecord

    return list(CallRecord.objects.filter(organization_id=dataset.org.pk, **filters))


def by_hour(calls):
    from collections import defaultdict

    out = defaultdict(list)
    for c in calls:
        out[c.started_at.strftime("%Y-%m-%d %H:00")].append(c)
    return out


def close(got, want):
    return abs(got - want) <= want * 0.01 * (1 + 1e-9)


@pytest.mark.parametrize(("chart", "attr"), [("latency", "latency_us"), ("ttft", "ttft_us")])
def test_percentiles_shown_are_within_one_percent_of_the_exact_ones(client, data, chart, attr):
    login(client, data)
    fig = figure_of(client.get(reverse(f"analytics:chart_{chart}"), RANGE))
    hours = by_hour(calls_of(data))
    assert [t["name"] for t in fig["data"]] == list(QS)
    checked = 0
    for trace in fig["data"]:
        q = QS[trace["name"]]
        for x, y in zip(trace["x"], trace["y"], strict=True):
            values = [getattr(c, attr) for c in hours.get(x, []) if getattr(c, attr) is not None]
            if not values:
                assert y is None
                continue
            assert close(y, exact_ms(values, q)), (trace["name"], x, y)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    ("protocol", "stream"), [("anthropic", ""), ("", "stream"), ("openai", "plain")]
)
def test_protocol_and_streaming_filters_narrow_the_percentiles_to_those_calls(
    client, data, protocol, stream
):
    login(client, data)
    params = {**RANGE, "protocol": protocol, "stream": stream}
    fig = figure_of(client.get(reverse("analytics:chart_latency"), params))
    calls = [
        c
        for c in calls_of(data)
        if (not protocol or c.protocol == protocol)
        and (not stream or c.stream == (stream == "stream"))
    ]
    assert 0 < len(calls) < len(calls_of(data))
    hours = by_hour(calls)
    checked = 0
    for trace in fig["data"]:
        q = QS[trace["name"]]
        for x, y in zip(trace["x"], trace["y"], strict=True):
            values = [c.latency_us for c in hours.get(x, [])]
            if not values:
                assert y is None
                continue
            assert close(y, shown_ms(values, q, len(calls))), (trace["name"], x, y)
            checked += 1
    assert checked > 20
    # With another dimension too (the full grain), the counts still match.
    model = calls[0].model
    r = client.get(
        reverse("analytics:chart_error_rate"), {**params, "model": model, "format": "csv"}
    )
    rows = csv.DictReader(io.StringIO(r.content.decode("utf-8-sig")))
    assert sum(int(row["calls"]) for row in rows) == sum(1 for c in calls if c.model == model)


def test_compare_by_model_draws_one_line_per_model(client, data):
    login(client, data)
    fig = figure_of(
        client.get(reverse("analytics:chart_latency"), {**RANGE, "compare": "model", "pct": "p99"})
    )
    calls = calls_of(data)
    models = {c.model for c in calls}
    assert {t["name"] for t in fig["data"]} == models
    for trace in fig["data"]:
        hours = by_hour([c for c in calls if c.model == trace["name"]])
        for x, y in zip(trace["x"], trace["y"], strict=True):
            values = [c.latency_us for c in hours.get(x, [])]
            assert (y is None) if not values else close(y, exact_ms(values, 0.99))


def test_daily_buckets_for_long_ranges_and_node_table(client, data):
    login(client, data)
    long_range = {"range": "custom", "from": "2025-02-01T00:00", "to": "2025-02-08T00:00"}
    fig = figure_of(client.get(reverse("analytics:chart_latency"), long_range))
    p90 = next(t for t in fig["data"] if t["name"] == "p90")
    assert p90["x"][0] == "2025-02-01" and len(p90["x"]) == 7
    calls = calls_of(data)
    for day in ("2025-02-03", "2025-02-04"):
        values = [c.latency_us for c in calls if c.started_at.strftime("%Y-%m-%d") == day]
        assert close(p90["y"][p90["x"].index(day)], exact_ms(values, 0.9))
    # The node table's percentiles over the whole range, per node.
    r = client.get(reverse("analytics:chart_node_table"), {**RANGE, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))
    assert rows
    for row in rows:
        node_id = int(row["node_id"]) or None
        values = [c.latency_us for c in calls if c.node_id == node_id]
        assert int(row["calls"]) == len(values)
        for q in ("p50", "p90", "p99"):
            assert close(float(row[f"{q}_ms"]), exact_ms(values, QS[q])), (row, q)


def test_spend_tokens_errors_and_cache_agree_with_the_call_records(client, data):
    from decimal import Decimal

    login(client, data)
    calls = calls_of(data)

    def csv_rows(chart, **extra):
        r = client.get(reverse(f"analytics:chart_{chart}"), {**RANGE, **extra, "format": "csv"})
        assert r.status_code == 200
        assert r["Content-Disposition"].startswith('attachment; filename="analytics-')
        rows = list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))
        return [r for r in rows if r.get("bucket_start") != "total"]

    spend = csv_rows("spend", stack="sub_account")
    assert (
        sum(Decimal(r["spend_USD"]) for r in spend) == Decimal(sum(c.cost for c in calls)) / 10**6
    )
    tokens = csv_rows("tokens")
    assert sum(int(r["output_tokens"]) for r in tokens) == sum(c.output_tokens for c in calls)
    errors = csv_rows("error_rate")
    hours = by_hour(calls)
    for r in errors:
        x = r["bucket_start"][:13].replace("T", " ") + ":00"
        group = hours.get(x, [])
        assert int(r["calls"]) == len(group)
        assert int(r["calls_429"]) == sum(c.status_code == 429 for c in group)
        assert int(r["calls_5xx"]) == sum(c.status_code >= 500 for c in group)
    cache = csv_rows("cache_hit")
    assert sum(int(r["cached_prompt_tokens"]) for r in cache) == sum(
        c.cache_read_tokens for c in calls
    )
    assert sum(int(r["calls_with_cache_hit"]) for r in cache) == sum(
        c.cache_status != "miss" for c in calls
    )
    top = csv_rows("top_spenders")
    want = {}
    for c in calls:
        want[c.api_key_id] = want.get(c.api_key_id, 0) + c.cost
    assert {int(r["api_key_id"]): Decimal(r["spend_USD"]) * 10**6 for r in top} == want


def test_cache_savings_are_priced_with_the_price_book(client, data):
    from decimal import Decimal

    from usage.prices import price_for

    login(client, data)
    r = client.get(reverse("analytics:chart_cache_savings"), {**RANGE, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))
    calls = [c for c in calls_of(data) if c.cache_read_tokens]
    for model in {c.model for c in calls}:
        mine = [c for c in calls if c.model == model]
        price = price_for(model, "USD", data.org.pk, mine[0].started_at)
        tokens = sum(c.cache_read_tokens for c in mine)
        want = Decimal(tokens * (price.input_per_mtok - price.cache_read_per_mtok)) / 10**12
        got = sum(Decimal(r["saved_USD"]) for r in rows if r["model"] == model)
        # Rounded once per model and hour, to the micro-unit.
        assert abs(got - want) <= Decimal(HOURS_OF_DATA) / 10**6, model
        assert got > 0


HOURS_OF_DATA = 48


def test_charts_never_read_call_records(client, data):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    login(client, data)
    with CaptureQueriesContext(connection) as queries:
        for name in CHARTS:
            if name != "billing":
                client.get(reverse(f"analytics:chart_{name}"), RANGE)
    assert not any("usage_call" in q["sql"] for q in queries.captured_queries)


# --- roles and tenants ----------------------------------------------------------


def test_a_developer_sees_only_their_own_keys(client, data):
    login(client, data, Role.DEVELOPER)
    mine = calls_of(data, api_key_id=data.dev_key.pk)
    assert mine and len(mine) < len(calls_of(data))
    for name in PAGES:
        r = client.get(reverse(f"analytics:{name}"), RANGE)
        assert r.status_code == (403 if name == "billing" else 200), name
    r = client.get(reverse("analytics:chart_status_counts"), {**RANGE, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))
    assert sum(int(r["calls"]) for r in rows) == len(mine)
    r = client.get(reverse("analytics:chart_top_spenders"), {**RANGE, "format": "csv"})
    assert {
        int(r["api_key_id"]) for r in csv.DictReader(io.StringIO(r.content.decode("utf-8-sig")))
    } == {data.dev_key.pk}
    # Compared by model, still only their calls.
    fig = figure_of(client.get(reverse("analytics:chart_spend"), {**RANGE, "stack": "model"}))
    assert {t["name"] for t in fig["data"]} == {c.model for c in mine}
    # Filtering by a colleague's key is a form error, not their data.
    other_key = next(k for k in data.key_ids if k != data.dev_key.pk)
    r = client.get(reverse("analytics:chart_spend"), {**RANGE, "key": other_key})
    assert r.status_code == 400
    r = client.get(reverse("analytics:spend"), {**RANGE, "key": other_key})
    assert r.status_code == 200 and 'id="field-key"' in r.content.decode()
    assert "field-error" in r.content.decode()
    r = client.get(reverse("analytics:chart_overview_kpis"))
    assert r.status_code == 200


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN, Role.FINANCE])
def test_finance_and_above_see_billing(client, data, role):
    from datetime import UTC, datetime

    from invoicing.models import CreditNote, Invoice, Payment

    inv = Invoice.objects.create(
        organization=data.org,
        period="2025-01",
        period_start=datetime(2025, 1, 1, tzinfo=UTC),
        period_end=datetime(2025, 2, 1, tzinfo=UTC),
        currency="USD",
        status="finalized",
        number="INV-T-1",
        total=123_450_000,
        issued_at=datetime(2025, 2, 3, 9, tzinfo=UTC),
    )
    Payment.objects.create(
        organization=data.org, invoice=inv, kind="invoice", method="stripe",
        status="succeeded", currency="USD", amount_minor=10000,
        created_at=datetime(2025, 2, 4, 10, tzinfo=UTC),
    )  # fmt: skip
    note = CreditNote.objects.create(
        invoice=inv, organization=data.org, number="INV-T-1-CN01", sequence=1, currency="USD",
        amount=5_000_000, amount_minor=500, refund_minor=500, effect="refund_card", reason="t",
        created_at=datetime(2025, 2, 4, 11, tzinfo=UTC),
    )  # fmt: skip
    Payment.objects.create(
        organization=data.org, invoice=inv, credit_note=note, kind="refund", method="stripe",
        status="succeeded", currency="USD", amount_minor=500,
        created_at=datetime(2025, 2, 4, 11, tzinfo=UTC),
    )  # fmt: skip
    login(client, data, role)
    assert client.get(reverse("analytics:billing"), RANGE).status_code == 200
    fig = figure_of(client.get(reverse("analytics:chart_billing"), RANGE))
    values = {t["name"]: dict(zip(t["x"], t["y"], strict=True)) for t in fig["data"]}
    assert values["Invoiced (by issue date)"]["2025-02-03"] == 123.45
    assert values["Paid (by payment date)"]["2025-02-04"] == 100.0
    assert values["Refunded (by refund date, completed only)"]["2025-02-04"] == 5.0


@pytest.mark.parametrize("role", [Role.DEVELOPER, Role.VIEWER])
def test_billing_is_forbidden_below_finance(client, data, role):
    login(client, data, role)
    assert client.get(reverse("analytics:billing")).status_code == 403
    assert client.get(reverse("analytics:chart_billing")).status_code == 403


def test_another_organization_sees_only_its_own_calls(client, data, other):
    from decimal import Decimal

    login(client, other)
    r = client.get(reverse("analytics:chart_spend"), {**RANGE, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))
    total = rows.pop()
    assert total["bucket_start"] == "total"
    assert int(total["calls"]) == sum(int(r["calls"]) for r in rows) == len(calls_of(other))
    assert sum(Decimal(r["spend_USD"]) for r in rows) * 10**6 == sum(
        c.cost for c in calls_of(other)
    )
    # Another organization's key or sub-account as a filter is refused.
    for params in ({"key": data.key_ids[0]}, {"sub_account": data.dev_key.sub_account_id or 0}):
        r = client.get(reverse("analytics:chart_latency"), {**RANGE, **params})
        assert r.status_code == 400, params
    # No membership at all: no data, whatever the URL.
    client.logout()
    r = client.get(reverse("analytics:chart_spend"), RANGE)
    assert r.status_code == 302


# --- bad input, empty states, the page around the charts --------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"range": "forever"},
        {"range": "custom", "from": "yesterday"},
        {"range": "custom"},
        {"range": "custom", "from": "2025-02-05T00:00", "to": "2025-02-03T00:00"},
        {"range": "custom", "from": "2024-01-01T00:00", "to": "2025-02-03T00:00"},
        {"pct": "p12"},
        {"compare": "colour"},
        {"stack": "planet"},
        {"key": "abc"},
        {"node": "999999"},
        {"sub_account": "-1"},
        {"model": "x" * 200},
        {"refresh": "always"},
    ],
)
def test_bad_filters_are_form_errors_never_500(client, data, params):
    login(client, data)
    for name in PAGES:
        r = client.get(reverse(f"analytics:{name}"), params)
        assert r.status_code == 200, (name, params)
        html = r.content.decode()
        assert "field-error" in html or "errors" in html, (name, params)
        assert 'id="no-charts"' in html
    for name in CHARTS:
        r = client.get(reverse(f"analytics:chart_{name}"), params)
        assert r.status_code == 400, (name, params)


def test_empty_ranges_say_what_to_do(client, data):
    login(client, data)
    quiet = {"range": "custom", "from": "2024-06-01T00:00", "to": "2024-06-02T00:00"}
    for name in ("latency", "spend", "cache_hit", "error_rate", "node_latency", "top_spenders"):
        html = client.get(reverse(f"analytics:chart_{name}"), quiet).content.decode()
        assert "No calls between 2024-06-01 00:00 and 2024-06-02 00:00" in html, name
        assert "Widen the time range" in html
    html = client.get(reverse("analytics:chart_spend"), {**quiet, "model": "nope"}).content.decode()
    assert "Clear the model, node, key or sub-account filter" in html


def test_filters_live_in_the_url_and_reach_every_chart(client, data):
    login(client, data)
    params = {**RANGE, "model": "sim-chat-small", "compare": "node", "refresh": "1"}
    html = client.get(reverse("analytics:latency"), params).content.decode()
    assert 'hx-get="/analytics/charts/latency/?range=custom&amp;from=2025-02-03T00%3A00' in html
    assert "model=sim-chat-small" in html and "compare=node" in html
    assert 'hx-push-url="true"' in html
    # An htmx filter change swaps only the #analytics block.
    r = client.get(
        reverse("analytics:latency"), params, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="analytics"
    )
    assert r.content.decode().startswith('<div id="analytics"')
    chart = client.get(reverse("analytics:chart_latency"), params).content.decode()
    assert 'hx-trigger="every 60s"' in chart
    assert 'href="/analytics/charts/latency/?' in chart and "format=csv" in chart


def test_presets_use_the_organization_time_zone(client, data):
    from datetime import UTC, datetime
    from unittest import mock

    data.org.timezone = "Asia/Tokyo"
    data.org.save(update_fields=["timezone"])
    login(client, data)
    now = datetime(2025, 2, 4, 20, 30, tzinfo=UTC)  # 05:30 on the 5th in Tokyo
    with mock.patch("django.utils.timezone.now", return_value=now):
        html = client.get(reverse("analytics:spend"), {"range": "7d"}).content.decode()
        month = client.get(reverse("analytics:spend"), {"range": "month"}).content.decode()
    assert "2025-01-30 00:00 to 2025-02-05 06:00 (Asia/Tokyo), per day" in html
    assert "2025-02-01 00:00 to 2025-02-05 06:00 (Asia/Tokyo), per day" in month


def test_overview_shows_usage_for_usage_roles(client, data):
    login(client, data)
    html = client.get("/").content.decode()
    assert reverse("analytics:chart_overview_kpis") in html
    r = client.get(reverse("analytics:chart_overview_kpis"))
    assert r.status_code == 200
    r = client.get(reverse("analytics:chart_overview_top"), {"format": "csv"})
    assert r.status_code == 200
    assert "Analytics" in html
    assert client.get(reverse("analytics:index")).status_code == 302


def test_csv_cells_that_look_like_formulas_are_defused():
    from console.features.analytics.views import _csv_cell

    assert _csv_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert _csv_cell("@sum") == "'@sum"
    assert _csv_cell("-3.5") == "-3.5"
    assert _csv_cell(None) == ""


def test_a_model_has_one_colour_on_every_chart(client, data):
    login(client, data)
    seen: dict[str, set] = {}
    for chart, extra in (
        ("latency", {"compare": "model"}),
        ("spend", {"stack": "model"}),
        ("cache_hit", {"compare": "model"}),
        ("cache_savings", {}),
    ):
        fig = figure_of(client.get(reverse(f"analytics:chart_{chart}"), {**RANGE, **extra}))
        for t in fig["data"]:
            colour = t.get("line", {}).get("color") or t.get("marker", {}).get("color")
            seen.setdefault(t["name"], set()).add(colour)
    assert len(seen) >= 5
    assert all(len(c) == 1 for c in seen.values()), seen
    # And different models get different colours.
    assert len({next(iter(c)) for c in seen.values()}) == len(seen)
    # Axes say their units.
    fig = figure_of(client.get(reverse("analytics:chart_spend"), RANGE))
    assert fig["layout"]["yaxis"]["title"]["text"] == "Spend (USD)"
    assert fig["layout"]["xaxis"]["title"]["text"] == "Hour (UTC)"


@pytest.mark.parametrize("preset", ["1h", "24h", "7d", "30d", "month", ""])
def test_every_preset_answers(client, data, preset):
    login(client, data)
    for name in ("latency", "spend", "overview_kpis", "node_table"):
        r = client.get(reverse(f"analytics:chart_{name}"), {"range": preset} if preset else {})
        assert r.status_code == 200, (preset, name)
    # A custom range without an end runs to now.
    from datetime import timedelta

    from django.utils import timezone

    since = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    r = client.get(reverse("analytics:spend"), {"from": since})
    assert r.status_code == 200 and "field-error" not in r.content.decode()
    assert "per hour" in r.content.decode()
