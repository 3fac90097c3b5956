"""Celery tasks of the usage app: thin calls into ingest and retention."""

from __future__ import annotations

from typing import Any

import psycopg
from celery import shared_task
from django.db import InterfaceError, OperationalError

from console.kernel import tracing
from usage import ingest, partitions, retention

# Django's wrappers, and psycopg's own for the raw COPY cursor of the ingest
# (a PostgreSQL restart surfaces there unwrapped).
TRANSIENT_DB_ERRORS = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


@shared_task(  # type: ignore[untyped-decorator]  # Celery ships no annotations
    name="usage.ingest_batch",
    acks_late=True,
    reject_on_worker_lost=True,
    # A database that is briefly unreachable or a serialization failure can
    # succeed later; ingest is idempotent, so a retry never double-counts.
    autoretry_for=TRANSIENT_DB_ERRORS,
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=10,
)
def ingest_batch(events: list[dict[str, Any]]) -> dict[str, int]:
    # A span when OpenTelemetry is configured (console.kernel.observability); else nothing.
    with tracing.span("usage.ingest", {"usage.batch_size": len(events)}) as span:
        result = ingest.ingest_events(events)
        if span is not None:
            span.set_attribute("usage.accepted", result.accepted)
            span.set_attribute("usage.duplicates", result.duplicates)
            span.set_attribute("usage.dead_lettered", result.dead_lettered)
    return {
        "accepted": result.accepted,
        "duplicates": result.duplicates,
        "dead_lettered": result.dead_lettered,
    }


@shared_task(name="usage.prune_calls")  # type: ignore[untyped-decorator]  # Celery: untyped
def prune_calls() -> int:
    return retention.prune_calls()


@shared_task(name="usage.ensure_call_partitions")  # type: ignore[untyped-decorator]  # Celery
def ensure_call_partitions() -> list[str]:
    """PostgreSQL: the call table's month partitions, created ahead (daily)."""
    return partitions.maintain()
