"""A model with few calls: the marketplace's p99 and p99.9 are the slowest
call's latency (exact order statistics), not a sketch bucket below it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiKey, Role
from tests.factories import MembershipFactory, UserFactory
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog
from usage.synth import ensure_org

pytestmark = pytest.mark.django_db

LATENCIES_US = [310_000 + 91_000 * i for i in range(15)] + [2_450_000]


@pytest.fixture(autouse=True)
def _fresh_ingest(settings):
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    settings.USAGE_RETENTION_DAYS = 0
    settings.CONSOLE_MARKETPLACE_CACHE_SECONDS = 0
    invalidate_price_book()
    invalidate_directory()
    yield
    invalidate_price_book()
    invalidate_directory()


@pytest.fixture
def sixteen_calls(db):
    seed_catalog()
    org, _keys = ensure_org("sixteen-calls")
    key = ApiKey.objects.filter(organization=org).first()
    now = timezone.now()
    ingest_events(
        [
            event(
                key,
                model="sim-chat-large",
                started_at=now - timedelta(minutes=30 + i),
                duration_us=lat,
                ttft_us=lat // 4,
            )
            for i, lat in enumerate(LATENCIES_US)
        ]
    )
    return org


def test_sixteen_calls_show_p99_and_p999_at_the_slowest_call(sixteen_calls, client, settings):
    owner = MembershipFactory(organization=sixteen_calls, role=Role.OWNER, user=UserFactory()).user
    client.force_login(owner)
    api = client.get("/api/v1/marketplace/", {"window": "24h"}).json()
    figures = next(m for m in api["models"] if m["name"] == "sim-chat-large")["figures"]
    assert figures["calls"] == 16
    assert figures["latency_p99_ms"] == figures["latency_p999_ms"] == 2450.0
    assert figures["ttft_p99_ms"] == 2450.0 / 4
    html = client.get(reverse("analytics:marketplace"), {"window": "24h"}).content.decode()
    row = re.search(r'<tr data-model="sim-chat-large">(.*?)</tr>', html, re.S).group(1)
    assert "2,450" in row

    settings.CONSOLE_PUBLIC_MARKETPLACE = True
    client.logout()
    public = client.get(reverse("analytics:public_marketplace"), {"format": "json"}).json()
    entry = next(m for m in public["models"] if m["name"] == "sim-chat-large")
    assert entry["figures"]["latency_p999_ms"] == 2450.0
