# ruff: noqa: S608 - SQL is built from table and partition names made here; values are bound.
"""Monthly range partitions of the call table on PostgreSQL.

``usage_call`` is partitioned by ``started_at`` (the column every log,
analytics and export query bounds), one partition per UTC month named
``usage_call_pYYYYMM``, plus ``usage_call_default`` for rows outside every
month partition, so ingest never fails for want of one. The primary key is
``(request_id, started_at)``: a partitioned table's unique keys must hold the
partition key, and a replayed event carries the same ``started_at``, so
``ON CONFLICT DO NOTHING`` still drops it.

``ensure_partitions`` (daily, by beat) creates the current month and the next
``USAGE_PARTITION_MONTHS_AHEAD``; rows already caught by the default partition
for a month it creates are moved into the new partition. Retention
(``usage.retention``) drops partitions wholly past the cutoff. SQLite keeps
one plain table, and everything here is a no-op there."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone as tz

logger = logging.getLogger(__name__)

TABLE = "usage_call"
KEY = "started_at"
# Adding or dropping a partition locks the whole table; wait no longer than
# this behind a long reader (ingest would queue behind the waiting DDL).
LOCK_TIMEOUT = "10s"


@dataclass(frozen=True)
class Partition:
    name: str
    start: datetime | None  # None: the default partition
    end: datetime | None
    rows: int | None = None

    @property
    def is_default(self) -> bool:
        return self.start is None


def month_start(when: datetime) -> datetime:
    when = when.astimezone(UTC)
    return datetime(when.year, when.month, 1, tzinfo=UTC)


def add_months(month: datetime, n: int) -> datetime:
    index = month.year * 12 + month.month - 1 + n
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def partition_name(month: datetime, table: str = TABLE) -> str:
    return f"{table}_p{month.year:04d}{month.month:02d}"


def default_name(table: str = TABLE) -> str:
    return f"{table}_default"


def is_partitioned(table: str = TABLE) -> bool:
    """True on PostgreSQL once the call table is partitioned (the migration ran)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cur:
        cur.execute(
            "SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)",
            [table],
        )
        found = cur.fetchone()
    return found is not None and found[0] == "p"


_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


def _parse_bound(text: str) -> tuple[datetime | None, datetime | None]:
    if text == "DEFAULT":
        return None, None
    found = _BOUND.search(text)
    if found is None:
        raise ValueError(f"unexpected partition bound: {text}")
    start, end = (datetime.fromisoformat(v).astimezone(UTC) for v in found.groups())
    return start, end


def partitions(table: str = TABLE, *, count_rows: bool = False) -> list[Partition]:
    """The table's partitions, by start (the default partition last)."""
    if not is_partitioned(table):
        return []
    with connection.cursor() as cur:
        # Bounds come in the session's time zone, with its offset.
        cur.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [table],
        )
        found = []
        for name, bound in cur.fetchall():
            start, end = _parse_bound(bound)
            rows = None
            if count_rows:
                cur.execute(f'SELECT count(*) FROM "{name}"')
                rows = cur.fetchone()[0]
            found.append(Partition(name, start, end, rows))
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(found, key=lambda p: p.start or far)


def _literal(when: datetime) -> str:
    return when.strftime("'%Y-%m-%d %H:%M:%S+00'")


