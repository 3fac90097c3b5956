"""PostgreSQL: call records in monthly range partitions. The migration
converts a table with rows (and back), partitions are created ahead
idempotently, retention drops whole old partitions, ingest lands in the
right month and stays idempotent, the default partition catches stray rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.services import require
from tests.usage.factories import event, expected_rollups, stored_rollups
from usage import partitions
from usage.ingest import ingest_events
from usage.models import CallRecord
from usage.retention import prune_calls
from usage.tasks import ensure_call_partitions

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _postgres_only(db):
    require(connection.vendor == "postgresql", "call partitions exist on PostgreSQL only")


def where(request_id: str) -> str:
    """The partition a call record is stored in."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT tableoid::regclass::text FROM usage_call WHERE request_id = %s", [request_id]
        )
        return cur.fetchone()[0]


def relkind() -> str:
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE oid = 'usage_call'::regclass")
        return cur.fetchone()[0]


def key_columns() -> list[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = 'usage_call'::regclass AND i.indisprimary ORDER BY a.attnum"
        )
        return [r[0] for r in cur.fetchall()]


def index_names() -> set[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'usage_call'")
        return {r[0] for r in cur.fetchall()}


def test_the_call_table_is_partitioned_by_month_under_the_models_index_names():
    assert relkind() == "p"
    assert key_columns() == ["request_id", "started_at"]
    declared = {i.name for i in CallRecord._meta.indexes}
    assert index_names() == declared | {"usage_call_pkey"}
    names = [p.name for p in partitions.partitions()]
    now = partitions.month_start(datetime.now(UTC))
    assert partitions.partition_name(now) in names
    assert partitions.partition_name(partitions.add_months(now, 3)) in names
    assert names[-1] == "usage_call_default"


def _this_migration(executor):
    """The partitioning migration and the usage migration before it (found by
    name: the integrator may renumber it)."""
    nodes = [
        k
        for k in executor.loader.graph.nodes
        if k[0] == "usage" and k[1].endswith("_partition_calls_by_month")
    ]
    assert len(nodes) == 1, nodes
    node = nodes[0]
    parents = [p for p in executor.loader.graph.node_map[node].parents if p.key[0] == "usage"]
    return node, parents[0].key


def test_the_migration_converts_a_table_with_rows_back_and_forth(key):
    old = datetime(2024, 2, 10, 8, 30, tzinfo=UTC)
    calls = [event(key, started_at=old + timedelta(days=d)) for d in (0, 25, 60)]
    ingest_events(calls)
    executor = MigrationExecutor(connection)
    node, before = _this_migration(executor)
    executor.migrate([before])
    assert relkind() == "r"
    assert key_columns() == ["request_id"]
    assert index_names() == {i.name for i in CallRecord._meta.indexes} | {"usage_call_pkey"}
    assert CallRecord.objects.count() == 3
    # A column another migration added is carried over, values and all.
    with connection.cursor() as cur:
        cur.execute("ALTER TABLE usage_call ADD COLUMN scratch_note text")
        cur.execute("UPDATE usage_call SET scratch_note = 'kept ' || request_id")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([node])
    assert relkind() == "p"
    assert key_columns() == ["request_id", "started_at"]
    assert index_names() == {i.name for i in CallRecord._meta.indexes} | {"usage_call_pkey"}
    # Each row in its month's partition, made for it; none in the default.
    assert [where(c["request_id"]) for c in calls] == [
        "usage_call_p202402",
        "usage_call_p202403",
        "usage_call_p202404",
    ]
    assert partitions.default_rows() == 0
    with connection.cursor() as cur:
        cur.execute("SELECT request_id, scratch_note FROM usage_call ORDER BY request_id")
        assert cur.fetchall() == sorted((c["request_id"], "kept " + c["request_id"]) for c in calls)
        cur.execute("ALTER TABLE usage_call DROP COLUMN scratch_note")


def test_ensure_creates_months_ahead_once():
    now = datetime(2031, 5, 17, tzinfo=UTC)
    created = partitions.ensure_partitions(months_ahead=2, now=now)
    assert created == ["usage_call_p203105", "usage_call_p203106", "usage_call_p203107"]
    assert partitions.ensure_partitions(months_ahead=2, now=now) == []
    spans = {p.name: (p.start, p.end) for p in partitions.partitions()}
    assert spans["usage_call_p203107"] == (
        datetime(2031, 7, 1, tzinfo=UTC),
        datetime(2031, 8, 1, tzinfo=UTC),
    )


def test_the_daily_task_keeps_the_configured_months_ready(settings):
    assert settings.CELERY_BEAT_SCHEDULE["usage-ensure-call-partitions"] == {
        "task": "usage.ensure_call_partitions",
        "schedule": 86400.0,
    }
    settings.USAGE_PARTITION_MONTHS_AHEAD = 5
    created = ensure_call_partitions()
    ahead = partitions.add_months(partitions.month_start(datetime.now(UTC)), 5)
    assert partitions.partition_name(ahead) in created
    assert ensure_call_partitions() == []


def test_the_default_partition_catches_far_rows_and_ensure_moves_them_home(key):
    far_past = event(key, started_at=datetime(1999, 6, 15, 12, tzinfo=UTC))
    far_future = event(key, started_at=datetime(2099, 1, 2, tzinfo=UTC))
    # The far-future call is written straight (ingest dead-letters clock skew).
    ingest_events([far_past])
    CallRecord.objects.bulk_create([CallRecord(**_record(key, far_future))])
    assert where(far_past["request_id"]) == "usage_call_default"
    assert where(far_future["request_id"]) == "usage_call_default"
    assert partitions.default_rows() == 2

    created = partitions.ensure_partitions(months_ahead=0, now=datetime(1999, 6, 1, tzinfo=UTC))
    assert created == ["usage_call_p199906"]
    assert where(far_past["request_id"]) == "usage_call_p199906"
    assert partitions.default_rows() == 1


def _record(key, e: dict) -> dict:
    started = datetime.fromisoformat(e["started_at"])
    return {
        "request_id": e["request_id"],
        "organization_id": key.organization_id,
        "api_key_id": key.pk,
        "model": e["model"],
        "protocol": "openai",
        "endpoint": "chat.completions",
        "status_code": 200,
        "started_at": started,
        "finished_at": started + timedelta(seconds=1),
        "latency_us": 1_000_000,
        "currency": "USD",
    }


def test_retention_drops_whole_old_partitions_and_deletes_only_the_edge(settings, catalog, key):
    now = datetime.now(UTC)
    cutoff = now - timedelta(days=60)
    old_month = partitions.add_months(partitions.month_start(cutoff), -2)
    edge_month = partitions.month_start(cutoff)
    partitions.ensure_partitions(first=old_month, months_ahead=1)
    old = [event(key, started_at=old_month + timedelta(days=3, minutes=i)) for i in range(4)]
    # In the month the cutoff falls in: one before it, one after it.
    edge_gone = event(key, started_at=max(edge_month, cutoff - timedelta(days=1)))
    edge_kept = event(key, started_at=cutoff + timedelta(hours=1))
    current = [event(key, started_at=now - timedelta(minutes=i + 1)) for i in range(3)]
    ingest_events([*old, edge_gone, edge_kept, *current])
    assert where(old[0]["request_id"]) == partitions.partition_name(old_month)

    settings.USAGE_RETENTION_DAYS = 60
    assert prune_calls() == 5
    names = [p.name for p in partitions.partitions()]
    assert partitions.partition_name(old_month) not in names
    assert partitions.partition_name(edge_month) in names
    assert partitions.partition_name(partitions.month_start(now)) in names
    assert set(CallRecord.objects.values_list("request_id", flat=True)) == {
        edge_kept["request_id"],
        *(c["request_id"] for c in current),
    }


def test_ingest_writes_next_months_calls_into_next_months_partition(settings, catalog, key):
    next_month = partitions.add_months(partitions.month_start(datetime.now(UTC)), 1)
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 62 * 24 * 3600
    e = event(key, started_at=next_month + timedelta(minutes=5))
    assert ingest_events([e]).accepted == 1
    assert where(e["request_id"]) == partitions.partition_name(next_month)


def test_a_replayed_batch_across_months_adds_no_row_and_no_rollup(catalog, org, key):
    now = datetime.now(UTC).replace(microsecond=0)
    last_month = partitions.add_months(partitions.month_start(now), -1)
    partitions.ensure_partitions(first=last_month)
    batch = [event(key, started_at=last_month + timedelta(days=2, minutes=i)) for i in range(3)]
    batch += [event(key, started_at=now - timedelta(minutes=i + 1)) for i in range(3)]
    assert ingest_events(batch).accepted == 6
    rollups = stored_rollups(org.pk)

    # The whole batch again (the straight COPY fails, staging drops every row),
    # then a batch mixing two new calls with replays.
    again = ingest_events(batch)
    assert (again.accepted, again.duplicates) == (0, 6)
    fresh = [event(key, started_at=now - timedelta(seconds=5 + i)) for i in range(2)]
    mixed = ingest_events([*fresh, *batch[:2], batch[4]])
    assert (mixed.accepted, mixed.duplicates) == (2, 3)

    assert CallRecord.objects.count() == 8
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
    assert stored_rollups(org.pk) != rollups  # the two new calls, counted once
    assert {where(e["request_id"]) for e in batch[:3]} == {partitions.partition_name(last_month)}


def test_the_command_lists_and_ensures_partitions():
    out = StringIO()
    call_command("call_partitions", "ensure", "--ahead", "7", stdout=out)
    result = json.loads(out.getvalue())
    ahead = partitions.add_months(partitions.month_start(datetime.now(UTC)), 7)
    assert partitions.partition_name(ahead) in result["created"]
    assert result["default_rows"] == 0
    out = StringIO()
    call_command("call_partitions", "list", stdout=out)
    lines = out.getvalue().splitlines()
    assert f"{partitions.partition_name(ahead)}\t{ahead:%Y-%m-%d} .. " in lines[-2]
    assert lines[-1] == "usage_call_default\tDEFAULT\t0"


@pytest.mark.django_db(transaction=True)
def test_a_partition_a_reader_holds_is_not_waited_for_its_rows_go_by_delete(
    settings, monkeypatch, catalog, key
):
    old_month = partitions.add_months(partitions.month_start(datetime.now(UTC)), -6)
    partitions.ensure_partitions(first=old_month, months_ahead=0)
    name = partitions.partition_name(old_month)
    try:
        ingest_events(
            [event(key, started_at=old_month + timedelta(days=1, minutes=i)) for i in range(3)]
        )
        monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "200ms")
        settings.USAGE_RETENTION_DAYS = 60
        # A long export reading the table: a DROP would queue ingest behind it.
        with psycopg.connect(**connection.get_connection_params()) as reader:
            reader.execute("SELECT 1 FROM usage_call LIMIT 1")
            assert prune_calls() == 3
            reader.rollback()
        assert name in [p.name for p in partitions.partitions()]
        assert CallRecord.objects.count() == 0
    finally:
        with connection.cursor() as cur:
            cur.execute(f'DROP TABLE IF EXISTS "{name}"')


