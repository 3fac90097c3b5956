"""A real Celery worker, on the configured broker (Redis under CI, kombu's
filesystem transport embedded), ingests usage batches sent the way the
gateway sends them: a batch delivered twice is counted once, and a bad
event is dead-lettered while the rest of its batch is stored."""

from __future__ import annotations

import pytest
from django.db.models import Sum

from tests.services import wait_for_worker
from tests.usage.factories import event
from usage.models import CallRecord, DeadLetter, Grain, Rollup
from usage.tasks import ingest_batch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker]


def test_worker_ingests_batches_once_and_dead_letters_bad_events(catalog, key, worker):
    batch = [event(key) for _ in range(50)]
    bad = event(key, input_tokens=-5)
    ingest_batch.apply_async(args=[[*batch, bad]])
    ingest_batch.apply_async(args=[batch])  # a redelivery of the same calls

    wait_for_worker(worker, lambda: DeadLetter.objects.count() == 1, "dead-letter the bad event")
    wait_for_worker(worker, lambda: CallRecord.objects.count() == 50, "store the batch")
    # Give the redelivered batch time to run, then nothing may be doubled.
    marker = event(key)
    ingest_batch.apply_async(args=[[marker]])
    wait_for_worker(
        worker, lambda: CallRecord.objects.filter(pk=marker["request_id"]).exists(), "run"
    )

    assert CallRecord.objects.count() == 51
    org_rollup = Rollup.objects.filter(organization_id=key.organization_id, grain=Grain.ORG)
    assert org_rollup.aggregate(calls=Sum("calls"))["calls"] == 51
    assert (
        org_rollup.aggregate(cost=Sum("cost"))["cost"]
        == CallRecord.objects.aggregate(cost=Sum("cost"))["cost"]
    )
    assert "input_tokens is negative" in DeadLetter.objects.get().reason
