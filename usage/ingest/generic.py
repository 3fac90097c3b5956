# ruff: noqa: S608 - SQL is built from this module's constant column names; values are bound.
"""The writer for SQLite (the embedded mode) and any other backend: multi-row
``INSERT … ON CONFLICT DO NOTHING RETURNING`` for calls, then one
read-modify-write per rollup cell. SQLite transactions here start with
``BEGIN IMMEDIATE``, so the writer holds the database's write lock from the
first statement and no other worker can interleave."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import connection, transaction

from usage.ingest.aggregate import ATTRIBUTION_SUMS, HISTS
from usage.ingest.rollup_sql import HIST_COLUMNS, KEY_COLUMNS, N_SUMS, SUM_COLUMNS, merged_hist
from usage.ingest.rows import CALL_COLUMNS, CallRow
from usage.ingest.store import AttributionCell, RollupCell

# SQLite allows 32766 parameters per statement; 31 columns x 500 rows stays well under.
CHUNK = 500
_DATETIME_COLUMNS = ("started_at", "finished_at", "ingested_at")


def _adapter(columns: tuple[str, ...]) -> Callable[[CallRow], list[Any]]:
    adapt = connection.ops.adapt_datetimefield_value
    positions = [columns.index(c) for c in _DATETIME_COLUMNS]
    tags = columns.index("tags")

    def convert(row: CallRow) -> list[Any]:
        out = list(row)
        for i in positions:
            out[i] = adapt(out[i])
        out[tags] = orjson.dumps(out[tags]).decode() if out[tags] else "{}"
        return out

    return convert


def insert_calls(rows: list[CallRow], columns: tuple[str, ...]) -> set[str] | None:
    convert = _adapter(columns)
    cols = ", ".join(columns)
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    inserted: list[str] = []
    with connection.cursor() as cur:
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start : start + CHUNK]
            params = [v for row in chunk for v in convert(row)]
            cur.execute(
                f"INSERT INTO usage_call ({cols}) VALUES {', '.join([one] * len(chunk))} "
                "ON CONFLICT DO NOTHING RETURNING request_id",
                params,
            )
            inserted.extend(r[0] for r in cur.fetchall())
    if len(inserted) == len(rows):
        return None
    return set(inserted)


def apply_rollups(cells: list[RollupCell], currencies: dict[int, str]) -> None:
    adapt = connection.ops.adapt_datetimefield_value
    where = " AND ".join(f"{c} = %s" for c in (*KEY_COLUMNS, "hour"))
    add = ", ".join(f"{c} = {c} + %s" for c in SUM_COLUMNS)
    insert_cols = (*KEY_COLUMNS, "hour", "currency", *SUM_COLUMNS, *HIST_COLUMNS)
    insert_sql = (
        f"INSERT INTO usage_rollup ({', '.join(insert_cols)}, updated_at) "
        f"VALUES ({', '.join(['%s'] * (len(insert_cols) + 1))})"
    )
    set_hists = ", ".join(f"{c} = %s" for c in HIST_COLUMNS)
    now = adapt(datetime.now(UTC))
    with connection.cursor() as cur:
        for (org, *dims, hour), acc in cells:
            key_params = [org, *dims, adapt(datetime.fromtimestamp(hour, UTC))]
            cur.execute(
                f"SELECT id, {', '.join(HIST_COLUMNS)} FROM usage_rollup WHERE {where}", key_params
            )
            found = cur.fetchone()
            sums = acc[:N_SUMS]
            if found is None:
                hists = [merged_hist(None, acc[h]) for h in HISTS]
                cur.execute(insert_sql, [*key_params, currencies[org], *sums, *hists, now])
            else:
                rid, *old = found
                hists = [merged_hist(o, acc[h]) for o, h in zip(old, HISTS, strict=True)]
                cur.execute(
                    f"UPDATE usage_rollup SET {add}, {set_hists}, updated_at = %s WHERE id = %s",
                    [*sums, *hists, now, rid],
                )


def apply_attribution(cells: list[AttributionCell], currencies: dict[int, str]) -> None:
    """Add the batch's attribution cells (``aggregate.sum_attribution``) to
    their rows, creating the missing ones."""
    if not cells:
        return
    adapt = connection.ops.adapt_datetimefield_value
    cols = ", ".join(ATTRIBUTION_SUMS)
    add = ", ".join(f"{c} = {c} + excluded.{c}" for c in ATTRIBUTION_SUMS)
    one = "(" + ", ".join(["%s"] * (7 + len(ATTRIBUTION_SUMS))) + ")"
    now = adapt(datetime.now(UTC))
    with connection.cursor() as cur:
        for start in range(0, len(cells), CHUNK):
            chunk = cells[start : start + CHUNK]
            params = []
            for (org, kind, key, hour, value), sums in chunk:
                hour_at = adapt(datetime.fromtimestamp(hour, UTC))
                params += [org, kind, key, hour_at, value, currencies[org], *sums, now]
            cur.execute(
                "INSERT INTO usage_attribution (organization_id, kind, tag_key, hour, value, "
                f"currency, {cols}, updated_at) VALUES {', '.join([one] * len(chunk))} "
                "ON CONFLICT (organization_id, kind, tag_key, hour, value) "
                f"DO UPDATE SET {add}, updated_at = excluded.updated_at",
                params,
            )


def touch_keys(last_used: dict[int, datetime]) -> None:
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cur:
        for key_id, t in sorted(last_used.items()):
            value = adapt(t)
            cur.execute(
                "UPDATE accounts_apikey SET last_used_at = %s "
                "WHERE id = %s AND (last_used_at IS NULL OR last_used_at < %s)",
                [value, key_id, value],
            )


class _Insert:
    """The generic call insert: it collects the batch's rows and writes them
    when the batch is ready, in the transaction it opens then."""

    def __init__(self, transaction_scope: ExitStack):
        self.rows: list[CallRow] = []
        self._scope = transaction_scope

    def add(self, row: CallRow, raw: dict[str, Any]) -> None:
        self.rows.append(row)

    def result(self) -> set[str] | None:
        self._scope.enter_context(transaction.atomic())
        return insert_calls(self.rows, CALL_COLUMNS) if self.rows else None


class GenericStore:
    """The store for SQLite and any other backend (``usage.ingest.store.Store``):
    the batch is prepared outside the transaction, which opens at the insert,
    so SQLite's write lock is held only while writing."""

    @contextmanager
    def open(self, now: datetime) -> Iterator[_Insert]:
        with ExitStack() as scope:
            yield _Insert(scope)

    def rollups(self, cells: list[RollupCell], currencies: dict[int, str]) -> list[RollupCell]:
        return cells

    def apply_rollups(self, ready: list[RollupCell], currencies: dict[int, str]) -> None:
        apply_rollups(ready, currencies)

    def apply_attribution(self, cells: list[AttributionCell], currencies: dict[int, str]) -> None:
        apply_attribution(cells, currencies)

    def touch_keys(self, last_used: dict[int, datetime]) -> None:
        touch_keys(last_used)


STORE = GenericStore()
