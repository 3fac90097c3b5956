# ruff: noqa: S608 - SQL is built from this module's constant column names; values are bound.
"""The PostgreSQL writer. Calls: a COPY straight into the call table,
streamed while the batch is still being validated, with a staging table and
``INSERT … SELECT … ON CONFLICT DO NOTHING RETURNING`` when the
batch holds stored ids. Rollups: one ``SELECT … FOR UPDATE`` that locks the
existing rows in key order and reads their histograms, then one upsert
that adds the sums and writes the histograms merged in Python. All on
the raw psycopg connection with server-side parameters (Django's
client-side binding would spell every array out in the SQL): key and sum
columns as array literals, histograms as binary ``bytea[]``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import orjson
import psycopg
from django.db import connection, transaction

from usage.ingest.aggregate import ATTRIBUTION_SUMS, LAT_BINS, TPS_BINS, TTFT_BINS, bucket_counts
from usage.ingest.rollup_sql import HIST_COLUMNS, KEY_COLUMNS, N_SUMS, SUM_COLUMNS
from usage.ingest.rows import CALL_COLUMNS, CallRow
from usage.ingest.store import AttributionCell, RollupCell
from usage.sketch import add_counts_to_encoded, encode_counts

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


def copy_stamp(raw: object, parsed: datetime) -> str:
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
# see ``copy_stamp``), then every other column of the call row in its order,
# but the attribution's two (caller text, escaped apart, see ``_attribution``),
# which come last.
_STAMPS = ("started_at", "finished_at", "ingested_at")
_ESCAPED = ("end_user", "tags")
COPY_COLUMNS: tuple[str, ...] = (
    *_STAMPS,
    *(c for c in CALL_COLUMNS if c not in _STAMPS and c not in _ESCAPED),
    *_ESCAPED,
)
_rest = itemgetter(*(CALL_COLUMNS.index(c) for c in COPY_COLUMNS[len(_STAMPS) : -len(_ESCAPED)]))
_null = {None: _N}.get  # _null(v, v): the COPY text of NULL, else v itself
_LINE = "\t".join(["%s"] * len(COPY_COLUMNS)) + "\n"
_dumps = orjson.dumps


def _attribution(row: CallRow) -> tuple[str, str]:
    """The COPY text of a row's end user and tags. Validation refused control
    characters in both, so a backslash (in the text, or a JSON escape) is
    the one character that needs escaping."""
    user = row.end_user
    tags = row.tags
    if not (user or tags):
        return "", "{}"
    text = _dumps(tags).decode() if tags else "{}"
    return user.replace("\\", "\\\\"), text.replace("\\", "\\\\")


def _line(row: CallRow, started: str, finished: str, ingested: str) -> str:
    """A call row's COPY text line (``COPY_COLUMNS`` order): ``%s`` of an int
    or a bool is text PostgreSQL reads, and strings need no escaping but the
    attribution's."""
    values = _rest(row)
    return _LINE % (started, finished, ingested, *map(_null, values, values), *_attribution(row))


def _line_format(ingested: str) -> str:
    """``_LINE`` with the ingestion time (the same for a whole batch) written in."""
    rest = "\t".join(["%s"] * (len(COPY_COLUMNS) - len(_STAMPS)))
    return "%s\t%s\t" + ingested.replace("%", "%%") + "\t" + rest + "\n"


class StreamingInsert:
    """The call insert, streamed to the server while the worker is still
    validating and rating the batch, so both CPUs work at once.

    The common case, a batch of new calls, is one COPY straight into the call
    table inside a savepoint. If any request id is stored already (a
    redelivery, or another worker's overlapping batch) the COPY fails as a
    whole; the savepoint is rolled back and the batch goes through a staging
    table and ``INSERT … ON CONFLICT DO NOTHING RETURNING``: the conflict is
    on the primary key, ``(request_id, started_at)`` on the month-partitioned
    table (``usage.partitions``), and a replayed event has the same start.
    Two workers copying overlapping batches can deadlock; PostgreSQL then
    aborts one and ``ingest_events`` runs that batch again."""

    FLUSH_EVERY = 200

    def __init__(self, ingested_at: datetime):
        self._cols = ", ".join(COPY_COLUMNS)
        self._ingested = ingested_at.isoformat()
        # ``_LINE`` with the batch's one ingestion time written in.
        self._format = _line_format(self._ingested)
        self.lines: list[str] = []
        self._unsent = 0
        connection.ensure_connection()
        self._cur = psycopg.Cursor(connection.connection)
        # One round trip for the transaction's BEGIN and the savepoint.
        with self._cur.connection.pipeline():
            self._cur.execute("SAVEPOINT usage_ingest_copy")
        self._copy_cm = self._cur.copy(f"COPY usage_call ({self._cols}) FROM STDIN")
        self._copy = self._copy_cm.__enter__()

    def add(self, row: CallRow, raw: dict[str, Any]) -> None:
        """Stream one call row (``raw``: the wire dict it was read from, whose
        timestamps' own text the COPY takes when it can, see ``copy_stamp``)."""
        started = copy_stamp(raw["started_at"], row.started_at)
        finished = copy_stamp(raw["finished_at"], row.finished_at)
        values = _rest(row)  # ``_line``, with the ingestion time already in the format
        self.lines.append(
            self._format % (started, finished, *map(_null, values, values), *_attribution(row))
        )
        self._unsent += 1
        if self._unsent >= self.FLUSH_EVERY:
            self._copy.write("".join(self.lines[-self._unsent :]))
            self._unsent = 0

    def abort(self, exc: BaseException) -> None:
        """End the COPY after a failure while preparing (the transaction rolls
        back); nothing to do once ``result`` has ended it."""
        if self._cur.closed:
            return
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
            "ON CONFLICT DO NOTHING RETURNING request_id"
        )
        inserted = {r[0] for r in cur.fetchall()}
        cur.execute(f"TRUNCATE {STAGE}")
        return None if len(inserted) == len(self.lines) else inserted


