"""The limits interface shared by both stores: cap buckets, rate rules, the
admission a caller gets back, header rendering and the errors of a refusal.

Spend caps and the prepaid balance are **buckets** of integer micro-units:
``used`` (settled spend) plus ``reserved`` (worst cases of calls in flight)
plus a call's worst case must stay within ``limit``. The prepaid bucket has
limit 0 and is seeded with ``used = -balance``.

Rate limits are a **sliding window of fixed slots**: the window (60 s) is cut
in ``slots`` slots (1 s each by default); a request counts, with its tokens,
in the slot it was admitted in, and the slot stops counting ``slots + 1``
slots later. The window therefore always covers at least the last 60 s, so
no 60-second span ever holds more than the limit (a slot later than a pure
60 s window at worst), and ``Retry-After`` is exact: the moment the oldest
slots that must go are gone."""

from __future__ import annotations

import math
from dataclasses import dataclass

from console.kernel.money import format_amount
from gateway_bridge.protocols.base import PAYMENT_REQUIRED, RATE_LIMIT, GatewayError

PREPAID_CODE = "prepaid_balance_exhausted"
# Refusal kinds as the stores report them.
REFUSED_CAP, REFUSED_RPM, REFUSED_TPM, REFUSED_TPM_NEVER = 1, 2, 3, 4
RECORD_GRACE_MS = 300_000  # a reservation's record outlives its hold, for late settles


@dataclass(frozen=True, slots=True)
class CapBucket:
    code: str  # error code when it refuses ("key_daily_cap_exceeded", ...)
    # store key, led by the organization's hash tag: "{o:3}cap:k:42:d:2026-12-02",
    # "{o:3}cap:s:7:m:2026-12", "{o:3}cap:k:42:life", "{o:3}bal:o:3"
    key: str
    limit: int  # micro-units; the prepaid bucket has limit 0 and used = -balance
    ttl_seconds: int | None
    # For messages and Retry-After only: when the period ends (POSIX seconds;
    # None for lifetime and prepaid) and the currency of the amounts.
    resets_at: float | None = None
    currency: str = ""


@dataclass(frozen=True, slots=True)
class RateRule:
    scope: str  # "key" | "sub_account" | "org"
    key: str  # "{o:3}rl:k:42"
    rpm: int | None
    tpm: int | None


@dataclass(frozen=True, slots=True)
class RuleState:
    """A rate rule's window after an admission (or at a refusal)."""

    requests: int  # requests counted in the window
    tokens: int  # tokens counted in the window
    reset_ms: int  # until the window is empty again, if nothing else comes


@dataclass(frozen=True, slots=True)
class Admission:
    """An admitted call: settle or release ``reservation_id`` when it ends.
    ``headers`` go on the response (the ``x-ratelimit-*`` of the most
    constraining rule; empty when no rate rule applies)."""

    reservation_id: str
    headers: list[tuple[str, str]]


class BucketsMissing(Exception):
    """Some cap buckets are not in the store (first use, a new day, a flushed
    Redis). Nothing was reserved: seed them (``rebuild.seed_values``) and try
    again. Admitting against an unseeded bucket would forget what the
    database already holds, so the stores never create one implicitly."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__(", ".join(keys))
        self.keys = list(keys)


class DuplicateReservation(ValueError):
    """``admit`` with a reservation id that is still live."""


# --- headers ------------------------------------------------------------------


_DURATIONS: dict[int, str] = {}  # ms -> text, for the resets of the last few thousand ms


def format_duration(ms: int) -> str:
    """OpenAI's reset format (Go durations): "20ms", "1s", "1.5s", "6m0s", "1h2m3s"."""
    text = _DURATIONS.get(ms)
    if text is None:
        text = _format_duration(ms)
        if len(_DURATIONS) >= 4096:
            _DURATIONS.clear()
        _DURATIONS[ms] = text
    return text


