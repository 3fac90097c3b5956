"""Synthetic usage: realistic, in time order, through the real ingest path."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from unittest import mock

import pytest
from django.core.management import call_command

from accounts.models import ApiKey, Organization, SubAccount
from usage.events import UsageEvent
from usage.models import CallRecord, DeadLetter, Rollup
from usage.synth import ensure_org, generate, hourly_counts

pytestmark = pytest.mark.django_db


def test_generated_events_are_valid_ordered_and_varied(catalog):
    _org, keys = ensure_org("gen")
    start = datetime(2025, 1, 6, tzinfo=UTC)
    events = list(generate(keys, start=start, hours=48, calls=3000, seed=3))
    assert len(events) == 3000
    parsed = [UsageEvent.from_dict(e) for e in events]
    starts = [e.started_at for e in parsed]
    assert starts == sorted(starts)
    assert start <= starts[0] and starts[-1] < start + timedelta(hours=48)
    statuses = {e.status_code for e in parsed}
    assert {200, 429, 400}.issubset(statuses) and statuses & {500, 503}
    assert any(e.cache_status == "prefix_hit" and e.cache_read_tokens for e in parsed)
    assert 0.3 < sum(e.stream for e in parsed) / len(parsed) < 0.8
    assert len({e.model for e in parsed}) >= 5 and {e.node_id for e in parsed} >= {1, 2, 3}
    # Diurnal: the busiest hour has clearly more calls than the quietest.
    counts = hourly_counts(10_000, start, 24)
    assert sum(counts) == 10_000 and max(counts) > 2.5 * min(counts)


def test_the_command_creates_orgs_and_ingests_idempotently(catalog):
    out = StringIO()
    call_command(
        "usage_synth", "--orgs", "2", "--days", "2", "--calls", "600", "--batch", "250", stdout=out
    )
    summary = json.loads(out.getvalue())
    assert summary["accepted"] == 1200 and summary["dead_lettered"] == 0
    org = Organization.objects.get(slug="synth-1")
    assert SubAccount.objects.filter(organization=org).count() == 3
    assert ApiKey.objects.filter(organization=org).count() == 7
    assert CallRecord.objects.filter(organization_id=org.pk).count() == 600
    assert (
        sum(
            Rollup.objects.filter(organization_id=org.pk, grain="org").values_list(
                "calls", flat=True
            )
        )
        == 600
    )
    again = StringIO()
    call_command("usage_synth", "--orgs", "2", "--days", "2", "--calls", "600", stdout=again)
    assert json.loads(again.getvalue())["accepted"] == 0
    assert not DeadLetter.objects.exists()


def test_via_celery_sends_ingest_tasks(catalog):
    out = StringIO()
    with mock.patch("usage.tasks.ingest_batch.delay") as delay:
        call_command(
            "usage_synth",
            "--org-slug",
            "celery-org",
            "--days",
            "1",
            "--calls",
            "250",
            "--batch",
            "100",
            "--via-celery",
            stdout=out,
        )
    assert delay.call_count == 3
    assert sum(len(c.args[0]) for c in delay.call_args_list) == 250
    assert json.loads(out.getvalue())["sent_batches"] == 3
    assert not CallRecord.objects.exists()
