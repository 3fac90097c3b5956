"""The Latency page for a model with 16 calls: p99 and p99.9 are the slowest
call's latency (exact order statistics), not a sketch bucket below it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from accounts.models import ApiKey, Role
from tests.factories import MembershipFactory, UserFactory
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog
from usage.synth import ensure_org

pytestmark = pytest.mark.django_db

HOUR = datetime(2025, 2, 3, 10, tzinfo=UTC)
RANGE = {"range": "custom", "from": "2025-02-03T00:00", "to": "2025-02-04T00:00"}
LATENCIES_US = [330_000 + 87_000 * i for i in range(15)] + [2_450_000]


@pytest.fixture(autouse=True)
def _fresh_ingest(settings):
    settings.USAGE_RETENTION_DAYS = 0
    invalidate_price_book()
    invalidate_directory()
    yield
    invalidate_price_book()
    invalidate_directory()


def test_sixteen_calls_chart_p99_and_p999_at_the_slowest_call(client):
    seed_catalog()
    org, _keys = ensure_org("latency-sixteen")
    key = ApiKey.objects.filter(organization=org).first()
    ingest_events(
        [
            event(
                key, model="sim-chat-large", started_at=HOUR + timedelta(minutes=i), duration_us=v
            )
            for i, v in enumerate(LATENCIES_US)
        ]
    )
    owner = MembershipFactory(organization=org, role=Role.OWNER, user=UserFactory()).user
    client.force_login(owner)
    html = client.get(
        reverse("analytics:chart_latency"), {**RANGE, "model": "sim-chat-large"}
    ).content.decode()
    figure = json.loads(
        re.search(r'<script type="application/json" class="js-figure"[^>]*>(.*?)</script>',
                  html, re.S).group(1)
    )  # fmt: skip
    shown = {
        trace["name"]: dict(zip(trace["x"], trace["y"], strict=True)) for trace in figure["data"]
    }
    assert shown["p99"]["2025-02-03 10:00"] == shown["p99.9"]["2025-02-03 10:00"] == 2450.0
    assert shown["p50"]["2025-02-03 10:00"] == sorted(LATENCIES_US)[7] / 1000