def _format_duration(ms: int) -> str:
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    sec = f"{seconds}.{millis:03d}".rstrip("0").rstrip(".") if millis else str(seconds)
    if hours:
        return f"{hours}h{minutes}m{sec}s"
    if minutes:
        return f"{minutes}m{sec}s"
    return f"{sec}s"


_HEADER_NAMES = {
    dim: (f"x-ratelimit-limit-{dim}", f"x-ratelimit-remaining-{dim}", f"x-ratelimit-reset-{dim}")
    for dim in ("requests", "tokens")
}


def rate_headers(
    rules: list[RateRule],
    states: list[RuleState],
    *,
    forced: tuple[str, int] | None = None,
) -> list[tuple[str, str]]:
    """``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` of the most
    constraining rule per dimension (the least remaining; of equals, the one
    that resets last); ``forced`` = (dimension, rule index) names the rule
    that refused, which wins."""
    if len(rules) != len(states):
        raise ValueError("one state per rule")
    out: list[tuple[str, str]] = []
    for dim in ("requests", "tokens"):
        requests = dim == "requests"
        best = None  # (remaining, reset_ms, limit)
        for i, rule in enumerate(rules):
            limit = rule.rpm if requests else rule.tpm
            if limit is None:
                continue
            st = states[i]
            remaining = limit - (st.requests if requests else st.tokens)
            if remaining < 0:
                remaining = 0
            if forced is not None and forced[0] == dim and forced[1] == i:
                best = (remaining, st.reset_ms, limit)
                break
            if (
                best is None
                or remaining < best[0]
                or (remaining == best[0] and st.reset_ms > best[1])
            ):
                best = (remaining, st.reset_ms, limit)
        if best is not None:
            remaining, reset_ms, limit = best
            names = _HEADER_NAMES[dim]
            out += [
                (names[0], str(limit)),
                (names[1], str(remaining)),
                (names[2], format_duration(reset_ms)),
            ]
    return out


# --- refusals -----------------------------------------------------------------

_SCOPE = {"key": "key", "sub_account": "sub-account", "org": "organization"}
_PERIOD = {"daily": "daily", "monthly": "monthly", "lifetime": "lifetime"}


def _money(micro: int, currency: str) -> str:
    # Exact (a cap rounded to cents would refuse the very amount it names),
    # in console.kernel.money's one format.
    # With no currency known (an old bucket), the number alone ("XXX": no currency).
    return format_amount(micro, currency or "XXX", exact=True).removesuffix(" XXX")


def _window_text(window_ms: int) -> str:
    return "per minute" if window_ms == 60_000 else f"per {format_duration(window_ms)}"


def cap_refusal(
    bucket: CapBucket,
    used: int,
    reserved: int,
    amount: int,
    now: float,
    headers: list[tuple[str, str]],
) -> GatewayError:
    headers = list(headers)
    if bucket.code == PREPAID_CODE:
        message = (
            f"The organization's prepaid balance is exhausted: balance "
            f"{_money(-used, bucket.currency)}, {_money(reserved, bucket.currency)} held by "
            f"calls in progress, and this call may cost up to "
            f"{_money(amount, bucket.currency)}. Top up the balance to continue."
        )
        if used + amount <= bucket.limit:
            headers.append(("retry-after", "1"))
        return GatewayError(PAYMENT_REQUIRED, PREPAID_CODE, message, headers=headers)
    scope, _, period = bucket.code.removesuffix("_cap_exceeded").rpartition("_")
    message = (
        f"The {_SCOPE.get(scope, scope)}'s {_PERIOD.get(period, period)} spend cap of "
        f"{_money(bucket.limit, bucket.currency)} is reached: "
        f"{_money(used, bucket.currency)} spent and {_money(reserved, bucket.currency)} held "
        f"by calls in progress, and this call may cost up to "
        f"{_money(amount, bucket.currency)}."
    )
    if used + amount <= bucket.limit:
        # Only calls in flight stand in the way: they settle or release soon.
        headers.append(("retry-after", "1"))
    elif bucket.resets_at is not None:
        headers.append(("retry-after", str(max(1, math.ceil(bucket.resets_at - now)))))
        message += " It resets when the period ends."
    return GatewayError(RATE_LIMIT, bucket.code, message, headers=headers)


