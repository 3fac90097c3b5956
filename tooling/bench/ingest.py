# ruff: noqa: S608 - SQL is built from constant table and column names; the org id is an int.
"""Sustained ingest throughput into the configured database, the way the
worker runs it: one process, batches of pre-generated valid events through
``ingest_events``. Then one batch is delivered again to prove nothing is
counted twice. Uses (and clears) its own organization, ``bench-ingest``,
which is prepaid, so every batch also writes its ledger debit (checked: the
balance drops by exactly the calls' cost).

On PostgreSQL the same run then measures the floor: the call rows just
stored, read back as COPY text, copied again batch by batch (one COPY and
one commit per batch, the same batch size) into a plain logged table with
the call table's columns and no index, constraint or default
(``CREATE TABLE … AS … WITH NO DATA``: the call table's durability, none of
its upkeep). Then the same rows again into a table with the call table's
indexes (its primary key and the call-log indexes) and nothing more: what
storing the calls costs before any rating, rollup or ledger work, the
ceiling of any ingest that keeps those indexes. The JSON reports the three
rates, ingest's share of each COPY, and (one worker, a server on this
machine) the CPU the worker and the database server spent per event."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections
from django.db.models import Sum

from accounts.facade import BillingMode, Organization
from console.kernel import hooks
from usage.ingest import ingest_events
from usage.ingest.pg import COPY_COLUMNS
from usage.models import AttributionRollup, CallRecord, DeadLetter, Rollup
from usage.seed import seed_catalog
from usage.synth import batched, ensure_org, generate

BENCH_SLUG = "bench-ingest"
FLOOR_TABLE = "bench_ingest_floor"
THREAD_SWITCH_INTERVAL = 0.001  # seconds


def _clear(org_id: int) -> None:
    CallRecord.objects.filter(organization_id=org_id).delete()
    Rollup.objects.filter(organization_id=org_id).delete()
    AttributionRollup.objects.filter(organization_id=org_id).delete()
    DeadLetter.objects.filter(organization_id=org_id).delete()
    if connection.vendor == "postgresql":
        # Reclaim what the previous run left, as autovacuum would between
        # runs (it may be off, or not yet around): otherwise every run
        # inserts among more dead index entries and the figure drifts down.
        tables = ", ".join(
            m._meta.db_table for m in (CallRecord, Rollup, AttributionRollup, DeadLetter)
        )
        with connection.cursor() as cur:
            cur.execute(f"VACUUM (ANALYZE) {tables}")


def _analyze() -> None:
    if connection.vendor == "postgresql":
        tables = ", ".join(m._meta.db_table for m in (CallRecord, Rollup))
        with connection.cursor() as cur:
            cur.execute(f"ANALYZE {tables}")


def _totals(org_id: int) -> dict:
    calls = CallRecord.objects.filter(organization_id=org_id)
    sums = (
        Rollup.objects.filter(organization_id=org_id)
        .values("grain")
        .annotate(calls=Sum("calls"), cost=Sum("cost"), tokens=Sum("input_tokens"))
    )
    attributed = (
        AttributionRollup.objects.filter(organization_id=org_id)
        .values("kind")
        .annotate(calls=Sum("calls"), cost=Sum("cost"), tokens=Sum("input_tokens"))
    )
    return {
        "records": calls.count(),
        "cost": calls.aggregate(s=Sum("cost"))["s"] or 0,
        "rollups": sorted((r["grain"], r["calls"], r["cost"], r["tokens"]) for r in sums)
        + sorted((r["kind"], r["calls"], r["cost"], r["tokens"]) for r in attributed),
    }


TEAMS = ("search", "chat", "ads", "billing", "support")


def _tag(events: list[dict]) -> None:
    """Cost attribution on the synthetic traffic (``--tagged``): most calls
    carry a team tag, a third a feature and an environment too, two thirds
    an end user (one of a thousand)."""
    for i, e in enumerate(events):
        tags = {}
        if i % 10:
            tags["team"] = TEAMS[i % len(TEAMS)]
        if i % 3 == 0:
            tags["feature"] = f"feature-{i % 7}"
            tags["env"] = "prod"
        e.update(
            credential_id=None,
            upstream_cost=0,
            upstream_currency="",
            end_user=f"user-{i % 1000}" if i % 3 else "",
            tags=tags,
        )


def _stored_chunks(org_id: int, batch: int) -> list[bytes]:
    """The organization's stored call rows as COPY text, ``batch`` rows a chunk."""
    cols = ", ".join(COPY_COLUMNS)
    connection.ensure_connection()
    raw = connection.connection
    data = bytearray()
    with (
        raw.cursor() as cur,
        cur.copy(
            f"COPY (SELECT {cols} FROM usage_call WHERE organization_id = {int(org_id)}) TO STDOUT"
        ) as copy,
    ):
        for chunk in copy:
            data += chunk
    raw.commit()
    lines = bytes(data).splitlines(keepends=True)
    return [b"".join(lines[i : i + batch]) for i in range(0, len(lines), batch)]


