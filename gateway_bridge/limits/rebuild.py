"""Seed values of the cap buckets, from the database (the truth).

Sync Django ORM: the gateway calls ``seed_values`` in a thread when a store
reports a bucket missing (``BucketsMissing``), then ``store.seed`` each key
(which keeps a value another process seeded first).

What a key and its sub-account spent per period comes from usage
(``usage.facade.spend_by_period``, over the periods in the organization's
timezone); the prepaid balance from whichever app provides
``console.kernel.hooks.PREPAID_BALANCE`` (invoicing, from its ledger), so the
gateway imports no billing code."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING

from console.kernel import hooks
from gateway_bridge.limits.base import PREPAID_CODE
from gateway_bridge.limits.plan import org_tag, periods, plan
from usage.facade import SPEND_BY_KEY, SPEND_BY_SUB_ACCOUNT, spend_by_period

if TYPE_CHECKING:
    from accounts.facade import AuthenticatedKey


def prepaid_balance(organization_id: int) -> int:
    """The organization's prepaid balance (micro-units), as its provider says."""
    return int(hooks.PREPAID_BALANCE.ask(organization_id))


def seed_values(
    auth: AuthenticatedKey, now: datetime, keys: Collection[str] | None = None
) -> dict[str, int]:
    """``{bucket key: used}`` for the cap buckets ``plan(auth, now)`` gives
    (only ``keys`` when given): spent today, this month and in total by the key
    and its sub-account, and ``-balance`` for the prepaid bucket."""
    caps, _ = plan(auth, now)
    wanted = {c.key: c for c in caps if keys is None or c.key in keys}
    per = periods(auth.timezone, now)
    bounds = {p: (start, end) for p, (start, end, _) in per.items()}
    out: dict[str, int] = {}
    for grain, letter, ident in (
        (SPEND_BY_KEY, "k", auth.key_id),
        (SPEND_BY_SUB_ACCOUNT, "s", auth.sub_account_id),
    ):
        prefix = f"{org_tag(auth.organization_id)}cap:{letter}:{ident}:"
        mine = [k for k in wanted if k.startswith(prefix)]
        if ident is None or not mine:
            continue
        spent = spend_by_period(
            organization_id=auth.organization_id, grain=grain, ident=ident, periods=bounds
        )
        for key in mine:
            period = key[len(prefix) :].split(":", 1)[0]
            out[key] = spent["life" if period == "life" else period]
    for key, cap in wanted.items():
        if cap.code == PREPAID_CODE:
            out[key] = -prepaid_balance(auth.organization_id)
    return out
