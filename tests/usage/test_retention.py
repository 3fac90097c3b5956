"""Retention deletes only old call records, in batches, and keeps rollups."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.models import CallRecord, Rollup
from usage.retention import prune_calls
from usage.tasks import prune_calls as prune_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(catalog, key):
    now = datetime.now(UTC).replace(microsecond=0)
    old = [event(key, started_at=now - timedelta(days=100, minutes=i)) for i in range(25)]
    recent = [event(key, started_at=now - timedelta(days=2, minutes=i)) for i in range(5)]
    ingest_events(old + recent)
    return old, recent


def rollup_sums():
    return sorted(Rollup.objects.values_list("grain", "hour", "calls", "cost"))


def test_only_calls_past_retention_go_in_batches_and_rollups_stay(settings, history, key):
    _old, recent = history
    before = rollup_sums()
    settings.USAGE_RETENTION_DAYS = 30
    with pytest.MonkeyPatch.context() as mp:
        deletes = []
        real = CallRecord.objects.filter

        def spy(*args, **kwargs):
            if "request_id__in" in kwargs:
                deletes.append(len(kwargs["request_id__in"]))
            return real(*args, **kwargs)

        mp.setattr(CallRecord.objects, "filter", spy)
        assert prune_calls(batch_size=10) == 25
    assert deletes == [10, 10, 5]
    assert set(CallRecord.objects.values_list("request_id", flat=True)) == {
        e["request_id"] for e in recent
    }
    assert rollup_sums() == before


def test_retention_off_keeps_everything(settings, history):
    settings.USAGE_RETENTION_DAYS = 0
    assert prune_task.run() == 0
    assert CallRecord.objects.count() == 30


def test_the_command_and_the_beat_task(settings, history):
    out = StringIO()
    call_command("prune_usage", "--days", "50", stdout=out)
    assert json.loads(out.getvalue())["deleted"] == 25
    assert "usage-prune-calls" in settings.CELERY_BEAT_SCHEDULE
    assert settings.CELERY_BEAT_SCHEDULE["usage-prune-calls"]["task"] == "usage.prune_calls"
