"""The usage contract from ingest's side: the parsed event and the call row
are derived from ``UsageEvent`` and match the call table; batches written by
an older gateway process still ingest; and ingest tells
``console.kernel.hooks.CALLS_INGESTED`` receivers per-organization totals of exactly
the calls it stored, which the prepaid ledger debits once."""

from __future__ import annotations

import json
import zlib
from dataclasses import fields
from datetime import UTC, datetime

import pytest

from console.kernel import hooks
from gateway_bridge.emitter import UsageEmitter
from gateway_bridge.spool import Spool
from invoicing.models import LedgerEntry, LedgerKind
from invoicing.selectors import prepaid_balance
from invoicing.services import ledger_entry_create
from tests.usage.factories import event
from usage.events import (
    ADDED_FIELDS,
    FIELD_NAMES,
    STORED_FIELDS,
    UsageEvent,
    _parse_valid,
    _values,
    parse,
)
from usage.facade import OrgUsageTotals
from usage.ingest import ingest_events, pg
from usage.ingest.rows import CALL_COLUMNS, CallRow
from usage.models import CallRecord

T0 = datetime(2025, 3, 4, 10, 15, tzinfo=UTC)
USD = 1_000_000


def test_the_parsed_event_and_the_call_row_are_the_contracts_fields():
    assert tuple(f.name for f in fields(UsageEvent)) == FIELD_NAMES
    assert tuple(n for n in FIELD_NAMES if n != "version") == STORED_FIELDS
    assert CALL_COLUMNS[: len(STORED_FIELDS)] == STORED_FIELDS
    assert CALL_COLUMNS[len(STORED_FIELDS) :] == (
        "currency",
        "cost",
        "priced",
        "price_id",
        "ingested_at",
    )


def test_every_call_row_field_is_a_column_of_the_call_table():
    assert set(CALL_COLUMNS) == {f.column for f in CallRecord._meta.concrete_fields}


def test_a_valid_event_takes_the_fast_path():
    """Every field of the contract must be read by the fast path's unpacking:
    a field added without it would silently send every event down the slow path."""
    d = event(type("K", (), {"organization_id": 3, "sub_account_id": None, "pk": 9}))
    fast = _parse_valid(_values(d), datetime.now(UTC).timestamp() + 300)
    assert fast is not None
    assert fast == parse(d)
    assert fast.request_id == d["request_id"] and fast.started_at == T0


def test_the_copy_line_holds_each_columns_value_under_its_name():
    """PostgreSQL's COPY text (its writer streams it): tab-separated, in
    ``COPY_COLUMNS`` order, ``\\N`` for NULL."""
    values = dict.fromkeys(CALL_COLUMNS)
    values.update(request_id="req-1", organization_id=3, api_key_id=9, model="m", node_id=None)
    values.update(protocol="gemini", endpoint="embedContent", stream=True, status_code=200)
    values.update(error_type="", input_tokens=5, cache_status="miss", currency="EUR", cost=17)
    values.update(priced=True, price_id=4, latency_us=0, client_ip="::1", ttft_us=0)
    values.update(end_user='a\\b"c', tags={"team": 'x\\y"z', "env": "prod"})
    line = pg._line(CallRow(**values), "S", "F", "I")
    assert line.endswith("\n")
    copied = dict(zip(pg.COPY_COLUMNS, line[:-1].split("\t"), strict=True))
    assert set(copied) == set(CALL_COLUMNS)
    expected = {name: "\\N" if v is None else str(v) for name, v in values.items()}
    expected.update(started_at="S", finished_at="F", ingested_at="I")
    # The caller's text, COPY-escaped: a backslash doubled (in the JSON's escapes too).
    expected.update(end_user='a\\\\b"c', tags='{"team":"x\\\\\\\\y\\\\"z","env":"prod"}')
    assert copied == expected
    assert (copied["stream"], copied["node_id"], copied["ttft_us"]) == ("True", "\\N", "0")
    # The streaming writer's batch format (the ingestion time written in) makes the same line.
    row = CallRow(**values)
    fmt = pg._line_format("2025-05-06T07:00:00.000001+00:00")
    rest = pg._rest(row)
    assert fmt % ("S", "F", *map(pg._null, rest, rest), *pg._attribution(row)) == pg._line(
        row, "S", "F", "2025-05-06T07:00:00.000001+00:00"
    )


def _old_spool_line(seq: int, batch: list[dict]) -> bytes:
    """A spool line exactly as the gateway wrote it before the contract was a
    dataclass: the event dicts it built, through ``json.dumps``."""
    payload = json.dumps(batch, separators=(",", ":")).encode()
    return b'{"seq":%d,"crc":%d,"batch":%s}\n' % (seq, zlib.crc32(payload), payload)


