"""Sign-in throttling: progressive delay per account, per client address and
per known device, never a lockout an attacker can aim at the real user.

Three counters of failed attempts, each kept in the cache (shared by every
web process when Redis is configured) for ``LOGIN_FAILURE_WINDOW_SECONDS``
after its last failure:

* per **account** (the e-mail typed, hashed): 20 wrong passwords from 20
  addresses slow down the 20 attempts, whoever sends them;
* per **client address**: spraying many accounts from one address slows down;
* per **known device**: a browser that signed in to the account before
  carries a signed cookie (``DEVICE_COOKIE``) naming the account. Its
  attempts on that account count only against the device's own counter, so
  an attacker hammering the account (or sharing the user's address) does not
  slow the real user down on their usual browser. The cookie cannot be
  forged (Django's signing, a salt of its own) and names accounts by id only.

After ``LOGIN_MAX_FAILURES`` failures on a counter, each further attempt must
wait ``2 ** (failures - LOGIN_MAX_FAILURES)`` seconds after the latest failure
(at most ``LOGIN_MAX_DELAY_SECONDS``); an attempt made earlier is answered
at once (429, the form saying when to try again) without checking the password.

An attempt is counted *before* the password is checked and uncounted when it
succeeds, so a burst of parallel guesses cannot all slip through while the
first ones are still being hashed. A success clears the account's and the
device's counters; the address counter is left to expire (signing in to one's
own account must not reset a sprayer's budget).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.core.cache import cache

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


@dataclass(frozen=True)
class Attempt:
    """The counters one sign-in attempt is charged to."""

    keys: tuple[str, ...]
    # Cleared by a success (the account's or the device's counter).
    reset_on_success: tuple[str, ...]
    # Uncounted by a success, then left to expire (the address counter).
    undo_on_success: tuple[str, ...]


def attempt_for(request, email: str, ip: str | None, user_id: int | None) -> Attempt:
    """``user_id``: the account the e-mail names, if any (a device cookie
    only vouches for accounts it names)."""
    email = (email or "").strip().lower()
    device = read_device(request)
    if device is not None and user_id is not None and user_id in device.user_ids:
        key = f"login-throttle:device:{_digest(device.id, email)}"
        return Attempt(keys=(key,), reset_on_success=(key,), undo_on_success=())
    account = f"login-throttle:account:{_digest(email)}"
    address = f"login-throttle:address:{_digest(ip or '')}"
    return Attempt(keys=(account, address), reset_on_success=(account,), undo_on_success=(address,))


def _delay(failures: int) -> float:
    free = settings.LOGIN_MAX_FAILURES
    if failures < free:
        return 0.0
    return float(min(2 ** min(failures - free, 32), settings.LOGIN_MAX_DELAY_SECONDS))


def retry_after(attempt: Attempt) -> float:
    """Seconds until this attempt may be made (0: now)."""
    now = _now()
    wait = 0.0
    for key in attempt.keys:
        failures = cache.get(key) or 0
        if failures:
            wait = max(wait, (cache.get(f"{key}:t") or 0.0) + _delay(failures) - now)
    return max(wait, 0.0)


def charge(attempt: Attempt) -> None:
    """Count the attempt as a failure (before the password is checked)."""
    window = settings.LOGIN_FAILURE_WINDOW_SECONDS
    now = _now()
    for key in attempt.keys:
        if not cache.add(key, 1, timeout=window):
            try:
                cache.incr(key)
            except ValueError:  # expired in between
                cache.set(key, 1, timeout=window)
            cache.touch(key, timeout=window)
        cache.set(f"{key}:t", now, timeout=window)


def succeeded(attempt: Attempt) -> None:
    for key in attempt.reset_on_success:
        cache.delete_many([key, f"{key}:t"])
    for key in attempt.undo_on_success:
        try:
            if cache.decr(key) <= 0:
                cache.delete_many([key, f"{key}:t"])
        except ValueError:
            pass
