"""The call table's month partitions under the soak's load (PostgreSQL).

Before the run, ``prepare`` leaves the partition maintenance something to
do: a partition two months back (history for retention to retire) and the
furthest month ahead missing (for the daily task to create). Mid-run,
``maintain`` does what beat and retention do, while the gateways' calls are
being ingested: it creates the months ahead and drops the retired month,
each taking the call table's lock. After the drain, ``check`` finds every
call of the run in its month's partition, none in the default partition,
the month created and the old one gone."""

from __future__ import annotations

import time

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone as tz

from tooling.soak.scenario import Scenario
from usage.facade import (
    add_months,
    call_partition_name,
    call_partitions,
    call_rows_by_partition,
    drop_call_partitions_before,
    drop_empty_call_partitions_after,
    ensure_call_partitions,
    month_start,
)

DEFAULT = "usage_call_default"


def prepare() -> dict:
    """Make the partition two months back, and drop the furthest month ahead
    when it is empty; what ``maintain`` is then expected to retire and create."""
    close_old_connections()
    current = month_start(tz.now())
    ahead = settings.USAGE_PARTITION_MONTHS_AHEAD
    retire = add_months(current, -2)
    last = add_months(current, ahead)
    # Only a month with no call in it is dropped (the soak's database).
    drop_empty_call_partitions_after(add_months(last, -1))
    ensure_call_partitions(first=retire, months_ahead=ahead - 1)
    names = {p.name for p in call_partitions()}
    return {
        "retire": call_partition_name(retire),
        "create": None if call_partition_name(last) in names else call_partition_name(last),
    }


def maintain(plan: dict) -> dict:
    """The daily partition task and retention, under load: the months ahead
    created, then the partitions wholly before last month dropped."""
    close_old_connections()
    began = time.monotonic()
    created = ensure_call_partitions()
    created_seconds = time.monotonic() - began
    began = time.monotonic()
    drop_call_partitions_before(add_months(month_start(tz.now()), -1))
    names = {p.name for p in call_partitions()}
    return {
        **plan,
        "created": created,
        "create_seconds": round(created_seconds, 3),
        "retired": plan["retire"] not in names,
        "drop_seconds": round(time.monotonic() - began, 3),
    }


def check(scenario: Scenario, maintained: dict | None) -> dict:
    """Every call of the run in its month's partition, and the maintenance done."""
    close_old_connections()
    rows = call_rows_by_partition([o.id for o in scenario.orgs.values()])
    in_default = rows.get(DEFAULT, 0)
    created = retired = False
    if maintained is not None and "error" not in maintained:
        created = not maintained["create"] or maintained["create"] in maintained["created"]
        retired = maintained["retired"]
    return {
        "ok": bool(rows) and in_default == 0 and created and retired,
        "rows_by_partition": rows,
        "rows_in_default": in_default,
        "maintenance": maintained,
    }
