"""Which buckets and rate rules one key's call goes through."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from console.kernel.timezones import day_and_month
from gateway_bridge.limits.base import PREPAID_CODE, CapBucket, RateRule

if TYPE_CHECKING:
    from accounts.facade import AuthenticatedKey

# A period's bucket outlives the period by this much, so a call admitted just
# before midnight still settles into its own day (holds are minutes at most).
PERIOD_MARGIN_SECONDS = 2 * 3600

_UTC = ZoneInfo("UTC")


def org_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return _UTC


def org_tag(organization_id: int) -> str:
    """The Redis Cluster hash tag every limits key of the organization starts
    with: one call's buckets and rules share a slot, so one script can
    reserve on all of them."""
    return f"{{o:{organization_id}}}"


def bare_key(key: str) -> str:
    """``key`` without its hash tag: ``"{o:3}cap:k:42:life"`` -> ``"cap:k:42:life"``."""
    return key.rpartition("}")[2] if key.startswith("{") else key


def periods(tz_name: str, now: datetime) -> dict[str, tuple[datetime, datetime, str]]:
    """The current day and month in the organization's timezone:
    ``{"d": (start, end, "2026-12-02"), "m": (start, end, "2026-12")}``, start
    and end aware datetimes (end exclusive); the bounds are
    ``console.kernel.timezones.day_and_month``'s, which the console's spend bars use too."""
    bounds = day_and_month(tz_name, now)
    day_start, day_end = bounds["d"]
    month_start, month_end = bounds["m"]
    day = day_start.date()
    return {
        "d": (day_start, day_end, day.isoformat()),
        "m": (month_start, month_end, f"{day.year:04d}-{day.month:02d}"),
    }


def plan(auth: AuthenticatedKey, now: datetime) -> tuple[list[CapBucket], list[RateRule]]:
    """Buckets (key caps; sub-account caps and the prepaid balance but for a
    load-test key not billed) and rate rules
    (key, sub-account, organization) for ``auth`` (an ``AuthenticatedKey``)
    at ``now``; only the levels with a limit set."""
    per = periods(auth.timezone, now)
    tag = org_tag(auth.organization_id)
    caps: list[CapBucket] = []
    levels = [("key", "k", auth.key_id, auth.key_caps)]
    # A load-test key marked "not billed" spends its own caps (the test's
    # budget), not its sub-account's: its calls are on no invoice and in no
    # rollup, so the sub-account's spend (and its caps' seeding) leaves them out.
    if auth.sub_account_id is not None and not auth.test_traffic:
        levels.append(("sub_account", "s", auth.sub_account_id, auth.sub_account_caps))
    for scope, letter, ident, (daily, monthly, lifetime) in levels:
        for period, name, limit in (("d", "daily", daily), ("m", "monthly", monthly)):
            if limit is None:
                continue
            _, end, label = per[period]
            ttl = math.ceil((end - now).total_seconds()) + PERIOD_MARGIN_SECONDS
            caps.append(
                CapBucket(
                    code=f"{scope}_{name}_cap_exceeded",
                    key=f"{tag}cap:{letter}:{ident}:{period}:{label}",
                    limit=int(limit),
                    ttl_seconds=ttl,
                    resets_at=end.timestamp(),
                    currency=auth.currency,
                )
            )
        if lifetime is not None:
            caps.append(
                CapBucket(
                    code=f"{scope}_lifetime_cap_exceeded",
                    key=f"{tag}cap:{letter}:{ident}:life",
                    limit=int(lifetime),
                    ttl_seconds=None,
                    currency=auth.currency,
                )
            )
    # Nor does it spend the prepaid balance.
    if auth.billing_mode == "prepaid" and not auth.test_traffic:
        caps.append(
            CapBucket(
                code=PREPAID_CODE,
                key=f"{tag}bal:o:{auth.organization_id}",
                limit=0,
                ttl_seconds=None,
                currency=auth.currency,
            )
        )
    return caps, _rate_rules(auth, tag)


def _rate_rules(auth: AuthenticatedKey, tag: str) -> list[RateRule]:
    """The key's, its sub-account's and its organization's rate rules (those
    with a limit set)."""
    rates: list[RateRule] = []
    for scope, key, rpm, tpm in (
        ("key", f"{tag}rl:k:{auth.key_id}", auth.key_rpm, auth.key_tpm),
        (
            "sub_account",
            f"{tag}rl:s:{auth.sub_account_id}",
            auth.sub_account_rpm,
            auth.sub_account_tpm,
        ),
        ("org", f"{tag}rl:o:{auth.organization_id}", auth.org_rpm, auth.org_tpm),
    ):
        if scope == "sub_account" and auth.sub_account_id is None:
            continue
        if rpm is not None or tpm is not None:
            rates.append(RateRule(scope=scope, key=key, rpm=rpm, tpm=tpm))
    return rates


# Keys whose plans one process keeps (past that it starts over).
MAX_CACHED_PLANS = 100_000


class PlanCache:
    """Each key's caps and rate rules, kept until the earliest of its periods
    ends (a new day gets new buckets) or its auth entry is replaced; at most
    ``MAX_CACHED_PLANS`` keys (then it starts over)."""

    def __init__(self) -> None:
        # key id -> (its auth, valid until (POSIX s), its caps and rate rules)
        self._plans: dict[
            int, tuple[AuthenticatedKey, float, tuple[list[CapBucket], list[RateRule]]]
        ] = {}

    def __len__(self) -> int:
        """How many keys' plans are kept."""
        return len(self._plans)

    def get(self, auth: AuthenticatedKey, now_ts: float) -> tuple[list[CapBucket], list[RateRule]]:
        cached = self._plans.get(auth.key_id)
        if cached is not None and cached[0] is auth and now_ts < cached[1]:
            return cached[2]
        planned = plan(auth, datetime.fromtimestamp(now_ts, UTC))
        ends = [c.resets_at for c in planned[0] if c.resets_at]
        valid = min([*ends, now_ts + 60.0])
        if len(self._plans) > MAX_CACHED_PLANS:
            self._plans.clear()
        self._plans[auth.key_id] = (auth, valid, planned)
        return planned