def _timed_copy(chunks: list[bytes], create: str) -> float:
    """Seconds to COPY ``chunks`` into a table made by ``create``, one COPY
    and one commit per chunk (only those are timed); the table is dropped."""
    cols = ", ".join(COPY_COLUMNS)
    raw = connection.connection
    with raw.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        cur.execute(create)
    raw.commit()
    try:
        began = time.perf_counter()
        for chunk in chunks:
            with raw.cursor() as cur, cur.copy(f"COPY {FLOOR_TABLE} ({cols}) FROM STDIN") as copy:
                copy.write(chunk)
            raw.commit()
        return time.perf_counter() - began
    finally:
        with raw.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        raw.commit()


def _copy_floors(org_id: int, batch: int) -> tuple[int, float, float]:
    """The bare COPY floor and the indexed COPY: the organization's stored
    call rows, as COPY text, copied again one batch per transaction into an
    unindexed table, then into one with the call table's indexes (and
    nothing else ingest does). Returns (rows, floor seconds, indexed seconds)."""
    cols = ", ".join(COPY_COLUMNS)
    chunks = _stored_chunks(org_id, batch)
    rows = sum(chunk.count(b"\n") for chunk in chunks)
    # Not TEMP (temporary tables are unlogged): logged, like the call table.
    bare = _timed_copy(
        chunks, f"CREATE TABLE {FLOOR_TABLE} AS SELECT {cols} FROM usage_call WITH NO DATA"
    )
    # The call table's columns, defaults, checks and indexes (its primary
    # key and the three call-log indexes), as one plain table.
    indexed = _timed_copy(chunks, f"CREATE TABLE {FLOOR_TABLE} (LIKE usage_call INCLUDING ALL)")
    return rows, bare, indexed


def _backend_cpu() -> float | None:
    """CPU seconds the database server process behind this connection has
    used, when the server runs on this machine (Linux); else ``None``."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cost_of(org_id: int, request_ids: list[str]) -> int:
    calls = CallRecord.objects.filter(organization_id=org_id, request_id__in=request_ids)
    return calls.aggregate(s=Sum("cost"))["s"] or 0


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
        parser.add_argument(
            "--tagged",
            action="store_true",
            help="Give the calls end users and tags (cost attribution), as tagging callers do.",
        )

    def handle(
        self,
        *args,
        events: int,
        batch: int,
        workers: int,
        profile: str | None,
        tagged: bool = False,
        **options,
    ):
        if events < batch or batch < 1:
            raise CommandError("--events must be at least --batch, and --batch at least 1")
        seed_catalog()
        org, keys = ensure_org(BENCH_SLUG, "Ingest benchmark")
        # Prepaid: every batch writes its ledger debit, as a prepaid customer's do.
        Organization.objects.filter(pk=org.pk).update(billing_mode=BillingMode.PREPAID)
        _clear(org.pk)
        # One batch, not timed, warms the caches and the connection, and
        # gives the tables rows to be analyzed: the run starts from tables
        # emptied and analyzed by ``_clear``, and statistics of an empty table
        # would steer the rollup lookups to a worse index than a worker in
        # steady state gets (autovacuum analyzes a table once it has grown).
        warm_up, *batches = _batches(keys, events, batch, tagged)
        total = sum(len(b) for b in batches)
        ingest_events(warm_up)
        _analyze()
        balance_before = hooks.PREPAID_BALANCE.ask(org.pk)
        run = _timed_run(batches, workers, profile)
        before = _totals(org.pk)
        debited = balance_before - hooks.PREPAID_BALANCE.ask(org.pk)
        again = ingest_events(batches[len(batches) // 2])
        double_counted = _counted_twice(before, _totals(org.pk))
        if run.accepted != total:
            raise CommandError(f"only {run.accepted} of {total} events were accepted")
        # The warm-up batch was debited before the balance was read.
        cost_timed = before["cost"] - _cost_of(org.pk, [e["request_id"] for e in warm_up])
        report = {
            "events": total,
            "batch": batch,
            "seconds": round(run.seconds, 3),
            "events_per_second": round(total / run.seconds),
            # This process's CPU time in the run: what is left of ``seconds``
            # is waiting on the database.
            "worker_cpu_seconds": round(run.cpu_seconds, 3),
            "redelivered_batch_duplicates": again.duplicates,
            "double_counted": double_counted,
            "ledger_debit_matches_cost": debited == cost_timed,
            "database": connection.vendor,
            "workers": workers,
            "tagged": tagged,
        }
        if connection.vendor == "postgresql":
            report |= _postgresql_figures(org.pk, batch, total, run)
        self.stdout.write(json.dumps(report))
        if double_counted or debited != cost_timed:
            raise CommandError("redelivery counted twice or the ledger debit is not the cost")


@dataclass(frozen=True)
class _Run:
    """The timed run: events accepted, wall and worker CPU seconds, and the
    database server's CPU seconds (``None``: not measured)."""

    accepted: int
    seconds: float
    cpu_seconds: float
    db_cpu: float | None


