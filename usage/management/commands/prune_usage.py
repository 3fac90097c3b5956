"""Delete call records past the retention period, in batches; rollups stay."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone as tz

from usage.retention import prune_calls


class Command(BaseCommand):
    help = "Delete call records older than USAGE_RETENTION_DAYS (or --days). Rollups are kept."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, help="Override USAGE_RETENTION_DAYS")
        parser.add_argument("--batch", type=int, help="Rows per transaction (default 10,000)")

    def handle(self, *args: Any, days: int | None, batch: int | None, **options: Any) -> None:
        days = settings.USAGE_RETENTION_DAYS if days is None else days
        if days <= 0:
            self.stdout.write(json.dumps({"deleted": 0, "retention_days": 0}))
            return
        cutoff = tz.now() - timedelta(days=days)
        deleted = prune_calls(older_than=cutoff, batch_size=batch)
        self.stdout.write(
            json.dumps({"deleted": deleted, "retention_days": days, "cutoff": cutoff.isoformat()})
        )
