# ruff: noqa: S608 - SQL is built from this module's constant column names; values are bound.
"""The PostgreSQL writer. Calls: a COPY straight into the call table,
streamed while the batch is still being validated, with a staging table and
``INSERT … SELECT … ON CONFLICT (request_id) DO NOTHING RETURNING`` when the
batch holds stored ids. Rollups: one upsert that adds the sums under row
locks taken in key order, then one update of the merged histograms. All on
the raw psycopg connection with server-side binary parameters (Django's
client-side binding would spell out every array as SQL text)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import psycopg
from django.db import connection

from usage.ingest.aggregate import LAT_BINS, TTFT_BINS
from usage.ingest.rollup_sql import KEY_COLUMNS, N_SUMS, SUM_COLUMNS, merged_hist

STAGE = "usage_call_stage"


def _raw_cursor() -> psycopg.Cursor:
    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


# One COPY text line per call. Every string in a row is an enum, a validated
# IP, a currency code, or an id/model/error text that validation guarantees
# has no control characters or backslashes, so none needs COPY escaping.
_N = "\\N"


# The exact ISO forms PostgreSQL reads; anything else fromisoformat accepted
# (week dates, basic format) is re-spelled by isoformat().
_PG_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d{1,6})?([+-]\d\d:\d\d|Z)\Z")


def copy_stamp(raw, parsed: datetime) -> str:
    """The COPY text of a timestamp: the event's own string when PostgreSQL
    reads it as is (formatting a datetime costs more than the rest of the row)."""
    if type(raw) is str and _PG_ISO.match(raw):
        return raw
    return parsed.isoformat()


def _line(r: tuple, s: str, f: str, ingested: str) -> str:
    n = _N
    return (
        f"{r[0]}\t{s}\t{f}\t{r[3]}\t{n if r[4] is None else r[4]}\t{r[5]}\t{r[6]}\t"
        f"{n if r[7] is None else r[7]}\t{r[8]}\t{r[9]}\t{r[10]}\t{r[11]}\t{r[12]}\t"
        f"{r[13]}\t{r[14]}\t{r[15]}\t{r[16]}\t{r[17]}\t{n if r[18] is None else r[18]}\t"
        f"{r[19]}\t{n if r[20] is None else r[20]}\t{n if r[21] is None else r[21]}\t"
        f"{n if r[22] is None else r[22]}\t{n if r[23] is None else r[23]}\t{r[24]}\t"
        f"{r[25]}\t{r[26]}\t{r[27]}\t{r[28]}\t{n if r[29] is None else r[29]}\t{ingested}\n"
    )


class StreamingInsert:
    """The call insert, streamed to the server while the worker is still
    validating and rating the batch, so both CPUs work at once.

    The common case, a batch of new calls, is one COPY straight into the call
    table inside a savepoint. If any request id is stored already (a
    redelivery, or another worker's overlapping batch) the COPY fails as a
    whole; the savepoint is rolled back and the batch goes through a staging
    table and ``INSERT … ON CONFLICT (request_id) DO NOTHING RETURNING``.
    Two workers copying overlapping batches can deadlock; PostgreSQL then
    aborts one and ``ingest_events`` runs that batch again."""

    FLUSH_EVERY = 200

    def __init__(self, columns: tuple[str, ...], ingested_at: datetime):
        self._cols = ", ".join(columns)
        self._ingested = ingested_at.isoformat()
        self.lines: list[str] = []
        self._unsent = 0
        connection.ensure_connection()
        self._cur = psycopg.Cursor(connection.connection)
        self._cur.execute("SAVEPOINT usage_ingest_copy")
        self._copy_cm = self._cur.copy(f"COPY usage_call ({self._cols}) FROM STDIN")
        self._copy = self._copy_cm.__enter__()

    def add(self, row: tuple, started: str, finished: str) -> None:
        self.lines.append(_line(row, started, finished, self._ingested))
        self._unsent += 1
        if self._unsent >= self.FLUSH_EVERY:
            self._copy.write("".join(self.lines[-self._unsent :]))
            self._unsent = 0

    def abort(self, exc: BaseException) -> None:
        """End the COPY after a failure while preparing (the transaction rolls back)."""
        try:
            self._copy_cm.__exit__(type(exc), exc, exc.__traceback__)
        finally:
            self._cur.close()

    def result(self) -> set[str] | None:
        """Finish the insert; the request ids inserted, or ``None`` when all were."""
        cur = self._cur
        try:
            if self._unsent:
                self._copy.write("".join(self.lines[-self._unsent :]))
            try:
                self._copy_cm.__exit__(None, None, None)
            except psycopg.errors.UniqueViolation:
                cur.execute("ROLLBACK TO SAVEPOINT usage_ingest_copy")
                return self._through_staging()
            cur.execute("RELEASE SAVEPOINT usage_ingest_copy")
            return None
        finally:
            cur.close()

    def _through_staging(self) -> set[str] | None:
        cur, cols = self._cur, self._cols
        # Cheap when it exists; IF NOT EXISTS keeps it right when the
        # transaction that created it was rolled back.
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {STAGE} "
            "(LIKE usage_call INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        with cur.copy(f"COPY {STAGE} ({cols}) FROM STDIN") as copy:
            copy.write("".join(self.lines))
        # Sorted, so workers inserting overlapping batches lock ids in one order.
        cur.execute(
            f"INSERT INTO usage_call ({cols}) SELECT {cols} FROM {STAGE} ORDER BY request_id "
            "ON CONFLICT (request_id) DO NOTHING RETURNING request_id"
        )
        inserted = {r[0] for r in cur.fetchall()}
        cur.execute(f"TRUNCATE {STAGE}")
        return None if len(inserted) == len(self.lines) else inserted


def is_deadlock(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.DeadlockDetected) or isinstance(
        exc.__cause__, psycopg.errors.DeadlockDetected
    )


_ARRAY_TYPES = ("bigint", "text", "bigint", "bigint", "text", "bigint", "timestamptz", "text")


class RollupArrays:
    """A batch's cells as the upsert's column arrays."""

    def __init__(self, cells: list[tuple[tuple, list]], currencies: dict[int, str]):
        self.cells = cells
        hours: dict[int, datetime] = {}
        keys: list[list] = [[] for _ in range(8)]
        for org, grain, sub, key, model, node, hour in (c for c, _ in cells):
            h = hours.get(hour)
            if h is None:
                h = hours[hour] = datetime.fromtimestamp(hour, UTC)
            for i, v in enumerate((org, grain, sub, key, model, node, h, currencies[org])):
                keys[i].append(v)
        sums = [list(col) for col in zip(*(acc[:N_SUMS] for _, acc in cells), strict=True)]
        self.params = [*keys, *sums]


_KEY_AND_CURRENCY = (*KEY_COLUMNS, "hour", "currency")
_ALL = (*_KEY_AND_CURRENCY, *SUM_COLUMNS)
_CASTS = [f"%b::{t}[]" for t in _ARRAY_TYPES] + ["%b::bigint[]"] * N_SUMS
UPSERT = (
    f"INSERT INTO usage_rollup AS r ({', '.join(_ALL)}, latency_hist, ttft_hist, updated_at) "
    f"SELECT *, '', '', now() FROM unnest({', '.join(_CASTS)}) "
    f"ON CONFLICT ({', '.join(KEY_COLUMNS)}, hour) DO UPDATE SET "
    + ", ".join(f"{c} = r.{c} + EXCLUDED.{c}" for c in SUM_COLUMNS)
    + ", updated_at = EXCLUDED.updated_at "
    "RETURNING r.id, r.organization_id, r.grain, "
    "r.sub_account_id, r.api_key_id, r.model, r.node_id, r.hour, r.latency_hist, r.ttft_hist"
)


def apply_rollups(cells: list[tuple[tuple, list]] | RollupArrays, currencies: dict[int, str]):
    """Add the batch's cells to their rows: one upsert adds the sums under
    the row locks it takes (in key order, creating missing rows), then the
    histograms are merged in Python and written back by id."""
    arrays = cells if isinstance(cells, RollupArrays) else RollupArrays(cells, currencies)
    if not arrays.cells:
        return
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(UPSERT, arrays.params, binary=True)
        returned = cur.fetchall()
        by_key = dict(arrays.cells)
        ids: list[int] = []
        lats: list[bytes] = []
        ttfts: list[bytes] = []
        for rid, org, grain, sub, key, model, node, hour, old_lat, old_ttft in returned:
            acc = by_key[(org, grain, sub, key, model, node, int(hour.timestamp()))]
            ids.append(rid)
            lats.append(merged_hist(old_lat, acc[LAT_BINS]))
            ttfts.append(merged_hist(old_ttft, acc[TTFT_BINS]))
        cur.execute(
            "UPDATE usage_rollup AS r SET latency_hist = v.l, ttft_hist = v.t "
            "FROM unnest(%b::bigint[], %b::bytea[], %b::bytea[]) AS v(id, l, t) "
            "WHERE r.id = v.id",
            [ids, lats, ttfts],
        )


def touch_keys(last_used: dict[int, datetime]) -> None:
    """Move ``ApiKey.last_used_at`` forward, one row per key, in id order."""
    with _raw_cursor() as cur:
        cur.executemany(
            "UPDATE accounts_apikey SET last_used_at = %s "
            "WHERE id = %s AND (last_used_at IS NULL OR last_used_at < %s)",
            [(t, k, t) for k, t in sorted(last_used.items())],
        )