def _batches(keys: list, events: int, batch: int, tagged: bool) -> list[list[dict]]:
    """The run's events (a batch more than ``events``: the warm-up), in batches."""
    # The last two hours: at tens of thousands of calls a second a batch
    # covers milliseconds, so it touches one hour (or two at the turn).
    hours = 3
    now = datetime.now(UTC)
    start = now - timedelta(hours=hours)
    calls = generate(
        keys, start=start, hours=hours, calls=events + batch, seed=int(time.time()), end_limit=now
    )
    batches = list(batched(calls, batch))
    if tagged:
        for b in batches:
            _tag(b)
    return batches


def _timed_run(batches: list[list[dict]], workers: int, profile: str | None) -> _Run:
    # A worker holds one batch, not the whole run's events: keep the
    # garbage collector from re-scanning the pre-generated data.
    gc.collect()
    gc.freeze()
    profiler = None
    if profile:
        import cProfile  # only with --profile: the timed run never loads the profiler

        profiler = cProfile.Profile()
        profiler.enable()
    # The database's CPU is read off this connection's server process:
    # with one worker it is the one doing the ingest.
    one_backend = workers == 1 and connection.vendor == "postgresql"
    db_cpu_began = _backend_cpu() if one_backend else None
    began = time.perf_counter()
    cpu_began = time.process_time()
    accepted = _run(batches, workers)
    seconds = time.perf_counter() - began
    cpu_seconds = time.process_time() - cpu_began
    db_cpu_ended = _backend_cpu() if db_cpu_began is not None else None
    db_cpu = None
    if db_cpu_began is not None and db_cpu_ended is not None:
        db_cpu = db_cpu_ended - db_cpu_began
    if profiler is not None and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    return _Run(accepted, seconds, cpu_seconds, db_cpu)


def _counted_twice(before: dict, after: dict) -> int:
    """How far the call records and rollups moved between the two totals."""
    return abs(after["records"] - before["records"]) + sum(
        abs(a[1] - b[1]) + abs(a[2] - b[2])
        for a, b in zip(after["rollups"], before["rollups"], strict=True)
    )


def _postgresql_figures(org_id: int, batch: int, total: int, run: _Run) -> dict:
    """The COPY floors beside the run, and the CPU per event of both sides."""
    rows, floor_seconds, indexed_seconds = _copy_floors(org_id, batch)
    floor = rows / floor_seconds
    indexed = rows / indexed_seconds
    rate = total / run.seconds
    figures: dict = {}
    if run.db_cpu is not None:
        # What the server spent per event, beside the worker's own.
        figures["database_cpu_seconds"] = round(run.db_cpu, 3)
        figures["database_cpu_us_per_event"] = round(run.db_cpu / total * 1e6, 2)
        figures["worker_cpu_us_per_event"] = round(run.cpu_seconds / total * 1e6, 2)
    return figures | {
        "floor_copy_rows": rows,
        "floor_copy_seconds": round(floor_seconds, 3),
        "floor_copy_events_per_second": round(floor),
        "floor_copy_table": "logged, no indexes or constraints",
        "share_of_floor": round(rate / floor, 3),
        # The same COPY into a table with the call table's indexes:
        # what storing the calls alone costs, before any rating,
        # rollup or ledger work.
        "indexed_copy_seconds": round(indexed_seconds, 3),
        "indexed_copy_events_per_second": round(indexed),
        "indexed_copy_share_of_floor": round(indexed / floor, 3),
        "share_of_indexed_copy": round(rate / indexed, 3),
    }
