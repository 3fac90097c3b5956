# ruff: noqa: S608 - SQL is built from this module's constant column names; values are bound.
"""The PostgreSQL writer. Calls: a COPY straight into the call table,
streamed while the batch is still being validated, with a staging table and
``INSERT … SELECT … ON CONFLICT (request_id) DO NOTHING RETURNING`` when the
batch holds stored ids. Rollups: one upsert that adds the sums in key order
(creating missing rows) and returns the stored histograms, then one
``UPDATE`` by id that writes the histograms merged in Python. All on
the raw psycopg connection with server-side parameters (Django's
client-side binding would spell every array out in the SQL): key and sum
columns as array literals, histograms as binary ``bytea[]``."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from operator import itemgetter

import psycopg
from django.db import connection

from usage.ingest.aggregate import LAT_BINS, TTFT_BINS, bucket_counts
from usage.ingest.rollup_sql import KEY_COLUMNS, N_SUMS, SUM_COLUMNS
from usage.ingest.rows import CALL_COLUMNS, CallRow
from usage.sketch import add_counts_to_encoded

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
    if type(raw) is str:
        # ``isoformat()`` of an aware datetime, the gateway's spelling, checked
        # by its separators alone: ``raw`` already parsed as ISO 8601 with
        # these separators, so the fields between them are ASCII digits.
        n = len(raw)
        if (
            (n == 32 and raw[4:20:3] == "--T::." and raw[26:30:3] in _OFFSET_SEPS)
            or (n == 25 and raw[4:20:3] == "--T::+" and raw[22] == ":")
        ) and raw.isascii():
            return raw
        if _PG_ISO.match(raw):
            return raw
    return parsed.isoformat()


_OFFSET_SEPS = frozenset({"+:", "-:"})


# The COPY's columns: the three timestamps first (their text is made apart,
# see ``copy_stamp``), then every other column of the call row in its order.
_STAMPS = ("started_at", "finished_at", "ingested_at")
COPY_COLUMNS: tuple[str, ...] = (*_STAMPS, *(c for c in CALL_COLUMNS if c not in _STAMPS))
_rest = itemgetter(*(CALL_COLUMNS.index(c) for c in COPY_COLUMNS[len(_STAMPS) :]))
_null = {None: _N}.get  # _null(v, v): the COPY text of NULL, else v itself
_LINE = "\t".join(["%s"] * len(COPY_COLUMNS)) + "\n"


def _line(row: CallRow, started: str, finished: str, ingested: str) -> str:
    """A call row's COPY text line (``COPY_COLUMNS`` order): ``%s`` of an int
    or a bool is text PostgreSQL reads, and strings need no escaping."""
    values = _rest(row)
    return _LINE % (started, finished, ingested, *map(_null, values, values))


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

    def __init__(self, ingested_at: datetime):
        self._cols = ", ".join(COPY_COLUMNS)
        self._ingested = ingested_at.isoformat()
        self.lines: list[str] = []
        self._unsent = 0
        connection.ensure_connection()
        self._cur = psycopg.Cursor(connection.connection)
        # One round trip for the transaction's BEGIN and the savepoint.
        with self._cur.connection.pipeline():
            self._cur.execute("SAVEPOINT usage_ingest_copy")
        self._copy_cm = self._cur.copy(f"COPY usage_call ({self._cols}) FROM STDIN")
        self._copy = self._copy_cm.__enter__()

    def add(self, row: CallRow, started: str, finished: str) -> None:
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
            # The savepoint is left open (the commit ends it): releasing it
            # would cost a round trip and change nothing.
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


_KEY_TYPES = ("bigint", "text", "bigint", "bigint", "text", "bigint", "text", "text", "timestamptz")


def _ints(values) -> str:
    """A bigint[] literal (joining text is far cheaper than binary array dumping)."""
    return "{" + ",".join(map(str, values)) + "}"


def _texts(values) -> str:
    """A text[] literal, every element quoted."""
    return '{"' + '","'.join([v.replace("\\", "\\\\").replace('"', '\\"') for v in values]) + '"}'


class RollupArrays:
    """A batch's cells (sorted by key) as the statements' array literals."""

    def __init__(self, cells: list[tuple[tuple, list]], currencies: dict[int, str]):
        self.cells = cells
        if not cells:
            return
        org, grain, sub, key, model, node, protocol, mode, hour = zip(
            *(c for c, _ in cells), strict=True
        )
        stamps = {h: datetime.fromtimestamp(h, UTC).isoformat() for h in set(hour)}
        self.keys = [
            _ints(org),
            _texts(grain),
            _ints(sub),
            _ints(key),
            _texts(model),
            _ints(node),
            _texts(protocol),
            _texts(mode),
            _texts([stamps[h] for h in hour]),
        ]
        self.currency = _texts([currencies[o] for o in org])
        self.sums = [_ints(col) for col in zip(*(acc[:N_SUMS] for _, acc in cells), strict=True)]
        # Bucket counts now, while the server is still busy with the COPY.
        self.lat_counts = [bucket_counts(acc[LAT_BINS]) for _, acc in cells]
        self.ttft_counts = [bucket_counts(acc[TTFT_BINS]) for _, acc in cells]


_KEYS = ", ".join((*KEY_COLUMNS, "hour"))
_WRITE_COLUMNS = (*KEY_COLUMNS, "hour", "currency", *SUM_COLUMNS)
_WRITE_CASTS = ", ".join([f"%t::{t}[]" for t in (*_KEY_TYPES, "text")] + ["%t::bigint[]"] * N_SUMS)
# Add the sums, creating the rows that do not exist yet (with empty
# histograms), and read each row's histograms as they were: the update
# leaves them alone, so RETURNING shows the stored ones (a new row's are
# empty). The conflict arbiter is the cell's unique index: one probe per
# cell, whatever the statistics say, and a row another worker creates
# meanwhile is waited for and added to, never missed. Rows are inserted or
# locked in the arrays' order (sorted by key, the same in every worker), so
# workers touching the same cells cannot deadlock.
UPSERT = (
    f"INSERT INTO usage_rollup AS r ({', '.join(_WRITE_COLUMNS)}, latency_hist, ttft_hist, "
    f"updated_at) SELECT *, ''::bytea, ''::bytea, now() FROM unnest({_WRITE_CASTS}) "
    f"ON CONFLICT ({_KEYS}) DO UPDATE SET "
    + ", ".join(f"{c} = r.{c} + EXCLUDED.{c}" for c in SUM_COLUMNS)
    + f", updated_at = EXCLUDED.updated_at RETURNING r.id, {_KEYS}, r.latency_hist, r.ttft_hist"
)
# Then the merged histograms, by id, into the rows the upsert has locked.
HISTOGRAMS = (
    "UPDATE usage_rollup AS r SET latency_hist = v.l, ttft_hist = v.t "
    "FROM unnest(%b::bigint[], %b::bytea[], %b::bytea[]) AS v(id, l, t) WHERE r.id = v.id"
)


def apply_rollups(cells: list[tuple[tuple, list]] | RollupArrays, currencies: dict[int, str]):
    """Add the batch's cells to their rows: one upsert adds the sums (creating
    missing rows) and returns the stored histograms; they are merged in
    Python and written back by id in a second statement."""
    arrays = cells if isinstance(cells, RollupArrays) else RollupArrays(cells, currencies)
    cells = arrays.cells
    if not cells:
        return
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        params = [*arrays.keys, arrays.currency, *arrays.sums]
        cur.execute(UPSERT, params, binary=True, prepare=True)
        stored = cur.fetchall()
        if len(stored) != len(cells):
            raise AssertionError(f"rollup upsert wrote {len(stored)} of {len(cells)} cells")
        position = {c: i for i, (c, _) in enumerate(cells)}
        lat_counts, ttft_counts = arrays.lat_counts, arrays.ttft_counts
        ids: list[int] = []
        lats: list[bytes] = []
        ttfts: list[bytes] = []
        for rid, org, grain, sub, key, model, node, protocol, mode, hour, lat, ttft in stored:
            i = position[org, grain, sub, key, model, node, protocol, mode, int(hour.timestamp())]
            ids.append(rid)
            lats.append(add_counts_to_encoded(lat, *lat_counts[i]))
            ttfts.append(add_counts_to_encoded(ttft, *ttft_counts[i]))
        cur.execute(HISTOGRAMS, [ids, lats, ttfts], binary=True, prepare=True)


# The keys' rows are locked in id order (the array's order, one key after
# the other), so two workers touching the same keys cannot deadlock.
TOUCH = (
    "WITH locked AS (SELECT l.id, v.t "
    "FROM unnest(%b::bigint[], %b::timestamptz[]) AS v(id, t) "
    "CROSS JOIN LATERAL (SELECT id FROM accounts_apikey WHERE id = v.id "
    "AND (last_used_at IS NULL OR last_used_at < v.t) FOR UPDATE) AS l) "
    "UPDATE accounts_apikey AS k SET last_used_at = locked.t FROM locked "
    "WHERE k.id = locked.id AND (k.last_used_at IS NULL OR k.last_used_at < locked.t)"
)


def touch_keys(last_used: dict[int, datetime]) -> None:
    """Move ``ApiKey.last_used_at`` forward, in one statement."""
    if not last_used:
        return
    with _raw_cursor() as cur:
        ordered = sorted(last_used.items())
        cur.execute(TOUCH, [[k for k, _ in ordered], [t for _, t in ordered]], prepare=True)
