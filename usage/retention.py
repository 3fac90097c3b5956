"""Retention: call records older than ``USAGE_RETENTION_DAYS`` are deleted in
batches (one short transaction each, so ingest is never blocked for long);
rollups are kept forever, so analytics and invoices of old periods stay.

On PostgreSQL, where the call table is partitioned by month
(``usage.partitions``), every month partition wholly before the cutoff is
dropped at once; the batched delete then takes only the rest: the one
partition the cutoff falls in (so retention stays exact to the moment) and
the default partition."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone as tz

from usage import partitions
from usage.models import CallRecord


def prune_calls(
    *,
    older_than: datetime | None = None,
    batch_size: int | None = None,
    max_batches: int | None = None,
) -> int:
    """Delete call records that started before ``older_than`` (default: now
    minus the retention period). Returns how many were deleted; 0 when
    retention is off (``USAGE_RETENTION_DAYS = 0``) and no cutoff is given."""
    if older_than is None:
        days = settings.USAGE_RETENTION_DAYS
        if not days:
            return 0
        older_than = tz.now() - timedelta(days=days)
    size = batch_size or settings.USAGE_PRUNE_BATCH
    deleted = partitions.drop_partitions_before(older_than)
    batches = 0
    while max_batches is None or batches < max_batches:
        with transaction.atomic():
            ids = list(
                CallRecord.objects.filter(started_at__lt=older_than)
                .order_by()
                .values_list("request_id", flat=True)[:size]
            )
            if not ids:
                break
            # The time bound keeps the delete to the partitions before the cutoff.
            count, _ = CallRecord.objects.filter(
                request_id__in=ids, started_at__lt=older_than
            ).delete()
        deleted += count
        batches += 1
        if len(ids) < size:
            break
    return deleted