def test_empty_months_ahead_are_dropped_and_a_month_with_calls_is_kept(settings, catalog, key):
    current = partitions.month_start(datetime.now(UTC))
    partitions.ensure_partitions(months_ahead=3)
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 95 * 24 * 3600
    in_two = partitions.add_months(current, 2)
    e = event(key, started_at=in_two + timedelta(hours=1))
    assert ingest_events([e]).accepted == 1

    dropped = partitions.drop_empty_partitions_after(current)
    assert dropped == [
        partitions.partition_name(partitions.add_months(current, 1)),
        partitions.partition_name(partitions.add_months(current, 3)),
    ]
    names = [p.name for p in partitions.partitions()]
    assert partitions.partition_name(current) in names
    assert where(e["request_id"]) == partitions.partition_name(in_two)


def test_rows_by_partition_counts_an_organizations_calls_per_month(catalog, org, key):
    now = datetime.now(UTC)
    last_month = partitions.add_months(partitions.month_start(now), -1)
    partitions.ensure_partitions(first=last_month)
    ingest_events(
        [event(key, started_at=last_month + timedelta(days=1))]
        + [event(key, started_at=now - timedelta(minutes=i + 1)) for i in range(2)]
    )
    assert partitions.rows_by_partition([org.pk]) == {
        partitions.partition_name(last_month): 1,
        partitions.partition_name(partitions.month_start(now)): 2,
    }
    assert partitions.rows_by_partition([org.pk + 10_000]) == {}