def _create_month(cur: CursorWrapper, month: datetime, table: str) -> None:
    """One month's partition. Rows the default partition caught for that
    month (PostgreSQL refuses to add the partition while they are there)
    are moved into it in the same transaction."""
    name, end = partition_name(month, table), add_months(month, 1)
    bounds = f"FROM ({_literal(month)}) TO ({_literal(end)})"
    default = default_name(table)
    caught = False
    if _exists(cur, default):
        cur.execute(
            f'SELECT EXISTS (SELECT 1 FROM "{default}" WHERE {KEY} >= %s AND {KEY} < %s)',
            [month, end],
        )
        caught = cur.fetchone()[0]
    if not caught:
        cur.execute(f'CREATE TABLE "{name}" PARTITION OF "{table}" FOR VALUES {bounds}')
        return
    cur.execute(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS)')
    cur.execute(
        f'WITH moved AS (DELETE FROM "{default}" WHERE {KEY} >= %s AND {KEY} < %s RETURNING *) '
        f'INSERT INTO "{name}" SELECT * FROM moved',
        [month, end],
    )
    cur.execute(f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" FOR VALUES {bounds}')


def _exists(cur: CursorWrapper, name: str) -> bool:
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    exists: bool = cur.fetchone()[0]
    return exists


def ensure_partitions(
    *,
    months_ahead: int | None = None,
    now: datetime | None = None,
    first: datetime | None = None,
    table: str = TABLE,
) -> list[str]:
    """Create the month partitions from ``first`` (default: the current month)
    to ``months_ahead`` months after the current one, and the default
    partition; the names created (none when all exist). Idempotent."""
    if not is_partitioned(table):
        return []
    ahead = settings.USAGE_PARTITION_MONTHS_AHEAD if months_ahead is None else months_ahead
    current = month_start(now or tz.now())
    month = month_start(first) if first is not None else current
    last = add_months(current, ahead)
    created = []
    with transaction.atomic(), connection.cursor() as cur:
        # One maintainer at a time (beat and the command may meet).
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"partitions:{table}"])
        cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        existing = {p.name for p in partitions(table)}
        if default_name(table) not in existing:
            cur.execute(f'CREATE TABLE "{default_name(table)}" PARTITION OF "{table}" DEFAULT')
            created.append(default_name(table))
        while month <= last:
            if partition_name(month, table) not in existing:
                _create_month(cur, month, table)
                created.append(partition_name(month, table))
            month = add_months(month, 1)
    return created


def drop_partitions_before(cutoff: datetime, table: str = TABLE) -> int:
    """Drop the month partitions that end at or before ``cutoff`` (every row
    in them is past it); the number of rows they held. Each drop is its own
    short transaction that waits at most ``LOCK_TIMEOUT`` for the table's lock
    (a long export holds it): one that cannot have it is left for the next
    run, and the batched delete of ``usage.retention`` takes its rows."""
    if not is_partitioned(table):
        return 0
    dropped = 0
    for part in partitions(table):
        if part.end is None or part.end > cutoff:
            continue
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                cur.execute(f'SELECT count(*) FROM "{part.name}"')
                rows = cur.fetchone()[0]
                cur.execute(f'DROP TABLE "{part.name}"')
        except OperationalError as exc:
            logger.warning("call partition %s not dropped: %s", part.name, exc)
            break
        dropped += rows
        logger.info("call partition %s dropped (%s rows)", part.name, rows)
    return dropped


def drop_empty_partitions_after(month: datetime, table: str = TABLE) -> list[str]:
    """Drop the month partitions that start after ``month`` and hold no row
    (months made ahead that are not wanted now, ``USAGE_PARTITION_MONTHS_AHEAD``
    lowered); the names dropped. A partition with rows is kept."""
    if not is_partitioned(table):
        return []
    dropped = []
    after = month_start(month)
    for part in partitions(table):
        if part.start is None or part.start <= after:
            continue
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cur.execute(f'SELECT EXISTS (SELECT 1 FROM "{part.name}")')
            if cur.fetchone()[0]:
                continue
            cur.execute(f'DROP TABLE "{part.name}"')
        dropped.append(part.name)
    return dropped


def rows_by_partition(organization_ids: Iterable[int], table: str = TABLE) -> dict[str, int]:
    """How many of these organizations' call records each partition holds
    (partitions holding none are left out)."""
    if not is_partitioned(table):
        return {}
    with connection.cursor() as cur:
        cur.execute(
            f'SELECT tableoid::regclass::text, count(*) FROM "{table}" '
            "WHERE organization_id = ANY(%s) GROUP BY 1",
            [list(organization_ids)],
        )
        return {name.strip('"'): n for name, n in cur.fetchall()}