@pytest.mark.django_db
def test_a_batch_spooled_by_an_older_gateway_still_ingests(catalog, key, tmp_path):
    # Given a spool file an older gateway process left on disk (before the
    # contract had the vendor-cost fields)
    batch = [event(key, started_at=T0, output_tokens=100 + i) for i in range(3)]
    batch = [{k: v for k, v in e.items() if k not in ADDED_FIELDS} for e in batch]
    path = tmp_path / "usage-0.spool"
    path.write_bytes(_old_spool_line(1, batch))
    # When it is replayed into ingest
    results = []
    Spool(path).replay(lambda b: results.append(ingest_events(b)))
    # Then every call is stored, as sent
    assert [r.accepted for r in results] == [3]
    stored = CallRecord.objects.in_bulk([e["request_id"] for e in batch])
    for e in batch:
        record = stored[e["request_id"]]
        assert record.output_tokens == e["output_tokens"]
        assert (record.credential_id, record.upstream_cost, record.upstream_currency) == (
            None,
            0,
            "",
        )


@pytest.mark.django_db
def test_events_the_emitter_spools_replay_into_ingest(catalog, key, tmp_path):
    # Given an emitter whose broker is down, handed the contract's events
    def refuse(batch):
        raise ConnectionError("broker unreachable")

    spool = Spool(tmp_path / "usage.jsonl")
    emitter = UsageEmitter(refuse, spool, max_batch=5, max_delay=0.05, replay_interval=60)
    events = [UsageEvent.from_dict(event(key, started_at=T0, input_tokens=9 + i)) for i in range(7)]
    for e in events:
        emitter.emit(e)
    assert emitter.close(timeout=10)
    assert emitter.spooled_batches == 2
    # When a later process replays the spool into ingest
    stored = []
    Spool(tmp_path / "usage.jsonl").replay(lambda b: stored.append(ingest_events(b).accepted))
    # Then every event is a call record with its values
    assert sum(stored) == 7
    records = CallRecord.objects.in_bulk([e.request_id for e in events])
    assert [records[e.request_id].input_tokens for e in events] == list(range(9, 16))


class _Spy:
    def __init__(self) -> None:
        self.calls: list[list[OrgUsageTotals]] = []

    def __call__(self, *, totals) -> None:
        self.calls.append(list(totals))


@pytest.fixture
def spy():
    receiver = _Spy()
    hooks.CALLS_INGESTED.connect(receiver)
    yield receiver
    hooks.CALLS_INGESTED.disconnect(receiver)


@pytest.mark.django_db
def test_calls_ingested_tells_totals_of_exactly_the_stored_calls(catalog, key, other_key, spy):
    mine = [event(key, started_at=T0, output_tokens=300 + i) for i in range(4)]
    theirs = [event(other_key, started_at=T0)]
    ingest_events([*mine, *theirs, {"not": "an event"}])
    [totals] = spy.calls
    costs = dict(CallRecord.objects.values_list("request_id", "cost"))
    assert totals == sorted(
        [
            OrgUsageTotals(
                organization_id=key.organization_id,
                calls=4,
                cost=sum(costs[e["request_id"]] for e in mine),
                request_ids=tuple(e["request_id"] for e in mine),
            ),
            OrgUsageTotals(
                organization_id=other_key.organization_id,
                calls=1,
                cost=costs[theirs[0]["request_id"]],
                request_ids=(theirs[0]["request_id"],),
            ),
        ],
        key=lambda t: t.organization_id,
    )
    # A redelivery stores nothing and tells nothing; an overlap tells only the new call.
    ingest_events(mine)
    extra = event(key, started_at=T0)
    ingest_events([*mine[:2], extra])
    assert len(spy.calls) == 2
    [[new]] = spy.calls[1:]
    assert new.request_ids == (extra["request_id"],) and new.calls == 1


@pytest.mark.django_db(transaction=True)
def test_a_prepaid_orgs_calls_are_debited_once_through_the_hook(catalog, org, key):
    # Given a prepaid organization with a balance (invoicing's receiver is
    # connected by InvoicingConfig.ready, not by this test)
    org.billing_mode = "prepaid"
    org.save(update_fields=["billing_mode"])
    ledger_entry_create(organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=USD, reference="t")
    batch = [event(key, started_at=T0, output_tokens=200 + i) for i in range(5)]
    # When its calls are ingested, and delivered again
    ingest_events(batch)
    ingest_events(batch)
    # Then the ledger holds one usage debit, of exactly their cost
    cost = sum(CallRecord.objects.values_list("cost", flat=True))
    [debit] = LedgerEntry.objects.filter(organization_id=org.pk, kind=LedgerKind.USAGE)
    assert cost > 0 and debit.amount == -cost and debit.reason == "5 calls"
    assert prepaid_balance(org.pk) == USD - cost
