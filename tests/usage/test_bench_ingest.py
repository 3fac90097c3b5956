"""``manage.py bench_ingest`` on a few events: it ingests them with the
ledger debit, proves a redelivery changes nothing and, on PostgreSQL,
measures in the same run the bare COPY floor and the COPY into a table with
the call table's indexes."""

from __future__ import annotations

import gc
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from accounts.facade import Organization
from tooling.bench.ingest import BENCH_SLUG, FLOOR_TABLE
from usage.ingest.pg import COPY_COLUMNS
from usage.models import CallRecord


def bench(**options) -> dict:
    out = io.StringIO()
    try:
        call_command("bench_ingest", stdout=out, stderr=io.StringIO(), **options)
    finally:
        gc.unfreeze()
    return json.loads(out.getvalue())


# VACUUM and the floor's commits run outside a test transaction.
@pytest.mark.django_db(transaction=True)
def test_ingests_debits_the_ledger_and_reports_the_floor_on_postgresql():
    report = bench(events=60, batch=20)
    org = Organization.objects.get(slug=BENCH_SLUG)
    assert org.billing_mode == "prepaid"
    assert report["events"] == 60
    assert report["redelivered_batch_duplicates"] == 20
    assert report["double_counted"] == 0
    assert report["ledger_debit_matches_cost"] is True
    # The timed events and the untimed warm-up batch are stored.
    assert CallRecord.objects.filter(organization_id=org.pk).count() == 80
    assert report["worker_cpu_seconds"] > 0
    if connection.vendor != "postgresql":
        assert "floor_copy_events_per_second" not in report
        return
    assert report["floor_copy_rows"] == 80
    assert report["floor_copy_table"] == "logged, no indexes or constraints"
    floor = report["floor_copy_events_per_second"]
    assert floor > 0
    assert report["share_of_floor"] == pytest.approx(report["events_per_second"] / floor, abs=1e-3)
    indexed = report["indexed_copy_events_per_second"]
    assert indexed > 0
    assert report["indexed_copy_share_of_floor"] == pytest.approx(indexed / floor, abs=1e-3)
    assert report["share_of_indexed_copy"] == pytest.approx(
        report["events_per_second"] / indexed, abs=1e-3
    )
    # The server runs on this machine in the tests: its CPU per event is read.
    assert report["database_cpu_us_per_event"] >= 0
    assert report["worker_cpu_us_per_event"] > 0
    with connection.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)", [FLOOR_TABLE])
        assert cur.fetchone()[0] is None  # dropped after the measurement
    assert len(COPY_COLUMNS) == len({f.column for f in CallRecord._meta.concrete_fields})


def test_nonsense_arguments_are_refused():
    with pytest.raises(CommandError, match="at least"):
        call_command("bench_ingest", events=5, batch=10, stdout=io.StringIO())
