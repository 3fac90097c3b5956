"""The call table's month partitions on PostgreSQL: list them, or create them ahead."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from usage import partitions


def _month(value: str) -> datetime:
    try:
        return datetime.strptime(value, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise CommandError(f"--from takes a month as YYYY-MM, not {value!r}") from None


class Command(BaseCommand):
    help = (
        "List the call table's month partitions (with their row counts), or ensure them: "
        "the current month and USAGE_PARTITION_MONTHS_AHEAD (or --ahead) more, from --from."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["list", "ensure"])
        parser.add_argument("--ahead", type=int, help="Months ahead of the current one")
        parser.add_argument("--from", dest="first", type=_month, help="First month, YYYY-MM")

    def handle(
        self, *args: Any, action: str, ahead: int | None, first: datetime | None, **options: Any
    ) -> None:
        if not partitions.is_partitioned():
            raise CommandError("usage_call is not partitioned (PostgreSQL only, after migrate)")
        if action == "ensure":
            if ahead is not None and ahead < 0:
                raise CommandError("--ahead must be 0 or more")
            created = partitions.ensure_partitions(months_ahead=ahead, first=first)
            self.stdout.write(
                json.dumps({"created": created, "default_rows": partitions.default_rows()})
            )
            return
        for part in partitions.partitions(count_rows=True):
            span = "DEFAULT" if part.is_default else f"{part.start:%Y-%m-%d} .. {part.end:%Y-%m-%d}"
            self.stdout.write(f"{part.name}\t{span}\t{part.rows}")