def is_deadlock(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.DeadlockDetected) or isinstance(
        exc.__cause__, psycopg.errors.DeadlockDetected
    )


_KEY_TYPES = ("bigint", "text", "bigint", "bigint", "text", "bigint", "text", "text", "timestamptz")


def _ints(values: Iterable[int]) -> str:
    """A bigint[] literal (joining text is far cheaper than binary array dumping)."""
    return "{" + ",".join(map(str, values)) + "}"


def _texts(values: Iterable[str]) -> str:
    """A text[] literal, every element quoted."""
    return '{"' + '","'.join([v.replace("\\", "\\\\").replace('"', '\\"') for v in values]) + '"}'


class RollupArrays:
    """A batch's cells (sorted by key) as the statements' array literals."""

    def __init__(self, cells: list[RollupCell], currencies: dict[int, str]):
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
        self.tps_counts = [bucket_counts(acc[TPS_BINS]) for _, acc in cells]


_KEYS = ", ".join((*KEY_COLUMNS, "hour"))
_KEY_CASTS = ", ".join(f"%t::{t}[]" for t in _KEY_TYPES)
# Lock the cells' existing rows in key order (the arrays' order: one index
# probe and lock per cell, one cell after the other) and read their
# histograms. Rows locked in one order by every worker cannot deadlock; rows
# that do not exist yet are created, in the same order, by the upsert below.
LOCK = (
    "SELECT r.id, v.i, r.latency_hist, r.ttft_hist, r.tps_hist "
    f"FROM unnest({_KEY_CASTS}) WITH ORDINALITY AS v(o, g, s, k, m, n, p, d, h, i) "
    "CROSS JOIN LATERAL (SELECT id, latency_hist, ttft_hist, tps_hist FROM usage_rollup "
    "WHERE organization_id = v.o AND grain = v.g AND sub_account_id = v.s "
    "AND api_key_id = v.k AND model = v.m AND node_id = v.n AND protocol = v.p "
    "AND mode = v.d AND hour = v.h FOR UPDATE) AS r"
)
_WRITE_COLUMNS = (*KEY_COLUMNS, "hour", "currency", *SUM_COLUMNS, *HIST_COLUMNS)
_WRITE_CASTS = ", ".join(
    [f"%t::{t}[]" for t in (*_KEY_TYPES, "text")]
    + ["%t::bigint[]"] * N_SUMS
    + ["%b::bytea[]"] * len(HIST_COLUMNS)
)
# Add the sums and store the merged histograms: one new row version per
# cell. Only rows locked by ``LOCK`` are updated; a row another worker
# created after ``LOCK`` ran is locked but left alone (its histogram is not
# the one merged here) and ``apply_rollups`` adds the cell to it afterwards.
UPSERT = (
    f"INSERT INTO usage_rollup AS r ({', '.join(_WRITE_COLUMNS)}, updated_at) "
    f"SELECT *, now() FROM unnest({_WRITE_CASTS}) "
    f"ON CONFLICT ({_KEYS}) DO UPDATE SET "
    + ", ".join(f"{c} = r.{c} + EXCLUDED.{c}" for c in SUM_COLUMNS)
    + ", latency_hist = EXCLUDED.latency_hist, ttft_hist = EXCLUDED.ttft_hist, "
    "tps_hist = EXCLUDED.tps_hist, "
    "updated_at = EXCLUDED.updated_at "
    "WHERE r.id = ANY(%t::bigint[]) RETURNING r.id"
)
ADD = (
    "UPDATE usage_rollup AS r SET "
    + ", ".join(f"{c} = r.{c} + %s" for c in SUM_COLUMNS)
    + ", latency_hist = %s, ttft_hist = %s, tps_hist = %s, updated_at = now() WHERE r.id = %s"
)