def default_rows(table: str = TABLE) -> int:
    """Rows in the default partition: calls whose month has no partition
    (a clock far off, or history older than the conversion)."""
    if not is_partitioned(table):
        return 0
    with connection.cursor() as cur:
        cur.execute(f'SELECT count(*) FROM "{default_name(table)}"')
        rows: int = cur.fetchone()[0]
        return rows


def maintain() -> list[str]:
    """The daily task: partitions ahead, and a warning while the default
    partition holds rows (their months have no partition; ``ensure`` moves
    them when it creates one, ``call_partitions ensure --from`` on demand)."""
    created = ensure_partitions()
    if created:
        logger.info("call partitions created: %s", ", ".join(created))
    stray = default_rows()
    if stray:
        logger.warning("%s call records are in %s", stray, default_name())
    return created


# --- conversion (the migration) ------------------------------------------------


def _index_defs(cur: CursorWrapper, table: str) -> list[str]:
    """``CREATE INDEX`` statements of the table's indexes other than its
    primary key, pointed at ``table`` by name (so they survive a rename)."""
    cur.execute(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "WHERE i.indrelid = to_regclass(%s) AND NOT i.indisprimary ORDER BY i.indexrelid",
        [table],
    )
    return [
        re.sub(r" ON (ONLY )?\S+ USING ", f' ON "{table}" USING ', r[0], count=1)
        for r in cur.fetchall()
    ]


def _primary_key_name(cur: CursorWrapper, table: str) -> str:
    cur.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
        [table],
    )
    found = cur.fetchone()
    return found[0] if found else f"{table}_pkey"


def _swap(cur: CursorWrapper, table: str, create_new: list[str], key: str) -> None:
    """Replace ``table`` by a new one made by ``create_new`` (which names it
    ``<table>_new``): copy the rows, drop the old, rename, then the primary
    key ``key`` and the old indexes under their own names."""
    indexes = _index_defs(cur, table)
    pk = _primary_key_name(cur, table)
    new = f"{table}_new"
    for statement in create_new:
        cur.execute(statement)
    cur.execute(f'INSERT INTO "{new}" SELECT * FROM "{table}"')
    cur.execute(f'DROP TABLE "{table}" CASCADE')
    cur.execute(f'ALTER TABLE "{new}" RENAME TO "{table}"')
    cur.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{pk}" PRIMARY KEY ({key})')
    for statement in indexes:
        cur.execute(statement)


def to_partitioned(
    cur: CursorWrapper,
    table: str = TABLE,
    *,
    months_ahead: int = 3,
    now: datetime | None = None,
) -> None:
    """Convert the plain call table into a partitioned one, in the caller's
    transaction: one partition for every month that holds rows, the current
    month and ``months_ahead`` more, and the default partition. Columns are
    copied with ``LIKE``, so the columns are whatever the table has now."""
    cur.execute(f"SELECT DISTINCT date_trunc('month', {KEY} AT TIME ZONE 'UTC') FROM \"{table}\"")
    months = {r[0].replace(tzinfo=UTC) for r in cur.fetchall()}
    current = month_start(now or tz.now())
    months.update(add_months(current, n) for n in range(months_ahead + 1))
    new = f"{table}_new"
    parts = [
        f'CREATE TABLE "{partition_name(m, table)}" PARTITION OF "{new}" '
        f"FOR VALUES FROM ({_literal(m)}) TO ({_literal(add_months(m, 1))})"
        for m in sorted(months)
    ]
    parts.append(f'CREATE TABLE "{default_name(table)}" PARTITION OF "{new}" DEFAULT')
    parent = (
        f'CREATE TABLE "{new}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
        f"INCLUDING COMMENTS) PARTITION BY RANGE ({KEY})"
    )
    _swap(cur, table, [parent, *parts], f"request_id, {KEY}")


def to_plain(cur: CursorWrapper, table: str = TABLE) -> None:
    """The reverse: one plain table keyed on ``request_id`` alone."""
    create = (
        f'CREATE TABLE "{table}_new" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
        "INCLUDING COMMENTS)"
    )
    _swap(cur, table, [create], "request_id")
