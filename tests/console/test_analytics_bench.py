"""``manage.py bench_console`` times every analytics page and partial
through the real views and prints JSON."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from console.features.analytics.views import CHARTS, PAGES

pytest_plugins = ["tests.console.test_analytics_data"]
pytestmark = pytest.mark.django_db


def test_bench_console_measures_every_page_and_partial(data):
    out = io.StringIO()
    call_command(
        "bench_console", "--runs", "1", "--org", data.org.slug, "--range", "7d", stdout=out
    )
    result = json.loads(out.getvalue())
    assert result["organization"] == data.org.slug
    assert result["calls"] == 3000
    assert set(PAGES) | {"overview"} == set(result["pages"])
    assert {f"chart:{name}" for name in CHARTS} <= set(result["partials"])
    assert all(ms > 0 for ms in result["partials"].values())
    # Each figure's time in the database, within its time in all.
    assert set(result["db_ms"]) == set(result["cpu_ms"])
    assert all(0 < result["db_ms"][k] < result["partials"][k] for k in result["partials"])
    assert result["targets_ms"] == {"page": 200, "partial": 100}


def test_bench_console_with_a_quick_synthetic_data_set(fresh_usage_caches):
    out = io.StringIO()
    call_command(
        "bench_console", "--synth", "--synth-calls", "400", "--days", "2", "--runs", "1",
        "--only", "latency,spend", stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    result = json.loads(out.getvalue())
    assert result["organization"] == "bench-console"
    assert result["calls"] == 400
    assert set(result["pages"]) == {"latency", "spend"}
    assert set(result["partials"]) >= {"chart:latency", "chart:spend"}


def test_bench_console_says_when_there_is_nothing_to_measure(db):
    with pytest.raises(CommandError, match="No usage"):
        call_command("bench_console", "--runs", "1", stdout=io.StringIO())
