"""Stepped load tests against the real gateway and a simulator node with a
saturation point: the knee, cancelling, the budget, one run at a time.

The runs here are created with one-second steps straight in the database
(the console's forms and services keep a step to 5-120 s; their bounds are
tested in ``test_views``) and run by the job function itself, as the
load-test worker would."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime

import pytest
from django.db.models import Sum
from django.urls import reverse

from accounts.models import ApiKey, ApiKeyStatus
from console.features.capacity import services
from console.features.capacity.models import LoadTest, Status
from console.features.capacity.runner import run_load_test
from console.kernel.money import format_amount
from tests.capacity.conftest import SATURATION
from usage.ingest import ingest_events
from usage.models import CallRecord


def _queued(lab, *, steps, step_seconds=1, budget=10_000_000, output_tokens=8) -> LoadTest:
    return LoadTest.objects.create(
        organization=lab.org, started_by=lab.owner, model="sim-chat-small", input_tokens=64,
        output_tokens=output_tokens, prefix_share=50, steps=steps, step_seconds=step_seconds,
        budget=budget,
    )  # fmt: skip


def test_a_stepped_test_finds_the_knee_of_a_saturating_node(lab):
    test = _queued(lab, steps=[2, 4, 8, 16])
    run_load_test(test.pk)

    test.refresh_from_db()
    assert test.status == Status.DONE, test.error
    steps = list(test.results.order_by("index"))
    assert [s.concurrency for s in steps] == [2, 4, 8, 16]
    for s in steps:
        assert s.errors == 0 and s.ok == s.requests > 0
        assert s.ttft_p50_ms <= s.latency_p50_ms <= s.latency_p99_ms <= s.latency_p999_ms
        assert s.ttft_p99_ms <= s.ttft_p999_ms
        # 8 output tokens a call, read from each stream's usage chunk.
        assert s.output_tokens_per_second == pytest.approx(8 * s.ok / s.seconds, rel=0.01)
    # Below the saturation point throughput doubles with the clients ...
    assert steps[1].requests_per_second > 1.6 * steps[0].requests_per_second
    # ... and the knee is the first step past it, or the one after: within one step.
    knee = steps[test.knee_step].concurrency
    assert knee > SATURATION
    assert knee in (8, 16)
    # The run's key was its own, and is revoked now.
    key = ApiKey.objects.get(pk=test.api_key_id)
    assert key.status == ApiKeyStatus.REVOKED
    assert key.spend_cap_lifetime == test.budget
    assert key.allowed_models == ["sim-chat-small"]


def _epoch(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.fromisoformat(str(value)).timestamp()


def test_cancel_stops_the_load_within_a_second(lab):
    test = _queued(lab, steps=[4, 4, 4], step_seconds=30)
    worker = threading.Thread(target=run_load_test, args=[test.pk])
    worker.start()
    deadline = time.monotonic() + 10
    while not LoadTest.objects.filter(pk=test.pk, step_started_at__isnull=False).exists():
        assert time.monotonic() < deadline, "the test never started"
        time.sleep(0.05)
    time.sleep(1.0)  # under load
    asked = time.monotonic()
    services.load_test_cancel(actor=lab.actor, load_test_id=test.pk)
    worker.join(5)
    took = time.monotonic() - asked

    assert not worker.is_alive()
    assert took < 1.0, f"the run took {took:.2f} s to stop"
    test.refresh_from_db()
    assert test.status == Status.CANCELLED
    (step,) = test.results.all()  # the second and third steps never ran
    assert step.cut_short and step.seconds < 5 and step.requests > 0
    assert ApiKey.objects.get(pk=test.api_key_id).status == ApiKeyStatus.REVOKED
    # No call starts once the run has stopped (calls in flight at the cancel
    # still end, and are recorded, as any call a client hangs up on).
    stopped_at = time.time()
    time.sleep(0.5)
    started = [_epoch(e["started_at"]) for e in lab.gateway.emitter.events]
    assert started and max(started) <= stopped_at
    # The calls aborted by the cancel are counted as cut off: the step's calls
    # are the call log's.
    assert step.cut_off > 0
    ingest_events(_settled(lab.gateway.emitter.events, step.requests + step.cut_off))
    assert CallRecord.objects.filter(api_key_id=test.api_key_id).count() == step.calls


def test_the_budget_holds(lab):
    # A few calls' worth: the key's lifetime cap stops the run's spend at it.
    budget = 400
    test = _queued(lab, steps=[4, 8], budget=budget, output_tokens=64)
    run_load_test(test.pk)

    test.refresh_from_db()
    assert test.status == Status.DONE, test.error
    events = lab.gateway.emitter.events
    assert events, "the run made no calls"
    ingest_events(list(events))
    spent = CallRecord.objects.filter(api_key_id=test.api_key_id).aggregate(s=Sum("cost"))["s"]
    assert 0 < spent <= budget
    steps = list(test.results.order_by("index"))
    # The cap was reached: later calls were refused, and the steps say so.
    assert sum(s.errors for s in steps) > 0
    assert steps[-1].error_rate > 0.5
    # Refused calls are no throughput: requests/s counts successful answers only.
    last = steps[-1]
    assert last.requests > last.ok
    assert last.requests_per_second == pytest.approx(last.ok / last.seconds, rel=0.01)


def _settled(events, at_least: int, timeout: float = 5.0) -> list:
    """The gateway's events once it has emitted ``at_least`` (calls cut off at a
    step's end finish on the gateway a moment after the client let go)."""
    deadline = time.monotonic() + timeout
    while len(events) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # and none more
    return list(events)


def test_every_call_of_a_run_is_counted_in_its_steps_and_its_cost_is_on_its_page(lab, client):
    # Past the saturation point calls queue: at each step's end some are in flight.
    test = _queued(lab, steps=[2, 12])
    run_load_test(test.pk)
    test.refresh_from_db()
    assert test.status == Status.DONE, test.error
    steps = list(test.results.order_by("index"))
    counted = sum(s.requests + s.cut_off for s in steps)
    assert all(s.cut_off > 0 for s in steps)  # cut off at each step's end, and counted

    ingest_events(_settled(lab.gateway.emitter.events, counted))
    calls = CallRecord.objects.filter(api_key_id=test.api_key_id)
    assert calls.count() == counted
    cost = calls.aggregate(s=Sum("cost"))["s"]
    assert cost > 0

    client.force_login(lab.owner.user)
    page = client.get(reverse("capacity:detail", args=[test.pk])).content.decode()
    shown = re.search(r'<p id="load-test-cost">(.*?)</p>', page, re.S)[1]
    assert format_amount(cost, lab.org.currency, exact=True) in shown
    assert f"({counted} calls in the call log)" in shown
    cells = [re.findall(r'<td class="num">(\d+)', row)[2:4] for row in re.findall(
        r'<tr data-step="\d+"[^>]*>(.*?)</tr>', page, re.S
    )]  # fmt: skip
    assert cells == [[str(s.requests), str(s.cut_off)] for s in steps]
