"""Ingesting usage events: validate, refuse what cannot be stored (into dead
letters, never silently), skip request ids already stored, rate each call
once, insert the calls in bulk and add exactly the newly inserted billed
ones to the hourly rollups (and the attribution rollups, per tag value and
end user) in the same transaction, so a rollup row always equals the sum of
its billed call records (``CallRecord.objects.billed()``) and a redelivered
batch changes nothing.

Load-test calls marked "not billed" (``is_test``) are stored as call records
like any other (the load test reads them: its cost, the call log) but add
nothing to the rollups or the attribution rollups, and debit no balance: the
spend analytics, cap seeding, alerts, performance figures, SLA and margin,
which read the rollups, agree with the invoice. The batch is filtered once,
before summing, and only when one of its rows is a test call.

One flow for every database: what it writes goes through a store
(``usage.ingest.store``): PostgreSQL's, whose COPY streams the calls while
the batch is still being read (``pg.STORE``), or the generic one for SQLite
and any other backend (``generic.STORE``). Events are read through the usage
contract (``usage.events.parse``) into named rows
(``usage.ingest.rows.CallRow``). Once the calls are stored, the transaction
fires ``console.kernel.hooks.CALLS_INGESTED`` with per-organization totals
(``usage.totals``): what the prepaid ledger debits, without usage knowing
who listens."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

from django.db import connection
from django.utils import timezone as tz

from console.kernel import hooks
from usage.events import InvalidEvent, latest_start, parse
from usage.ingest import generic, pg
from usage.ingest.aggregate import all_grains, sum_attribution, sum_calls
from usage.ingest.directory import Directory, get_directory
from usage.ingest.rows import CALL_COLUMNS, CallRow, call_row
from usage.ingest.store import Store
from usage.models import DeadLetter
from usage.prices import PriceBook, get_price_book
from usage.rating import discount_for, rate
from usage.totals import org_totals

_claim = itemgetter("organization_id", "api_key_id", "sub_account_id", "model")
_is_test = attrgetter("is_test")
DEADLOCK_ATTEMPTS = 5
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int
    duplicates: int
    dead_lettered: int


# A refused event: its request id ("" when it has none), its organization's
# id when it names a plausible one, the reason, and the event as received.
_Refusal = tuple[str, int | None, str, object]


@dataclass(slots=True)
class _Batch:
    rows: list[CallRow]
    hours: list[int]
    dead: list[_Refusal]
    duplicates: int
    currencies: dict[int, str]


def _dead(raw: object, reason: str) -> _Refusal:
    rid = raw.get("request_id") if isinstance(raw, dict) else None
    org = raw.get("organization_id") if isinstance(raw, dict) else None
    return (
        rid[:64] if type(rid) is str else "",
        org if type(org) is int and 0 < org < 2**63 else None,
        reason,
        raw,
    )


def _key_problem(directory: Directory, key_id: int, org_id: int, sub_id: int | None) -> str | None:
    """Why this key cannot carry this event (the directory was re-read for
    every key whose cached entry disagreed with the batch, before the loop)."""
    found = directory.keys.get(key_id)
    if found is None:
        return f"unknown api_key_id {key_id}"
    if found[0] != org_id:
        return f"api_key_id {key_id} belongs to another organization"
    if found[1] != sub_id:
        return f"sub_account_id {sub_id} does not match the key's sub-account {found[1]}"
    return None


def _preflight(raw_events: list[Any], book: PriceBook, directory: Directory) -> PriceBook:
    """Every database read the batch needs, done before the loop (which on
    PostgreSQL runs while the connection is busy with the COPY)."""
    claims: set[tuple[int, int, int | None]] = set()
    models: set[str] = set()
    for r in raw_events:
        if type(r) is not dict:
            continue
        try:
            org, key, sub, model = _claim(r)
        except KeyError:
            org, key, sub, model = (
                r.get("organization_id"),
                r.get("api_key_id"),
                r.get("sub_account_id"),
                r.get("model"),
            )
        # Types first: True == 1 would otherwise stand in for a real id in a set.
        if type(org) is int and type(key) is int and (sub is None or type(sub) is int):
            claims.add((key, org, sub))
        if type(model) is str:
            models.add(model)
    directory.prefetch({c[1] for c in claims}, {c[0] for c in claims})
    keys = directory.keys
    stale = {k for k, o, sub in claims if k in keys and keys[k] != (o, sub)}
    if stale:
        directory.reload_keys(stale)
    if book.age > 1.0 and any(not book.has_model(m) for m in models):
        # A price added moments ago in another process: look once more.
        book = get_price_book(max_age=0)
    return book


def _prepare(
    raw_events: list[Any],
    book: PriceBook,
    directory: Directory,
    now: datetime,
    add: Callable[[CallRow, dict[str, Any]], None],
) -> _Batch:
    """Validate, resolve and rate, without reading the database (call
    ``_preflight`` first); ``add(row, raw)`` receives each accepted row as
    soon as it is ready (``CallSink.add``: the PostgreSQL COPY streams it)."""
    orgs = directory.orgs
    keys = directory.keys
    rows: list[CallRow] = []
    hours: list[int] = []
    dead: list[_Refusal] = []
    seen: set[str] = set()
    duplicates = 0
    lookup = book.lookup
    latest = latest_start()
    for raw in raw_events:
        try:
            e = parse(raw, latest)
        except InvalidEvent as exc:
            dead.append(_dead(raw, exc.reason))
            continue
        rid = e.request_id
        if rid in seen:
            duplicates += 1
            continue
        org_id = e.organization_id
        terms = orgs.get(org_id)
        if terms is None:
            dead.append(_dead(raw, f"unknown organization_id {org_id}"))
            continue
        key = keys.get(e.api_key_id)
        if key is None or key[0] != org_id or key[1] != e.sub_account_id:
            problem = _key_problem(directory, e.api_key_id, org_id, e.sub_account_id)
            if problem:
                dead.append(_dead(raw, problem))
                continue
        seen.add(rid)
        ts = e.started_at.timestamp()
        currency = terms.currency
        price = lookup(e.model, currency, org_id, ts)
        if price is None:
            cost, price_id = 0, None
        else:
            tokens = (e.input_tokens, e.cache_read_tokens, e.cache_write_tokens, e.output_tokens)
            cost = rate(tokens, price, discount_for(price, terms.discount_ppm))
            price_id = price.id
        row = call_row(e, currency, cost, price_id, now)
        rows.append(row)
        hours.append(int(ts // 3600) * 3600)
        add(row, raw)
    currencies = {org_id: t.currency for org_id, t in orgs.items()}
    return _Batch(rows, hours, dead, duplicates, currencies)


def _store_dead_letters(dead: list[_Refusal], now: datetime) -> None:
    """Record refused events, once: a redelivered batch adds no second copy."""
    ids = {rid for rid, *_ in dead if rid}
    existing = set()
    if ids:
        existing = set(
            DeadLetter.objects.filter(request_id__in=ids, resolved_at__isnull=True).values_list(
                "request_id", "reason"
            )
        )
    DeadLetter.objects.bulk_create(
        [
            DeadLetter(
                received_at=now,
                request_id=rid,
                organization_id=org,
                reason=reason,
                payload=_json_safe(payload),
            )
            for rid, org, reason, payload in dead
            if not rid or (rid, reason) not in existing
        ]
    )


def _json_safe(payload: object) -> object:
    if isinstance(payload, dict | list | str | int | float | bool) or payload is None:
        return payload
    return repr(payload)[:10_000]


def ingest_events(raw_events: list[dict[str, Any]]) -> IngestResult:
    """Ingest one batch of event dicts (see ``usage.events``) in one transaction."""
    if not isinstance(raw_events, list):
        raw_events = list(raw_events)
    store = pg.STORE if connection.vendor == "postgresql" else generic.STORE
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            return _ingest(raw_events, store)
        except Exception as exc:
            # Only a whole transaction of our own can be run again.
            if (
                not pg.is_deadlock(exc)
                or connection.in_atomic_block
                or attempt == DEADLOCK_ATTEMPTS
            ):
                raise
            logger.warning("usage ingest deadlocked with another worker; retrying the batch")
    raise AssertionError("unreachable")


def _ingest(raw_events: list[Any], store: Store[Any]) -> IngestResult:
    """The batch, through ``store`` (``usage.ingest.store``): the calls, then
    their sums and the ledger's hook, and the dead letters, in one transaction."""
    now = tz.now()
    directory = get_directory()
    book = _preflight(raw_events, get_price_book(), directory)
    with store.open(now) as calls:
        batch = _prepare(raw_events, book, directory, now, calls.add)
        rows, hours = batch.rows, batch.hours
        # Sum the rollups while the server finishes the insert; redo the sums
        # only when some calls turn out to be stored already.
        billed, billed_hours = _billed(rows, hours)
        ready = store.rollups(all_grains(sum_calls(billed, billed_hours)), batch.currencies)
        inserted = calls.result()
        if inserted is not None:
            rows, hours = _only(rows, hours, inserted)
            billed, billed_hours = _billed(rows, hours)
            ready = store.rollups(all_grains(sum_calls(billed, billed_hours)), batch.currencies)
        if rows:
            store.apply_rollups(ready, batch.currencies)
            store.apply_attribution(sum_attribution(billed, billed_hours), batch.currencies)
            store.touch_keys(_last_used(rows))
            _calls_ingested(rows)
        if batch.dead:
            _store_dead_letters(batch.dead, now)
    return _result(batch, len(rows))


