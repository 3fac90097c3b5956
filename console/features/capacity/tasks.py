"""The load test's Celery task, on a queue of its own (``CAPACITY_QUEUE``):
a test holds its worker for up to ``CAPACITY_MAX_DURATION_SECONDS``, so it
must never take a slot of the workers that ingest usage."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from console.features.capacity.runner import run_load_test


@shared_task(
    name="capacity.run_load_test",
    # Not acknowledged late: a worker lost mid-run must not start the load again.
    acks_late=False,
    time_limit=settings.CAPACITY_MAX_DURATION_SECONDS + 180,
    soft_time_limit=settings.CAPACITY_MAX_DURATION_SECONDS + 120,
)
def run_load_test_task(load_test_id: int) -> None:
    run_load_test(load_test_id)
