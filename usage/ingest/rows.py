"""The call row: what ingest stores for one call, as a named row.

``CallRow`` is derived from the usage contract: the fields of a validated
event (``usage.events.ParsedEvent``, every ``UsageEvent`` field but the wire
version), then what ingest adds (the organization's currency, the cost, whether
a price was found and which, when it was stored). Its field names are the
call table's column names (``CALL_COLUMNS``), so every writer and every sum
reads a row by name: a field added to the contract becomes a column here
without an edit, and nothing depends on a position.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from usage.events import ParsedEvent

# What ingest adds to a validated event, in this order.
_RATED = (
    ("currency", str),
    ("cost", int),
    ("priced", bool),
    ("price_id", int | None),
    ("ingested_at", datetime),
)

CallRow = NamedTuple(  # the event's fields come from the contract
    "CallRow", [*ParsedEvent.__annotations__.items(), *_RATED]
)
CallRow.__doc__ = "One call as stored: the validated event's fields, then the rating's."
CALL_COLUMNS: tuple[str, ...] = CallRow._fields
_make = tuple.__new__


def call_row(event: ParsedEvent, currency: str, cost: int, price_id: int | None, now) -> CallRow:
    """The row of a validated event rated at ``cost`` (``price_id`` None: unpriced)."""
    return _make(CallRow, (*event, currency, cost, price_id is not None, price_id, now))


__all__ = ["CALL_COLUMNS", "CallRow", "call_row"]