def rate_refusal(
    kind: int,
    rule: RateRule,
    state: RuleState,
    tokens: int,
    retry_ms: int,
    window_ms: int,
    headers: list[tuple[str, str]],
) -> GatewayError:
    headers = list(headers)
    scope = _SCOPE.get(rule.scope, rule.scope)
    per = _window_text(window_ms)
    if kind == REFUSED_TPM_NEVER:
        message = (
            f"This request needs up to {tokens} tokens (prompt estimate plus output "
            f"budget), more than the {scope}'s whole limit of {rule.tpm} tokens {per}, "
            f"so it can never pass. Lower max_tokens or shorten the prompt."
        )
        return GatewayError(RATE_LIMIT, "tpm_limit_exceeded", message, headers=headers)
    retry = max(1, math.ceil(retry_ms / 1000))
    headers.append(("retry-after", str(retry)))
    if kind == REFUSED_RPM:
        message = (
            f"Rate limit reached for the {scope}: {rule.rpm} requests {per}. Retry after {retry} s."
        )
        return GatewayError(RATE_LIMIT, "rpm_limit_exceeded", message, headers=headers)
    message = (
        f"Rate limit reached for the {scope}: {rule.tpm} tokens {per} "
        f"({state.tokens} used in the window, this request needs up to {tokens}). "
        f"Retry after {retry} s."
    )
    return GatewayError(RATE_LIMIT, "tpm_limit_exceeded", message, headers=headers)


def refusal(
    kind: int,
    index: int,
    caps: list[CapBucket],
    rates: list[RateRule],
    states: list[RuleState],
    amount: int,
    tokens: int,
    detail: tuple[int, int],
    now_ms: int,
    window_ms: int,
) -> GatewayError:
    """The error of a refused admission, as either store found it: ``kind``
    (``REFUSED_*``) and the index of the cap or rule that refused, with the
    windows' ``states``; ``detail``: a cap's (used, reserved), a rule's (wait
    in ms, 0)."""
    if kind == REFUSED_CAP:
        headers = rate_headers(rates, states)
        used, reserved = detail
        return cap_refusal(caps[index], used, reserved, amount, now_ms / 1000, headers)
    dim = "requests" if kind == REFUSED_RPM else "tokens"
    headers = rate_headers(rates, states, forced=(dim, index))
    return rate_refusal(kind, rates[index], states[index], tokens, detail[0], window_ms, headers)


def check_args(amount: int, tokens: int, hold_seconds: float) -> None:
    if amount < 0 or tokens < 0:
        raise ValueError("amount and tokens cannot be negative")
    if hold_seconds <= 0:
        raise ValueError("hold_seconds must be positive")


def check_settle(cost: int, tokens: int) -> None:
    if cost < 0 or tokens < 0:
        raise ValueError("cost and tokens cannot be negative")


def hold_ms(hold_seconds: float) -> int:
    """How long an admission holds its reservation (ms, at least 1)."""
    return max(1, round(hold_seconds * 1000))


class StoreBase:
    """What both stores share: the rate window's geometry (``window_ms`` cut
    in ``slots`` slots of ``slot_ms``) and ``snapshot``, read through the
    store's own ``peek``."""

    def __init__(self, window_seconds: float, slots: int) -> None:
        self.window_ms = round(window_seconds * 1000)
        if slots < 1 or self.window_ms % slots:
            raise ValueError("the window must split into whole milliseconds per slot")
        self.slots = slots
        self.slot_ms = self.window_ms // slots

    async def peek(self, key: str) -> tuple[int, int] | None:
        """A bucket's (used, reserved), None when it is not in the store."""
        raise NotImplementedError

    async def snapshot(self, key: str) -> tuple[int, int]:
        """A bucket's (used, reserved); (0, 0) when it is not in the store."""
        return await self.peek(key) or (0, 0)
