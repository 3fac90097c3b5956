"""What a key may ask about itself: its balance, limits and spend.

- ``GET /v1/dashboard/billing/subscription`` and
  ``GET /v1/dashboard/billing/usage?start_date=&end_date=``: OpenAI's old
  billing shapes as New API / one-api serve them per token (Cherry Studio,
  NextChat and similar clients read them). As New API does,
  ``hard_limit_usd`` (and the soft and system limits, equal to it) is what
  the key has spent in all plus what it may still spend (``remain + used``),
  so a client's ``hard_limit_usd - total_usage / 100`` is the room left; a
  key that nothing limits shows New API's "unlimited", 100000000.
  ``total_usage`` is the key's spend in [start_date, end_date) (days in the
  organization's timezone, end excluded) in cents. Amounts are in the
  organization's currency, which the ``_usd`` names do not change (``GET
  /v1/key`` says which currency).
- ``GET /v1/key`` (and OpenRouter's path, ``GET /api/v1/key``): the key's
  name and visible prefix (never its secret), its model allow-list, caps
  (the key's and its sub-account's, daily, monthly, lifetime) with the spend
  against each, rate limits, expiry, and the organization's prepaid balance
  where it is prepaid. The OpenRouter fields (``label``, ``usage``,
  ``limit``, ``limit_remaining``, ``is_free_tier``) sit beside them.

Each answers only for the key that calls (authenticated like any call: an
unknown, revoked or expired key gets the usual 401) and records no usage
event. The numbers are the ones the caps enforce (``limits.standing``);
they are read off the event loop. Money leaves as exact JSON numbers
converted once, by ``console.kernel.money``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from console.kernel.money import micro_to_decimal
from gateway_bridge.limits import in_db_thread
from gateway_bridge.limits.plan import org_zone
from gateway_bridge.limits.standing import Standing, key_spend_between, standing
from gateway_bridge.pipeline import auth, relay
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols.base import OVERLOADED, GatewayError, invalid

if TYPE_CHECKING:
    from accounts.facade import AuthenticatedKey
    from gateway_bridge.asgi import Receive, Scope, Send
    from gateway_bridge.pipeline.parts import Parts

logger = logging.getLogger(__name__)

SUBSCRIPTION = "billing.subscription"
USAGE = "billing.usage"
KEY_INFO = "key"
# New API's figure for a token without a quota.
UNLIMITED = 100_000_000
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


async def handle(
    gw: Parts,
    call: Call,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    _model: str | None,
) -> None:
    entry = await auth.authenticate(gw.state, gw.trusted, call, scope, headers)
    call.record = False
    key = entry.auth
    now = datetime.now(UTC)
    if call.endpoint == USAGE:
        # The dates first: a bad one is refused before anything is read.
        start, end = _range(scope.get("query_string") or b"", key.timezone, now)
        where = await _standing(gw, key, now)
        body = {"object": "list", "total_usage": await _usage(key, where, now, start, end)}
    elif call.endpoint == SUBSCRIPTION:
        body = _subscription(key, await _standing(gw, key, now))
    else:
        body = {"data": _key(key, await _standing(gw, key, now))}
    await relay.respond(send, 200, _dumps(body), call)


async def _standing(gw: Parts, key: AuthenticatedKey, now: datetime) -> Standing:
    try:
        return await standing(gw.limits, key, now)
    except GatewayError:
        raise
    except Exception:
        raise _unavailable() from None


def _unavailable() -> GatewayError:
    """The limits store or the database failed: a 503 to retry, not a trace."""
    logger.exception("gateway: could not read a key's balance and spend")
    return GatewayError(
        OVERLOADED,
        "limits_unavailable",
        "Spend and limits cannot be read right now; retry shortly.",
        headers=[("retry-after", "1")],
    )


# --- OpenAI's old billing shapes ------------------------------------------------


def _subscription(key: AuthenticatedKey, where: Standing) -> dict[str, Any]:
    room = where.room
    if room is None:
        limit: Decimal | int | None = UNLIMITED
    else:
        limit = _amount(where.key_cap("lifetime").spent + room)
    return {
        "object": "billing_subscription",
        "has_payment_method": True,
        "soft_limit_usd": limit,
        "hard_limit_usd": limit,
        "system_hard_limit_usd": limit,
        "access_until": int(key.expires_at.timestamp()) if key.expires_at else 0,
    }


def _range(query: bytes, tz_name: str, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of ``start_date`` / ``end_date`` (local midnights in the
    organization's timezone). Without ``start_date``: from the beginning;
    without ``end_date``: through today."""
    params = parse_qs(query.decode("latin-1"), keep_blank_values=True)
    tz = org_zone(tz_name)
    today = now.astimezone(tz).date()
    days = {}
    for name in ("start_date", "end_date"):
        values = params.get(name)
        if not values:
            continue
        text = values[0]
        try:
            if not _DATE.match(text):
                raise ValueError
            day = date.fromisoformat(text)
            if not 1970 <= day.year <= 9998:
                raise ValueError
        except ValueError:
            raise invalid(
                f"'{text[:40]}' is not a date: send {name} as YYYY-MM-DD.",
                param=name,
                code="invalid_date",
            ) from None
        days[name] = day
    start_day = days.get("start_date", date(1970, 1, 1))
    end_day = days.get("end_date", today + timedelta(days=1))
    if end_day <= start_day:
        raise invalid(
            "end_date must be after start_date (the range is [start_date, end_date)).",
            param="end_date",
            code="invalid_date",
        )

    def at(d: date) -> datetime:
        return datetime(d.year, d.month, d.day, tzinfo=tz)

    return at(start_day), at(end_day)


