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


def test_circuit_transitions_reach_the_audit_trail_through_a_real_worker(org, worker):
    """The gateway's circuit reporter publishes on the same broker; the worker
    records the opening against the node."""
    import asyncio
    from types import SimpleNamespace

    from accounts.models import AuditEvent
    from gateway_bridge.circuits import CircuitReporter
    from tests.inference_node.factories import NodeFactory

    node = NodeFactory(organization=org, name="gpu-flaky")
    reporter = CircuitReporter(gateway="gw-test:1")
    window = SimpleNamespace(
        state="open", opened_reason="error_rate", opened_calls=100, opened_errors=20
    )

    async def report():
        reporter.report(SimpleNamespace(node_id=node.pk, name=node.name), window)
        while reporter.sent < 1:
            await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(report(), 10))
    reporter.close()
    opened = AuditEvent.objects.filter(action="node.circuit_opened", target_id=str(node.pk))
    wait_for_worker(worker, opened.exists, "record the circuit opening")
    assert opened.get().params["gateway"] == "gw-test:1"
