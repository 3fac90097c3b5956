"""The call row: what ingest stores for one call, as a named row.

``CallRow`` is derived from the usage contract: the fields of a validated
event (``usage.events.ParsedEvent``, every ``UsageEvent`` field but the wire
version), then what ingest adds (the organization's currency, the cost, whether
a price was found and which, when it was stored). Its field names are the
call table's column names (``CALL_COLUMNS``), so every writer and every sum
reads a row by name: a field added to the contract becomes a column here
(the type checker's copy below wants its line too), and nothing depends on
a position.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from usage.events import ParsedEvent

# What ingest adds to a validated event, in this order.
_RATED = (
    ("currency", str),
    ("cost", int),
    ("priced", bool),
    ("price_id", int | None),
    ("ingested_at", datetime),
)

if TYPE_CHECKING:
    # The type checker's view of the NamedTuple made below (it cannot read
    # one made at run time): ``ParsedEvent``'s fields, then ``_RATED``'s.
    class CallRow(NamedTuple):
        request_id: str
        started_at: datetime
        finished_at: datetime
        organization_id: int
        sub_account_id: int | None
        api_key_id: int
        model: str
        node_id: int | None
        protocol: str
        endpoint: str
        stream: bool
        status_code: int
        error_type: str
        input_tokens: int
        cache_read_tokens: int
        cache_write_tokens: int
        output_tokens: int
        reasoning_tokens: int
        ttft_us: int | None
        latency_us: int
        upstream_us: int | None
        overhead_us: int | None
        queue_us: int | None
        client_ip: str | None
        priority: int
        cache_status: str
        credential_id: int | None
        upstream_cost: int
        upstream_currency: str
        end_user: str
        tags: dict[str, str]
        is_test: bool
        currency: str
        cost: int
        priced: bool
        price_id: int | None
        ingested_at: datetime

else:
    CallRow = NamedTuple(  # the event's fields come from the contract
        "CallRow", [*ParsedEvent.__annotations__.items(), *_RATED]
    )
    CallRow.__doc__ = "One call as stored: the validated event's fields, then the rating's."
CALL_COLUMNS: tuple[str, ...] = CallRow._fields
_make = tuple.__new__


def call_row(
    event: ParsedEvent, currency: str, cost: int, price_id: int | None, now: datetime
) -> CallRow:
    """The row of a validated event rated at ``cost`` (``price_id`` None: unpriced)."""
    row: CallRow = _make(CallRow, (*event, currency, cost, price_id is not None, price_id, now))
    return row


__all__ = ["CALL_COLUMNS", "CallRow", "call_row"]
