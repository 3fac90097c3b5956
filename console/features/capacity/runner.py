"""The job of one load test: a key of its own, the steps, the results.

``run_load_test(id)`` runs in a Celery worker of the ``CAPACITY_QUEUE``
queue (``tasks.py``), or directly in tests. It issues a gateway key for the
run (lifetime spend cap = the run's budget, only the run's model; marked
``test_traffic`` when the run is a test not billed; pinned to the run's node
when platform staff chose one), drives the gateway at
``CAPACITY_GATEWAY_URL`` with ``console.features.capacity.loadgen`` one step after
another, stores each step's figures, marks the knee, and revokes the key
whatever happens. A watcher thread reads the cancel flag every
``CANCEL_POLL_SECONDS`` and the generator, which asks it every quarter of a
second, aborts its open requests: a cancel stops the load within a second.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone as tz

from accounts.facade import Actor, api_key_issue, api_key_revoke
from console.features.capacity.knee import find_knee
from console.features.capacity.loadgen import run_load
from console.features.capacity.models import Billing, LoadTest, LoadTestStep, Status
from console.features.capacity.profile import bodies

log = logging.getLogger(__name__)
CANCEL_POLL_SECONDS = 0.2
REQUEST_TIMEOUT_SECONDS = 60.0


class _CancelWatch:
    """Polls the run's cancel flag on a thread of its own (the generator's
    event loop must not wait on the database)."""

    def __init__(self, load_test_id: int):
        self.id = load_test_id
        self.cancelled = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"load-test-{self.id}-cancel")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _poll(self) -> None:
        try:
            while not self._stop.wait(CANCEL_POLL_SECONDS):
                if LoadTest.objects.filter(pk=self.id, cancel_requested=True).exists():
                    self.cancelled.set()
                    return
        finally:
            connection.close()


def _store_step(test: LoadTest, index: int, clients: int, summary: dict) -> LoadTestStep:
    seconds = summary["seconds"] or 0.0
    return LoadTestStep.objects.create(
        load_test=test,
        index=index,
        concurrency=clients,
        seconds=seconds,
        requests=summary["requests"],
        ok=summary["ok"],
        errors=summary["errors"],
        cut_off=summary["cut_off"],
        # Successful answers per second: refused or failed calls are no throughput.
        requests_per_second=round(summary["ok"] / seconds, 2) if seconds else 0.0,
        output_tokens_per_second=round(summary["output_tokens"] / seconds, 1) if seconds else 0.0,
        ttft_p50_ms=summary["ttft_p50_ms"],
        ttft_p99_ms=summary["ttft_p99_ms"],
        ttft_p999_ms=summary["ttft_p999_ms"],
        latency_p50_ms=summary["p50_ms"],
        latency_p99_ms=summary["p99_ms"],
        latency_p999_ms=summary["p999_ms"],
        cut_short=summary["stopped"],
    )


def run_load_test(load_test_id: int) -> None:
    """Run a queued load test to its end (done, cancelled or failed)."""
    claimed = LoadTest.objects.filter(pk=load_test_id, status=Status.QUEUED).update(
        status=Status.RUNNING, started_at=tz.now()
    )
    if not claimed:
        return  # already run, or cancelled while queued
    test = LoadTest.objects.select_related("started_by__user", "started_by__organization").get(
        pk=load_test_id
    )
    if test.started_by is None:
        _finish(test, Status.FAILED, "The member who started this test has left.")
        return
    actor = Actor(test.started_by, None)
    key = None
    status, error = Status.DONE, ""
    try:
        key, raw = api_key_issue(
            actor=actor,
            name=f"load test #{test.pk}",
            spend_cap_lifetime=test.budget,
            allowed_models=[test.model],
            test_traffic=test.billing == Billing.TEST,
            pinned_node_id=test.pinned_node_id,
        )
        test.api_key_id, test.key_prefix = key.pk, key.prefix
        test.save(update_fields=["api_key_id", "key_prefix"])
        payloads = bodies(test.model, test.input_tokens, test.output_tokens, test.prefix_share)
        if _run_steps(test, payloads, raw):
            status = Status.CANCELLED
    except Exception as exc:  # the run ends as failed, with the reason shown
        log.exception("load test %s failed", test.pk)
        status, error = Status.FAILED, str(exc)[:500] or type(exc).__name__
    finally:
        close_old_connections()
        if key is not None:
            try:
                api_key_revoke(actor=actor, key_id=key.pk)
            except Exception:
                log.exception("load test %s: could not revoke key %s", test.pk, key.prefix)
    _finish(test, status, error)


def _run_steps(test: LoadTest, payloads: list[dict], raw_key: str) -> bool:
    """Each step of ``test`` in turn, its clients calling the gateway with the test's
    own key, its figures stored as it ends; whether the test was cancelled."""
    url = settings.CAPACITY_GATEWAY_URL + "/v1/chat/completions"
    headers = {"authorization": f"Bearer {raw_key}"}
    with _CancelWatch(test.pk) as watch:
        for index, clients in enumerate(test.steps):
            if watch.cancelled.is_set():
                break
            test.current_step, test.step_started_at = index, tz.now()
            test.save(update_fields=["current_step", "step_started_at"])
            summary = run_load(
                url,
                payloads,
                headers,
                concurrency=clients,
                seconds=test.step_seconds,
                stream=True,
                timeout=REQUEST_TIMEOUT_SECONDS,
                drain=1.0,
                stop=watch.cancelled.is_set,
            )
            _store_step(test, index, clients, summary)
            test.current_step = index + 1
            test.save(update_fields=["current_step"])
        return watch.cancelled.is_set()


def _finish(test: LoadTest, status: str, error: str) -> None:
    steps = list(test.results.order_by("index"))
    knee = find_knee([(s.requests_per_second, s.latency_p99_ms) for s in steps])
    test.knee_step = steps[knee].index if knee is not None else None
    test.status, test.error, test.finished_at = status, error, tz.now()
    test.save(update_fields=["knee_step", "status", "error", "finished_at"])
