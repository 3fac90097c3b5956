"""What ingest tells other apps about the calls it has just stored.

Ingest fires ``console.kernel.hooks.CALLS_INGESTED`` inside its transaction with
``totals``: one ``OrgUsageTotals`` per organization with newly stored calls
(a redelivered call is not new and is in no total), load-test calls marked
"not billed" (``is_test``) left out: they debit no balance. Receivers (invoicing's
prepaid ledger) work from these totals, never from call rows, so nothing
outside usage depends on the call row's layout.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class OrgUsageTotals:
    """The calls of one organization that one ingest transaction stored.

    ``cost`` is their summed cost in integer micro-units of the calls'
    currency; ``request_ids`` name exactly these calls (a receiver derives
    an idempotency key from them: the same calls are never stored twice, so
    never totalled twice)."""

    organization_id: int
    calls: int
    cost: int
    request_ids: tuple[str, ...]


def org_totals(rows: Iterable[Any]) -> list[OrgUsageTotals]:
    """Per-organization totals of the billed calls among stored call rows
    (``usage.ingest.rows.CallRow``), in organization id order."""
    cost: dict[int, int] = defaultdict(int)
    ids: dict[int, list[str]] = defaultdict(list)
    for row in rows:
        if row.is_test:
            continue
        org = row.organization_id
        cost[org] += row.cost
        ids[org].append(row.request_id)
    return [
        OrgUsageTotals(
            organization_id=org, calls=len(ids[org]), cost=cost[org], request_ids=tuple(ids[org])
        )
        for org in sorted(ids)
    ]


__all__ = ["OrgUsageTotals", "org_totals"]
