"""The PostgreSQL ingest path: COPY into staging, ON CONFLICT, rollup upserts
under row locks; concurrent workers lose nothing and count nothing twice."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.db import connection, connections

from tests.services import require
from tests.usage.factories import event, expected_rollups, stored_rollups
from usage.ingest import ingest_events, pg
from usage.models import CallRecord, Rollup
from usage.seed import seed_catalog

T0 = datetime(2025, 5, 6, 7, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _postgres_only(db):
    require(connection.vendor == "postgresql", "needs DATABASE_URL=postgres://…")


@pytest.mark.django_db
def test_the_call_table_has_only_its_primary_key_and_three_indexes():
    with connection.cursor() as cur:
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'usage_call'")
        names = sorted(r[0] for r in cur.fetchall())
    assert names == [
        "usage_call_org_key_time",
        "usage_call_org_model_time",
        "usage_call_org_time",
        "usage_call_pkey",
    ]


@pytest.mark.django_db
def test_a_failure_after_the_insert_rolls_the_whole_batch_back(org, key):
    seed_catalog()
    events = [event(key, started_at=T0) for _ in range(3)]
    with (
        mock.patch.object(pg, "apply_rollups", side_effect=RuntimeError("boom")),
        pytest.raises(RuntimeError),
    ):
        ingest_events(events)
    assert CallRecord.objects.count() == 0
    # The same connection and its staging table still work, and the retry counts once.
    assert ingest_events(events).accepted == 3
    assert Rollup.objects.get(organization_id=org.pk, grain="org").calls == 3


@pytest.mark.django_db
def test_text_needing_no_escape_and_nulls_survive_copy(org, key):
    seed_catalog()
    e = event(
        key,
        started_at=T0,
        request_id="req with spaces/ünï|çødé",
        error_type="upstream error: 'quoted'",
        client_ip=None,
        node_id=None,
        ttft_us=None,
        upstream_us=None,
        queue_us=1234,
    )
    ingest_events([e])
    call = CallRecord.objects.get()
    assert call.request_id == e["request_id"]
    assert call.error_type == e["error_type"]
    assert (call.client_ip, call.node_id, call.ttft_us, call.upstream_us) == (None,) * 4
    assert call.queue_us == 1234
    assert call.started_at == T0


@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_with_overlapping_batches_lose_and_double_nothing(org, key, team_key):
    seed_catalog()
    events = [
        event(k, started_at=T0 + timedelta(seconds=i), node_id=i % 3 or None)
        for i, k in enumerate([key, team_key] * 300)
    ]
    # Four workers, each delivering overlapping slices (every event at least twice).
    slices = [events[0:400], events[200:600], events[0:300] + events[450:], events[100:500]]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(slices))

    def worker(part):
        try:
            barrier.wait()
            for i in range(0, len(part), 50):
                ingest_events(part[i : i + 50])
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(p,)) for p in slices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert CallRecord.objects.count() == len(events)
    assert Rollup.objects.get(organization_id=org.pk, grain="org").calls == len(events)
    assert stored_rollups(org.pk) == expected_rollups(org.pk)


@pytest.mark.django_db
def test_a_rollup_row_created_by_another_worker_meanwhile_gets_the_batch_added(org, key):
    """A row that did not exist when the batch locked its rows, but does by
    the time it writes them, keeps what is in it and gets the batch added."""
    seed_catalog()
    ingest_events([event(key, started_at=T0 + timedelta(seconds=i)) for i in range(2)])
    execute = pg.psycopg.Cursor.execute
    blinded = []

    def lock_sees_no_rows_the_first_time(cur, query, params=None, **kwargs):
        if query == pg.LOCK and not blinded:
            blinded.append(query)  # as if the first batch committed just after
            params = ["{}" for _ in params]
        return execute(cur, query, params, **kwargs)

    with mock.patch.object(pg.psycopg.Cursor, "execute", lock_sees_no_rows_the_first_time):
        assert ingest_events([event(key, started_at=T0 + timedelta(minutes=5))]).accepted == 1
    assert blinded
    assert Rollup.objects.get(organization_id=org.pk, grain="org").calls == 3
    # Sums and histograms (checked against the call counts) hold all three calls.
    assert stored_rollups(org.pk) == expected_rollups(org.pk)


@pytest.mark.django_db
def test_model_names_with_array_syntax_reach_their_rollup_rows(org, key):
    seed_catalog()
    odd = 'we"ird,{model} NULL'
    ingest_events([event(key, started_at=T0, model=odd), event(key, started_at=T0, model="NULL")])
    rows = Rollup.objects.filter(organization_id=org.pk, grain="model")
    assert sorted(rows.values_list("model", "calls")) == [("NULL", 1), (odd, 1)]
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