async def _usage(
    key: AuthenticatedKey, where: Standing, now: datetime, start: datetime, end: datetime
) -> Decimal:
    """The key's spend in [start, end), in cents: the ingested calls, plus
    those settled and not ingested yet when the range takes in now."""
    try:
        spent = await asyncio.to_thread(in_db_thread, key_spend_between, key, start, end)
    except Exception:
        raise _unavailable() from None
    if start <= now < end:
        spent += where.key_pending
    return micro_to_decimal(spent) * 100


# --- GET /v1/key ------------------------------------------------------------------


def _key(key: AuthenticatedKey, where: Standing) -> dict[str, Any]:
    life = where.key_cap("lifetime")
    caps = [
        {
            "scope": c.scope,
            "period": c.period,
            "limit": _amount(c.limit),
            "spent": _amount(c.spent),
            "held": _amount(c.held),
            "remaining": _amount(c.remaining),
            "resets_at": c.resets_at.isoformat() if c.resets_at else None,
            "source": c.source,
        }
        for c in where.caps
    ]
    balance = None
    if where.balance is not None:
        balance = {
            "balance": _amount(where.balance),
            "held": _amount(where.balance_held),
            "available": _amount(max(0, where.balance - where.balance_held)),
        }
    rates = {"key": _rate(key.key_rpm, key.key_tpm)}
    if key.sub_account_id is not None:
        rates["sub_account"] = _rate(key.sub_account_rpm, key.sub_account_tpm)
    rates["organization"] = _rate(key.org_rpm, key.org_tpm)
    return {
        "object": "key",
        "label": key.name,
        "name": key.name,
        "prefix": f"sk-{key.public_id}",
        "organization": key.organization_slug,
        "sub_account": key.sub_account_id is not None,
        "currency": key.currency,
        "expires_at": key.expires_at.astimezone(UTC).isoformat() if key.expires_at else None,
        "allowed_models": _allowed_models(key),
        "usage": _amount(life.spent),
        "usage_daily": _amount(where.key_cap("daily").spent),
        "usage_monthly": _amount(where.key_cap("monthly").spent),
        "limit": _amount(life.limit),
        "limit_remaining": _amount(where.room),
        "is_free_tier": False,
        "caps": caps,
        "prepaid_balance": balance,
        "rate_limits": rates,
    }


def _allowed_models(key: AuthenticatedKey) -> list[str] | None:
    """The models the key may call (every level's allow-list at once); None: any."""
    allowed: set[str] | None = None
    for rule in (key.allowed_models_key, key.allowed_models_sub_account, key.allowed_models_org):
        if rule:
            allowed = set(rule) if allowed is None else allowed & set(rule)
    return sorted(allowed) if allowed is not None else None


def _rate(rpm: int | None, tpm: int | None) -> dict[str, Any]:
    return {"requests_per_minute": rpm, "tokens_per_minute": tpm}


# --- exact numbers ------------------------------------------------------------------


def _amount(micro: int | None) -> Decimal | None:
    return None if micro is None else micro_to_decimal(micro)


def _dumps(obj: dict[str, Any]) -> bytes:
    """JSON with every ``Decimal`` written as an exact number (no float in
    between): each is encoded as a marker string (with a fresh nonce, so no
    text in the body, a key's name say, can pose as one), then swapped for
    its digits."""
    numbers: list[Decimal] = []
    nonce = secrets.token_hex(8)

    def default(value: object) -> str:
        if isinstance(value, Decimal):
            numbers.append(value)
            return f"{nonce}:{len(numbers) - 1}"
        raise TypeError(f"{type(value).__name__} is not JSON")

    text = json.dumps(obj, default=default, separators=(",", ":"))
    marker = re.compile(f'"{nonce}:(\\d+)"')
    return marker.sub(lambda m: _number(numbers[int(m[1])]), text).encode()


def _number(value: Decimal) -> str:
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"
