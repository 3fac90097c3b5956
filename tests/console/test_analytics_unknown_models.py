"""Calls to a model that does not exist are errors, not a model: the gateway
refuses them (404 ``model_not_found``, no node, no tokens). They count on
the Errors page and in every total, but no chart draws the name as a model,
and no page asks for a price for it. A name a node did answer stays a model."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from accounts.models import Role
from tests.console.test_analytics_data import RANGE, START
from tests.console.test_analytics_views import figure_of, login
from usage.events import SCHEMA_VERSION
from usage.ingest import ingest_events

pytest_plugins = ["tests.console.test_analytics_data"]

pytestmark = pytest.mark.django_db

GHOST = "gpt-4o-nonexistent"


def _event(data, index: int, started: datetime, *, model: str, served: bool) -> dict:
    key = data.dev_key
    return {
        "request_id": f"ghost-{model}-{index}-{started:%H%M}",
        "started_at": started.isoformat(),
        "finished_at": (started + timedelta(milliseconds=3)).isoformat(),
        "organization_id": data.org.pk,
        "sub_account_id": key.sub_account_id,
        "api_key_id": key.pk,
        "model": model,
        "node_id": None,
        "protocol": "openai",
        "endpoint": "chat.completions",
        "stream": False,
        "status_code": 200 if served else 404,
        "error_type": "" if served else "model_not_found",
        "input_tokens": 120 if served else 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 30 if served else 0,
        "reasoning_tokens": 0,
        "ttft_us": None,
        "latency_us": 3_000,
        "upstream_us": None,
        "overhead_us": 900,
        "queue_us": None,
        "client_ip": "198.51.100.7",
        "priority": 0,
        "cache_status": "miss",
        "version": SCHEMA_VERSION,
    }


def _ingest(data, at: datetime, n: int, *, model: str = GHOST, served: bool = False):
    result = ingest_events(
        [_event(data, i, at + timedelta(minutes=i), model=model, served=served) for i in range(n)]
    )
    assert result.accepted == n


def _csv(client, chart: str, **extra) -> list[dict]:
    r = client.get(reverse(f"analytics:chart_{chart}"), {**RANGE, **extra, "format": "csv"})
    assert r.status_code == 200
    return list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))


def _trace_names(client, chart: str, **extra) -> set[str]:
    r = client.get(reverse(f"analytics:chart_{chart}"), {**RANGE, **extra})
    assert r.status_code == 200
    return {t["name"] for t in figure_of(r)["data"]}


def test_calls_to_a_model_that_does_not_exist_are_in_no_legend_or_comparison(client, data):
    login(client, data)
    before = sum(int(r["calls_4xx"]) for r in _csv(client, "error_rate") if r["calls_4xx"])
    _ingest(data, START + timedelta(hours=5), 7)

    spend = _trace_names(client, "spend", stack="model")
    assert spend and GHOST not in spend
    assert GHOST not in {r["series"] for r in _csv(client, "spend", stack="model")}
    compared = _trace_names(client, "latency", compare="model", pct="p99")
    assert compared and GHOST not in compared
    assert GHOST not in _trace_names(client, "ttft", compare="model")
    assert GHOST not in _trace_names(client, "cache_hit", compare="model")
    # Still errors: the Errors page counts every one of them.
    after = sum(int(r["calls_4xx"]) for r in _csv(client, "error_rate") if r["calls_4xx"])
    assert after == before + 7


def test_a_model_a_node_answered_stays_a_model_even_outside_the_catalogue(client, data):
    login(client, data)
    _ingest(data, START + timedelta(hours=6), 3, model="house-finetune", served=True)
    assert "house-finetune" in _trace_names(client, "spend", stack="model")


def test_no_price_is_asked_for_a_model_that_does_not_exist(client, data):
    login(client, data, Role.OWNER)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    _ingest(data, now - timedelta(hours=3), 4)
    page = client.get(reverse("usage:models")).content.decode()
    assert GHOST not in page
    # A model a node did answer, without a price, still needs one.
    _ingest(data, now - timedelta(hours=2), 2, model="house-finetune", served=True)
    page = client.get(reverse("usage:models")).content.decode()
    assert 'id="unknown-unpriced"' in page and "house-finetune" in page
    assert GHOST not in page


def test_the_overview_top_models_leave_out_a_model_that_does_not_exist(client, data):
    login(client, data)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    _ingest(data, now - timedelta(minutes=30), 5)
    _ingest(data, now - timedelta(minutes=20), 2, model="house-finetune", served=True)
    r = client.get(reverse("analytics:chart_overview_top"), {"format": "csv"})
    names = {row["name"] for row in csv.DictReader(io.StringIO(r.content.decode("utf-8-sig")))}
    assert "house-finetune" in names
    assert GHOST not in names
