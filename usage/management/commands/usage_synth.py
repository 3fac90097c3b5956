"""Generate realistic synthetic usage and push it through the real ingest path."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from usage import partitions
from usage.ingest import ingest_events
from usage.seed import seed_catalog
from usage.synth import batched, ensure_org, generate
from usage.tasks import ingest_batch


class Command(BaseCommand):
    help = (
        "Create organizations with sub-accounts and keys (if missing) and ingest synthetic "
        "calls for the last --days days, in time order."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--orgs", type=int, default=3, help="How many organizations")
        parser.add_argument("--days", type=int, default=30)
        parser.add_argument("--calls", type=int, default=20_000, help="Calls per organization")
        parser.add_argument("--org-slug", help="Only this organization (created if missing)")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--batch", type=int, default=1000)
        parser.add_argument(
            "--via-celery", action="store_true", help="Send usage.ingest_batch tasks instead"
        )

    def handle(
        self,
        *args: Any,
        orgs: int,
        days: int,
        calls: int,
        org_slug: str | None,
        seed: int,
        batch: int,
        via_celery: bool,
        **options: Any,
    ) -> None:
        if orgs < 1 or days < 1 or calls < 0 or batch < 1:
            raise CommandError("--orgs, --days and --batch must be positive, --calls not negative")
        seed_catalog()
        slugs = [org_slug] if org_slug else [f"synth-{i}" for i in range(1, orgs + 1)]
        now = datetime.now(UTC)
        # On the hour: a rerun within the hour makes the very same events (same
        # request id, same start), which ingest drops as replays. On PostgreSQL
        # a replay is matched on (request_id, started_at), the partitioned
        # table's key; an event re-made with another start would be a new row.
        start = (now - timedelta(days=days)).replace(minute=0, second=0, microsecond=0)
        # PostgreSQL: the history's months get their partitions (else the default one takes it).
        partitions.ensure_partitions(first=start)
        send = None
        if via_celery:
            send = ingest_batch.delay
        totals: dict[str, Any] = {
            "accepted": 0,
            "duplicates": 0,
            "dead_lettered": 0,
            "sent_batches": 0,
        }
        began = time.perf_counter()
        for i, slug in enumerate(slugs):
            org, keys = ensure_org(slug)
            events = generate(
                keys, start=start, hours=days * 24, calls=calls, seed=seed + i, end_limit=now
            )
            for chunk in batched(events, batch):
                if send is not None:
                    send(chunk)
                    totals["sent_batches"] += 1
                    continue
                result = ingest_events(chunk)
                totals["accepted"] += result.accepted
                totals["duplicates"] += result.duplicates
                totals["dead_lettered"] += result.dead_lettered
            self.stderr.write(f"{slug} (id {org.pk}): done")
        totals["seconds"] = round(time.perf_counter() - began, 2)
        totals["organizations"] = slugs
        self.stdout.write(json.dumps(totals))