def apply_rollups(cells: list[RollupCell] | RollupArrays, currencies: dict[int, str]) -> None:
    """Add the batch's cells to their rows: lock the existing rows in key
    order and read their histograms, merge in Python, then write the sums
    and histograms of every cell in one upsert (creating missing rows)."""
    arrays = cells if isinstance(cells, RollupArrays) else RollupArrays(cells, currencies)
    cells = arrays.cells
    if not cells:
        return
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(LOCK, arrays.keys, binary=True, prepare=True)
        locked = cur.fetchall()
        lat_counts, ttft_counts = arrays.lat_counts, arrays.ttft_counts
        tps_counts = arrays.tps_counts
        lats: list[bytes | None] = [None] * len(cells)
        ttfts: list[bytes | None] = [None] * len(cells)
        tpss: list[bytes | None] = [None] * len(cells)
        for _, i, old_lat, old_ttft, old_tps in locked:
            i -= 1
            lats[i] = add_counts_to_encoded(old_lat, *lat_counts[i])
            ttfts[i] = add_counts_to_encoded(old_ttft, *ttft_counts[i])
            tpss[i] = add_counts_to_encoded(old_tps, *tps_counts[i])
        for i, lat in enumerate(lats):
            if lat is None:
                lats[i] = encode_counts(*lat_counts[i])
                ttfts[i] = encode_counts(*ttft_counts[i])
                tpss[i] = encode_counts(*tps_counts[i])
        ids = _ints([r[0] for r in locked])
        params = [*arrays.keys, arrays.currency, *arrays.sums, lats, ttfts, tpss, ids]
        cur.execute(UPSERT, params, binary=True, prepare=True)
        if cur.rowcount != len(cells):
            _add_to_rows_created_meanwhile(cur, arrays, {r[0] for r in cur.fetchall()})


def _add_to_rows_created_meanwhile(
    cur: psycopg.Cursor[Any], arrays: RollupArrays, written: set[int]
) -> None:
    """The cells whose row another worker created between ``LOCK`` and the
    upsert: the upsert locked those rows without changing them; add the
    cells to them now (rare: two workers opening the same new row)."""
    cur.execute(LOCK, arrays.keys, binary=True)
    for rid, i, old_lat, old_ttft, old_tps in cur.fetchall():
        if rid in written:
            continue
        i -= 1
        cur.execute(
            ADD,
            [
                *arrays.cells[i][1][:N_SUMS],
                add_counts_to_encoded(old_lat, *arrays.lat_counts[i]),
                add_counts_to_encoded(old_ttft, *arrays.ttft_counts[i]),
                add_counts_to_encoded(old_tps, *arrays.tps_counts[i]),
                rid,
            ],
        )


_ATTRIBUTION_COLUMNS = ("organization_id", "kind", "tag_key", "hour", "value", "currency")
# One statement for the batch's attribution cells, sorted by key (the unique
# index's order), so workers adding to the same cells lock them in one order.
ATTRIBUTE = (
    f"INSERT INTO usage_attribution AS r ({', '.join(_ATTRIBUTION_COLUMNS)}, "
    f"{', '.join(ATTRIBUTION_SUMS)}, updated_at) "
    "SELECT *, now() FROM unnest(%t::bigint[], %t::text[], %t::text[], %t::timestamptz[], "
    f"%b::text[], %t::text[], {', '.join(['%t::bigint[]'] * len(ATTRIBUTION_SUMS))}) "
    "ON CONFLICT (organization_id, kind, tag_key, hour, value) DO UPDATE SET "
    + ", ".join(f"{c} = r.{c} + EXCLUDED.{c}" for c in ATTRIBUTION_SUMS)
    + ", updated_at = EXCLUDED.updated_at"
)


def apply_attribution(cells: list[AttributionCell], currencies: dict[int, str]) -> None:
    """Add the batch's attribution cells (``aggregate.sum_attribution``) to
    their rows in one upsert."""
    if not cells:
        return
    org, kind, key, hour, value = zip(*(c for c, _ in cells), strict=True)
    stamps = {h: datetime.fromtimestamp(h, UTC).isoformat() for h in set(hour)}
    params = [
        _ints(org),
        _texts(kind),
        _texts(key),
        _texts([stamps[h] for h in hour]),
        list(value),  # caller text: bound as an array, not spelled in a literal
        _texts([currencies[o] for o in org]),
        *(_ints(col) for col in zip(*(sums for _, sums in cells), strict=True)),
    ]
    with _raw_cursor() as cur:
        cur.execute(ATTRIBUTE, params, prepare=True)


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


class PostgresStore:
    """The PostgreSQL store (``usage.ingest.store.Store``): the transaction
    opens with the call insert, whose COPY streams while the batch is
    prepared; the rollups are readied as array literals meanwhile."""

    @contextmanager
    def open(self, now: datetime) -> Iterator[StreamingInsert]:
        with transaction.atomic():
            stream = StreamingInsert(now)
            try:
                yield stream
            except BaseException as exc:
                stream.abort(exc)
                raise

    def rollups(self, cells: list[RollupCell], currencies: dict[int, str]) -> RollupArrays:
        return RollupArrays(cells, currencies)

    def apply_rollups(self, ready: RollupArrays, currencies: dict[int, str]) -> None:
        apply_rollups(ready, currencies)

    def apply_attribution(self, cells: list[AttributionCell], currencies: dict[int, str]) -> None:
        apply_attribution(cells, currencies)

    def touch_keys(self, last_used: dict[int, datetime]) -> None:
        touch_keys(last_used)


STORE = PostgresStore()