def _calls_ingested(rows: list[CallRow]) -> None:
    """Tell the receivers of ``CALLS_INGESTED`` (the prepaid ledger: one
    debit per organization and batch), inside the ingest transaction."""
    hooks.CALLS_INGESTED.fire(totals=org_totals(rows))


def _only(
    rows: list[CallRow], hours: list[int], inserted: set[str]
) -> tuple[list[CallRow], list[int]]:
    keep = [i for i, row in enumerate(rows) if row.request_id in inserted]
    return [rows[i] for i in keep], [hours[i] for i in keep]


def _billed(rows: list[CallRow], hours: list[int]) -> tuple[list[CallRow], list[int]]:
    """The rows (and their hours) the rollups add: all but load-test calls
    marked "not billed". The common batch has none: one scan at C speed, and
    the same lists back."""
    if True not in map(_is_test, rows):
        return rows, hours
    keep = [i for i, row in enumerate(rows) if not row.is_test]
    return [rows[i] for i in keep], [hours[i] for i in keep]


def _last_used(rows: list[CallRow]) -> dict[int, datetime]:
    last: dict[int, datetime] = {}
    for row in rows:
        k, t = row.api_key_id, row.finished_at
        if k not in last or last[k] < t:
            last[k] = t
    return last


def _result(batch: _Batch, accepted: int) -> IngestResult:
    return IngestResult(
        accepted=accepted,
        duplicates=batch.duplicates + len(batch.rows) - accepted,
        dead_lettered=len(batch.dead),
    )


__all__ = ["CALL_COLUMNS", "IngestResult", "ingest_events"]
