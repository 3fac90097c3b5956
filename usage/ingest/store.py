"""What ingest asks of the database it writes to: one interface, two back-ends.

``usage.ingest`` runs one flow for every database; the store behind it
(``pg.STORE`` on PostgreSQL, ``generic.STORE`` on SQLite and any other) says
how each step is written. The flow, in order:

1. ``store.open(now)`` opens the batch's call insert, a ``CallSink``, and
   the transaction where the store needs it: PostgreSQL at once (its COPY
   streams while the batch is still being validated), the generic store at
   ``CallSink.result`` (SQLite's ``BEGIN IMMEDIATE`` takes the database's
   write lock, held no longer than the writing needs). The transaction ends
   with the ``with`` block: the rollups, the ledger hook and the dead letters
   are written inside it.
2. ``CallSink.add(row, raw)`` receives each accepted call row as soon as it
   is rated, with the wire dict it came from; ``CallSink.result()`` finishes
   the insert and says which request ids were new (``None``: all of them).
3. ``store.rollups(cells, currencies)`` readies the batch's rollup cells for
   writing (PostgreSQL: its array literals, while the server finishes the
   COPY), ``store.apply_rollups`` writes them, ``store.apply_attribution`` the
   attribution cells, ``store.touch_keys`` each key's last use.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, TypeVar

from usage.ingest.aggregate import AttributionCell, RollupCell
from usage.ingest.rows import CallRow

Ready = TypeVar("Ready")


class CallSink(Protocol):
    """The batch's call insert, open while the batch is prepared."""

    def add(self, row: CallRow, raw: dict[str, Any]) -> None:
        """Take one accepted call row (``raw``: the wire dict it was read from)."""

    def result(self) -> set[str] | None:
        """Finish the insert: the request ids inserted, ``None`` when all were."""


class Store(Protocol[Ready]):
    """How one database stores a batch (see the module docstring)."""

    def open(self, now: datetime) -> AbstractContextManager[CallSink]:
        """The call insert of a batch ingested at ``now``, in its transaction."""

    def rollups(self, cells: list[RollupCell], currencies: dict[int, str]) -> Ready:
        """The rollup cells, ready to write."""

    def apply_rollups(self, ready: Ready, currencies: dict[int, str]) -> None:
        """Add the cells to their rollup rows, creating the missing ones."""

    def apply_attribution(self, cells: list[AttributionCell], currencies: dict[int, str]) -> None:
        """Add the attribution cells to their rows, creating the missing ones."""

    def touch_keys(self, last_used: dict[int, datetime]) -> None:
        """Move each key's ``last_used_at`` forward to its last call's end."""


__all__ = ["AttributionCell", "CallSink", "RollupCell", "Store"]
