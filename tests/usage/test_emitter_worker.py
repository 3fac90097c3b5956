"""Events emitted through the gateway's ``UsageEmitter`` and its real Celery
publish (the configured broker) become call records exactly once, including
a batch that first went to the spool while the broker refused it."""

from __future__ import annotations

import time

import pytest
from django.db.models import Sum

from gateway_bridge.emitter import CelerySend, UsageEmitter
from gateway_bridge.spool import Spool
from tests.services import wait_for_worker
from tests.usage.factories import event
from usage.models import CallRecord, Grain, Rollup

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker]


def test_emitted_events_become_call_records_exactly_once(catalog, key, worker, tmp_path):
    publish = CelerySend(connect_timeout=2.0)
    refuse_first = {"left": 1}

    def send(batch):
        # The broker refuses the first publish: that batch is spooled and
        # replayed through the same real publish afterwards.
        if refuse_first["left"]:
            refuse_first["left"] -= 1
            raise ConnectionError("broker unreachable")
        publish(batch)

    spool = Spool(tmp_path / "usage.jsonl")
    emitter = UsageEmitter(send, spool, max_batch=20, max_delay=0.05, replay_interval=0.1)
    events = [event(key) for _ in range(75)]
    for e in events:
        emitter.emit(e)
    assert emitter.close(timeout=30)
    publish.close()
    assert emitter.spooled_batches >= 1
    assert emitter.spool_pending == 0
    assert emitter.sent_batches + emitter.replayed_batches == 4

    ids = {e["request_id"] for e in events}
    wait_for_worker(worker, lambda: CallRecord.objects.count() >= 75, "store the emitted events")
    time.sleep(1)  # any duplicate publish would land by now
    assert set(CallRecord.objects.values_list("request_id", flat=True)) == ids
    org_rollup = Rollup.objects.filter(organization_id=key.organization_id, grain=Grain.ORG)
    assert org_rollup.aggregate(calls=Sum("calls"))["calls"] == 75
