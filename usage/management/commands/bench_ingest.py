"""Sustained ingest throughput into the configured database, the way the
worker runs it: one process, batches of pre-generated valid events through
``ingest_events``. Then one batch is delivered again to prove nothing is
counted twice. Uses (and clears) its own organization, ``bench-ingest``."""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections
from django.db.models import Sum

from usage.ingest import ingest_events
from usage.models import CallRecord, DeadLetter, Rollup
from usage.seed import seed_catalog
from usage.synth import batched, ensure_org, generate

BENCH_SLUG = "bench-ingest"
THREAD_SWITCH_INTERVAL = 0.001  # seconds


def _clear(org_id: int) -> None:
    CallRecord.objects.filter(organization_id=org_id).delete()
    Rollup.objects.filter(organization_id=org_id).delete()
    DeadLetter.objects.filter(organization_id=org_id).delete()
    if connection.vendor == "postgresql":
        # Reclaim what the previous run left, as autovacuum would between
        # runs (it may be off, or not yet around): otherwise every run
        # inserts among more dead index entries and the figure drifts down.
        tables = ", ".join(m._meta.db_table for m in (CallRecord, Rollup, DeadLetter))
        with connection.cursor() as cur:
            cur.execute(f"VACUUM (ANALYZE) {tables}")


def _totals(org_id: int) -> dict:
    calls = CallRecord.objects.filter(organization_id=org_id)
    sums = (
        Rollup.objects.filter(organization_id=org_id)
        .values("grain")
        .annotate(calls=Sum("calls"), cost=Sum("cost"), tokens=Sum("input_tokens"))
    )
    return {
        "records": calls.count(),
        "cost": calls.aggregate(s=Sum("cost"))["s"] or 0,
        "rollups": sorted((r["grain"], r["calls"], r["cost"], r["tokens"]) for r in sums),
    }


def _run(batches: list[list[dict]], workers: int) -> int:
    """Ingest every batch; with several workers, threads take batches in turn
    (while one waits on the database another prepares its batch)."""
    if workers <= 1:
        return sum(ingest_events(b).accepted for b in batches)
    previous = sys.getswitchinterval()
    # A thread whose database reply has arrived waits for the GIL while the
    # other thread validates its batch; at the default 5 ms switch interval
    # that wait, not the CPUs, bounds the pair (a worker's thread pool wants
    # the same setting).
    sys.setswitchinterval(THREAD_SWITCH_INTERVAL)
    try:
        return _run_threads(batches, workers)
    finally:
        sys.setswitchinterval(previous)


def _run_threads(batches: list[list[dict]], workers: int) -> int:
    pending = iter(batches)
    lock = threading.Lock()
    counts: list[int] = []
    errors: list[BaseException] = []

    def work():
        done = 0
        try:
            while True:
                with lock:
                    b = next(pending, None)
                if b is None:
                    break
                done += ingest_events(b).accepted
        except BaseException as exc:
            errors.append(exc)
        finally:
            counts.append(done)
            connections.close_all()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


class Command(BaseCommand):
    help = "Measure sustained usage ingest (events/s) and check redelivery is harmless."

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=200_000)
        parser.add_argument("--batch", type=int, default=1000)
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="Ingest threads in this one process (a worker's thread pool); default 1",
        )
        parser.add_argument("--profile", metavar="FILE", help="Write a cProfile of the timed run.")

    def handle(self, *args, events: int, batch: int, workers: int, profile: str | None, **options):
        if events < batch or batch < 1:
            raise CommandError("--events must be at least --batch, and --batch at least 1")
        seed_catalog()
        org, keys = ensure_org(BENCH_SLUG, "Ingest benchmark")
        _clear(org.pk)
        # The last two hours: at tens of thousands of calls a second a batch
        # covers milliseconds, so it touches one hour (or two at the turn).
        hours = 3
        now = datetime.now(UTC)
        start = now - timedelta(hours=hours)
        stamp = int(time.time())
        batches = list(
            batched(
                generate(keys, start=start, hours=hours, calls=events, seed=stamp, end_limit=now),
                batch,
            )
        )
        total = sum(len(b) for b in batches)
        ingest_events(batches[0][:1])  # warm the caches and the connection, not timed
        # A worker holds one batch, not the whole run's events: keep the
        # garbage collector from re-scanning the pre-generated data.
        gc.collect()
        gc.freeze()
        profiler = None
        if profile:
            import cProfile  # only with --profile: the timed run never loads the profiler

            profiler = cProfile.Profile()
            profiler.enable()
        began = time.perf_counter()
        accepted = _run(batches, workers)
        seconds = time.perf_counter() - began
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        accepted += 1  # the warm-up event
        before = _totals(org.pk)
        again = ingest_events(batches[len(batches) // 2])
        after = _totals(org.pk)
        double_counted = abs(after["records"] - before["records"]) + sum(
            abs(a[1] - b[1]) + abs(a[2] - b[2])
            for a, b in zip(after["rollups"], before["rollups"], strict=True)
        )
        if accepted != total:
            raise CommandError(f"only {accepted} of {total} events were accepted")
        self.stdout.write(
            json.dumps(
                {
                    "events": total,
                    "batch": batch,
                    "seconds": round(seconds, 3),
                    "events_per_second": round(total / seconds),
                    "redelivered_batch_duplicates": again.duplicates,
                    "double_counted": double_counted,
                    "database": connection.vendor,
                    "workers": workers,
                }
            )
        )
