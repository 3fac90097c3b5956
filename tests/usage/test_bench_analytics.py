"""``manage.py bench_analytics`` on a small organization: it generates the
calls once, reuses them when asked, and reports every figure."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from usage.models import CallRecord

pytestmark = pytest.mark.django_db


def bench(**options) -> dict:
    out = io.StringIO()
    call_command("bench_analytics", stdout=out, stderr=io.StringIO(), **options)
    return json.loads(out.getvalue())


def test_generates_measures_and_reuses():
    report = bench(calls=400, days=2, runs=1)
    assert report["rows"] == 400 == CallRecord.objects.count()
    assert set(report["ms"]) == {
        "log_first_page", "log_first_page_view", "log_model_errors_page", "log_key_page",
        "log_older_page", "latency_series", "latency_series_model",
    }  # fmt: skip
    assert all(ms > 0 for ms in report["ms"].values())
    assert report["targets_ms"] == {"log_page": 50, "percentile_series": 150}
    assert set(report["met"]) == set(report["ms"])
    # --reuse with enough rows generates nothing new.
    again = bench(calls=300, days=2, runs=1, reuse=True)
    assert again["rows"] == 400 == CallRecord.objects.count()


def test_nonsense_arguments_are_refused():
    with pytest.raises(CommandError, match="at least 1"):
        call_command("bench_analytics", calls=0, stdout=io.StringIO())
