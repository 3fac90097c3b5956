"""Re-rate a period's calls after a price fix; prints a JSON summary."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from accounts.facade import Organization
from usage.rerate import rerate


def _when(value: str, name: str) -> datetime:
    parsed: datetime | None = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"{name} is not an ISO 8601 date-time: {value!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Recompute call costs from the price book for calls that started in [--from, --to). "
        "Closed (invoiced) periods get adjustments instead of edits."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="start", required=True, help="ISO start (UTC if naive)")
        parser.add_argument("--to", dest="end", required=True, help="ISO end, exclusive")
        parser.add_argument("--org", type=int, help="Only this organization id")
        parser.add_argument("--model", help="Only calls of this model")
        parser.add_argument("--reason", required=True, help="Why (kept in the run and audit log)")
        parser.add_argument("--dry-run", action="store_true", help="Report, change nothing")

    def handle(
        self,
        *args: Any,
        start: str,
        end: str,
        org: int | None,
        model: str | None,
        reason: str,
        dry_run: bool,
        **options: Any,
    ) -> None:
        if org is not None and not Organization.objects.filter(pk=org).exists():
            raise CommandError(f"No organization with id {org}.")
        try:
            summary = rerate(
                start=_when(start, "--from"),
                end=_when(end, "--to"),
                reason=reason,
                organization_id=org,
                model=model,
                dry_run=dry_run,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(summary.as_dict()))
