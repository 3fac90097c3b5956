"""Sign-in throttling: back-off per account *and* address (or known device)
and per address, never a lockout that someone else's guesses can aim at the
real user.

Counters of failed attempts, each kept in the cache (shared by every web
process when Redis is configured) for ``LOGIN_FAILURE_WINDOW_SECONDS`` after
its latest failure. "Address" is the client address of ``client_address``:
the TCP peer, or behind a proxy listed in ``GATEWAY_TRUSTED_PROXIES`` the
right-most ``X-Forwarded-For`` hop that is not such a proxy (the gateway's
rule); any other ``X-Forwarded-For`` is ignored.

* **account + address** (``pair``): failures on one account from one address;
* **address**: failures from one address on any account (one address spraying
  many accounts slows down);
* **account**: failures on one account from every address. It never refuses
  an attempt by itself: the password is always checked. While the account
  has ``LOGIN_MAX_FAILURES`` failures or more from elsewhere (its counter less
  this address's account + address counter: the account is under attack),
  the account + address counter allows one free failure instead of
  ``LOGIN_MAX_FAILURES``. Guesses spread over many addresses slow down after
  one each, while the right password from an address that has not failed on
  the account goes through at once, and guessing from one address alone is
  throttled by that address's counters only;
* **known device**: a browser that signed in to the account before carries a
  signed cookie (``DEVICE_COOKIE``, Django's signing with a salt of its own,
  naming accounts by id only). Its attempts on that account count only on
  its own device + account counter, instead of the three above: guesses from
  anywhere else, even from the user's own (shared) address, never slow the
  user down on their usual browser.

A counter with ``failures`` at or past its free ones (``free``:
``LOGIN_MAX_FAILURES``, or 1 as above) makes the next attempt wait
``2 ** (failures - free)`` seconds after its latest failure (at most
``LOGIN_MAX_DELAY_SECONDS``). An attempt made earlier on the account +
address, address or device counter is answered at once, 429 with the time to
wait, *without checking the password*: the guessing address gets the same
answer whether the password is right or wrong, so the throttle tells it
nothing; it may try again when the wait is over, at the doubling rate.

The two-factor code step is throttled by the same counters and rule (a wrong
code is a failure like a wrong password). An attempt is counted *before* the
password or code is checked; a right password that still needs a code is
uncounted, so the code step starts where the password step found the
counters; a completed sign-in clears the account + address (or device) and
account counters and uncounts itself from the address counter, which is
otherwise left to expire (signing in to one's own account must not reset a
sprayer's budget).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core import signing
from django.core.cache import cache

from accounts.middleware import client_ip
from console.kernel import ipnet

DEVICE_COOKIE = "console_device"
DEVICE_SALT = "accounts.login-device"
DEVICE_COOKIE_MAX_AGE = 365 * 24 * 3600
# Accounts one browser is remembered for (the most recent ones).
DEVICE_MAX_ACCOUNTS = 5


def _now() -> float:
    return time.time()


def _digest(*parts: str) -> str:
    # Cache keys never carry what a person typed.
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Device:
    """What a browser's device cookie says: its own id and the accounts
    (user ids) that signed in from it."""

    id: str
    user_ids: tuple[int, ...]


def read_device(request) -> Device | None:
    raw = request.COOKIES.get(DEVICE_COOKIE)
    if not raw:
        return None
    try:
        data = signing.loads(raw, salt=DEVICE_SALT, max_age=DEVICE_COOKIE_MAX_AGE)
        device_id = str(data["d"])
        user_ids = tuple(int(u) for u in data["u"])
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        return None
    return Device(device_id, user_ids)


def remember_device(request, response, user) -> None:
    """After a successful sign-in: mark this browser as a known device of ``user``."""
    device = read_device(request)
    device_id = device.id if device else secrets.token_urlsafe(16)
    others = [u for u in (device.user_ids if device else ()) if u != user.pk]
    user_ids = [user.pk, *others][:DEVICE_MAX_ACCOUNTS]
    response.set_cookie(
        DEVICE_COOKIE,
        signing.dumps({"d": device_id, "u": user_ids}, salt=DEVICE_SALT),
        max_age=DEVICE_COOKIE_MAX_AGE,
        httponly=True,
        secure=settings.SESSION_COOKIE_SECURE,
        samesite="Lax",
    )


@functools.lru_cache(maxsize=4)
def _trusted(entries: tuple[str, ...]) -> ipnet.Networks:
    return ipnet.parse(entries)


def client_address(request) -> str:
    """The address sign-in attempts are counted against: the console's
    ``client_ip`` (the TCP peer) unless that is one of ``GATEWAY_TRUSTED_PROXIES``,
    then the right-most ``X-Forwarded-For`` hop that is not (the gateway's rule,
    ``console.kernel.ipnet.forwarded_client``)."""
    peer = client_ip(request) or ""
    trusted = _trusted(tuple(settings.GATEWAY_TRUSTED_PROXIES or ()))
    return ipnet.forwarded_client(peer, request.META.get("HTTP_X_FORWARDED_FOR"), trusted)


@dataclass(frozen=True)
class Attempt:
    """The counters one sign-in attempt is charged to: the account + address
    counter and the address and account ones, or for a known device only its
    device + account counter (``address`` and ``account`` None)."""

    pair: str
    address: str | None = None
    account: str | None = None
    # What ``charge`` found and wrote (the latest failure's time), for ``uncharge``.
    _charged: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.pair, self.address, self.account) if k)


def attempt_for(request, email: str, ip: str | None, user_id: int | None) -> Attempt:
    """``ip``: ``client_address(request)``; ``user_id``: the account the e-mail
    names, if any (a device cookie only vouches for accounts it names)."""
    email = (email or "").strip().lower()
    device = read_device(request)
    if device is not None and user_id is not None and user_id in device.user_ids:
        return Attempt(pair=f"login-throttle:device:{_digest(device.id, email)}")
    return Attempt(
        pair=f"login-throttle:pair:{_digest(email, ip or '')}",
        address=f"login-throttle:address:{_digest(ip or '')}",
        account=f"login-throttle:account:{_digest(email)}",
    )


def _delay(failures: int, free: int) -> float:
    if failures < free:
        return 0.0
    return float(min(2 ** min(failures - free, 32), settings.LOGIN_MAX_DELAY_SECONDS))


def _wait(key: str, free: int, now: float) -> float:
    failures = cache.get(key) or 0
    if not failures:
        return 0.0
    return (cache.get(f"{key}:t") or 0.0) + _delay(failures, free) - now


def under_attack(attempt: Attempt) -> bool:
    """Whether the account has ``LOGIN_MAX_FAILURES`` failures or more from
    other addresses (its counter less this address's account + address one)."""
    if attempt.account is None:
        return False
    elsewhere = (cache.get(attempt.account) or 0) - (cache.get(attempt.pair) or 0)
    return elsewhere >= settings.LOGIN_MAX_FAILURES


def retry_after(attempt: Attempt) -> float:
    """Seconds until this attempt may be checked (0: now). The account counter
    never refuses; it only leaves the account + address counter one free failure."""
    now = _now()
    limit = settings.LOGIN_MAX_FAILURES
    wait = _wait(attempt.pair, 1 if under_attack(attempt) else limit, now)
    if attempt.address:
        wait = max(wait, _wait(attempt.address, limit, now))
    return max(wait, 0.0)


def charge(attempt: Attempt) -> None:
    """Count the attempt as a failure (before the password or code is checked)."""
    window = settings.LOGIN_FAILURE_WINDOW_SECONDS
    now = _now()
    for key in attempt.keys:
        if not cache.add(key, 1, timeout=window):
            try:
                cache.incr(key)
            except ValueError:  # expired in between
                cache.set(key, 1, timeout=window)
            cache.touch(key, timeout=window)
        attempt._charged[key] = (cache.get(f"{key}:t"), now)
        cache.set(f"{key}:t", now, timeout=window)


def _uncount(key: str, attempt: Attempt | None = None) -> None:
    try:
        if cache.decr(key) <= 0:
            cache.delete_many([key, f"{key}:t"])
            return
    except ValueError:
        return
    before, wrote = (attempt._charged.get(key) if attempt else None) or (None, None)
    if before is not None and cache.get(f"{key}:t") == wrote:
        # No failure since this attempt's: the latest failure is the one before.
        cache.set(f"{key}:t", before, timeout=settings.LOGIN_FAILURE_WINDOW_SECONDS)


def uncharge(attempt: Attempt) -> None:
    """The password was right and the code step comes next: this attempt was no
    failure, on any counter (the code step is counted on its own)."""
    for key in attempt.keys:
        _uncount(key, attempt)


def succeeded(attempt: Attempt) -> None:
    """Signed in: clear the account + address (or device) and account counters;
    uncount this attempt from the address counter and leave the rest to expire."""
    cache.delete_many([attempt.pair, f"{attempt.pair}:t"])
    if attempt.account:
        cache.delete_many([attempt.account, f"{attempt.account}:t"])
    if attempt.address:
        _uncount(attempt.address, attempt)
