"""Sign-in throttling per account + address, per address and per known device
(``accounts.throttle``): someone guessing an account's password or code from
one place never keeps its owner out from another, the guessing address learns
nothing from the throttle, and one address spraying many accounts slows down."""

from __future__ import annotations

import re
import time

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django_otp.oath import TOTP

from accounts import throttle, two_factor
from accounts.models import Role, User
from tests.factories import TEST_PASSWORD, MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db

GUESSER = "203.0.113.66"
OWNER = "198.51.100.7"
PROXY = "10.0.0.2"


@pytest.fixture(autouse=True)
def limits(settings):
    settings.LOGIN_MAX_FAILURES = 5
    settings.LOGIN_FAILURE_WINDOW_SECONDS = 900
    settings.LOGIN_MAX_DELAY_SECONDS = 600
    settings.GATEWAY_TRUSTED_PROXIES = []
    # django-otp's own per-device delay after a wrong code would refuse the
    # owner's right code here; the console's throttle is what is tested.
    settings.OTP_TOTP_THROTTLE_FACTOR = 0
    return settings


@pytest.fixture(autouse=True)
def _standing_clock(clock):
    """The throttle's clock (tests/accounts/conftest.py), standing still unless moved."""
    return clock


@pytest.fixture
def checks(monkeypatch):
    """How many times a password was checked."""
    seen = []
    original = User.check_password

    def check_password(self, raw):
        seen.append(raw)
        return original(self, raw)

    monkeypatch.setattr(User, "check_password", check_password)
    return seen


def _user():
    return MembershipFactory(organization=OrganizationFactory(), role=Role.OWNER).user


def _login(client, email, password, ip=OWNER, **extra):
    return client.post(
        reverse("accounts:login"),
        {"username": email, "password": password},
        REMOTE_ADDR=ip,
        **extra,
    )


def _code_step(client, code, ip=OWNER):
    return client.post(reverse("accounts:login_code"), {"code": code}, REMOTE_ADDR=ip)


def _code(user, *, steps_ahead: int = 0) -> str:
    """The authenticator's code (good once: turning two-factor on uses the
    current one, so a sign-in uses the next, ``steps_ahead=1``)."""
    device = two_factor.confirmed_device(user) or two_factor.setup_device(user)
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():06d}"


def _enable_two_factor(user) -> list[str]:
    """Two-factor on; its recovery codes (each good once, like a code)."""
    two_factor.setup_device(user)
    codes = two_factor.confirm_setup(user, _code(user))
    assert codes
    return codes


def _wrong_code(user) -> str:
    near = {_code(user, steps_ahead=n) for n in (-2, -1, 0, 1, 2)}
    return next(
        c for c in ("000000", "111111", "222222", "333333", "444444", "555555") if c not in near
    )


def _page(response) -> str:
    """The page, less its per-request CSRF tokens and the wall-clock time it
    says to come back after."""
    page = re.sub(r"\d\d:\d\d:\d\d", "", response.content.decode())
    page = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", page)
    return re.sub(r'"X-CSRFToken": "[^"]*"', "", page)


def _signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def _sign_out(client) -> None:
    """Sign out, keeping the browser's other cookies (Client.logout() drops them all)."""
    del client.cookies[settings.SESSION_COOKIE_NAME]


def _hammer(email, ip=GUESSER, times=5) -> list[int]:
    return [_login(Client(), email, f"guess {n}", ip=ip).status_code for n in range(times)]


# --- the reported lock-out --------------------------------------------------


def test_five_wrong_passwords_then_the_right_one_from_another_address_signs_in():
    victim = _user()
    assert _hammer(victim.email) == [200] * 5
    assert _login(Client(), victim.email, "guess 6", ip=GUESSER).status_code == 429
    owner = Client()
    response = _login(owner, victim.email, TEST_PASSWORD, ip=OWNER)
    assert response.status_code == 302 and _signed_in(owner)


def test_with_two_factor_the_right_password_and_code_from_another_address_sign_in():
    victim = _user()
    _enable_two_factor(victim)
    assert _hammer(victim.email) == [200] * 5
    owner = Client()
    assert _login(owner, victim.email, TEST_PASSWORD, ip=OWNER).status_code == 302
    assert not _signed_in(owner)
    response = _code_step(owner, _code(victim, steps_ahead=1), ip=OWNER)
    assert response.status_code == 302 and _signed_in(owner)


def test_codes_guessed_from_many_addresses_never_refuse_the_owners_right_code():
    victim = _user()
    _enable_two_factor(victim)
    # An attacker who has the password guesses codes from the guessing address
    # (until throttled there) and from twenty more, one session each.
    attacker = Client()
    assert _login(attacker, victim.email, TEST_PASSWORD, ip=GUESSER).status_code == 302
    answers = [_code_step(attacker, _wrong_code(victim), ip=GUESSER).status_code for _ in range(7)]
    assert answers == [200] * 5 + [429] * 2
    for n in range(20):
        ip = f"192.0.2.{n + 1}"
        bot = Client()
        assert _login(bot, victim.email, TEST_PASSWORD, ip=ip).status_code == 302
        assert _code_step(bot, _wrong_code(victim), ip=ip).status_code == 200
        # The account is under attack: one free failure per address, then a wait.
        assert _code_step(bot, _wrong_code(victim), ip=ip).status_code == 429
    owner = Client()
    assert _login(owner, victim.email, TEST_PASSWORD, ip=OWNER).status_code == 302
    assert _code_step(owner, _code(victim, steps_ahead=1), ip=OWNER).status_code == 302
    assert _signed_in(owner)


def test_the_owners_typo_from_a_fresh_address_during_an_attack_costs_a_second():
    victim = _user()
    for n in range(10):
        _hammer(victim.email, ip=f"192.0.2.{n + 1}", times=1)
    owner = Client()
    assert _login(owner, victim.email, "typo", ip=OWNER).status_code == 200
    assert _login(owner, victim.email, TEST_PASSWORD, ip=OWNER)["Retry-After"] == "1"


# --- what the guessing address sees -----------------------------------------


def test_the_guessing_address_gets_the_same_refusal_for_the_right_password(checks):
    """The choice: past its free failures, an address is refused *before* the
    password is checked, whatever it sends, so its answer (429, the message,
    Retry-After) cannot tell it that a password is right. It may try again when
    the wait is over (a back-off, not a lock)."""
    victim = _user()
    assert _hammer(victim.email) == [200] * 5
    checked = len(checks)
    wrong = _login(Client(), victim.email, "guess 6", ip=GUESSER)
    guesser = Client()
    right = _login(guesser, victim.email, TEST_PASSWORD, ip=GUESSER)
    assert wrong.status_code == right.status_code == 429
    assert wrong["Retry-After"] == right["Retry-After"] == "1"
    assert _page(wrong) == _page(right)
    assert len(checks) == checked  # neither password was checked
    assert not _signed_in(guesser)
    # Still refused on the next tries: the refusals are not failures, but they
    # do not clear anything either.
    assert _login(guesser, victim.email, TEST_PASSWORD, ip=GUESSER).status_code == 429


def test_the_guessing_address_keeps_waiting_longer_and_is_let_through_only_after_the_wait(
    clock,
):
    victim = _user()
    _hammer(victim.email)
    for wait in (1, 2, 4):
        assert _login(Client(), victim.email, "x", ip=GUESSER)["Retry-After"] == str(wait)
        clock.advance(wait)
        assert _login(Client(), victim.email, "x", ip=GUESSER).status_code == 200
    assert _login(Client(), victim.email, TEST_PASSWORD, ip=GUESSER)["Retry-After"] == "8"
    clock.advance(8)
    assert _login(Client(), victim.email, TEST_PASSWORD, ip=GUESSER).status_code == 302


def test_the_guessing_address_gets_the_same_refusal_for_the_right_code():
    victim = _user()
    _enable_two_factor(victim)
    attacker = Client()
    assert _login(attacker, victim.email, TEST_PASSWORD, ip=GUESSER).status_code == 302
    for _ in range(5):
        assert _code_step(attacker, _wrong_code(victim), ip=GUESSER).status_code == 200
    wrong = _code_step(attacker, _wrong_code(victim), ip=GUESSER)
    right = _code_step(attacker, _code(victim, steps_ahead=1), ip=GUESSER)
    assert wrong.status_code == right.status_code == 429
    assert wrong["Retry-After"] == right["Retry-After"]
    assert not _signed_in(attacker)


def test_the_refusal_is_in_the_users_language():
    victim = _user()
    _hammer(victim.email)
    response = _login(Client(), victim.email, "x", ip=GUESSER, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 429
    assert "登录失败次数过多" in response.content.decode()


# --- spraying -----------------------------------------------------------------


def test_one_address_spraying_many_accounts_is_throttled():
    accounts = [_user() for _ in range(8)]
    answers = [_login(Client(), u.email, "Winter2026!", ip=GUESSER).status_code for u in accounts]
    assert answers == [200] * 5 + [429] * 3
    # Not even an account the sprayer owns opens the address again at once.
    assert _login(Client(), _user().email, TEST_PASSWORD, ip=GUESSER).status_code == 429
    # The sprayed accounts' owners are not affected elsewhere.
    for user in accounts:
        assert _login(Client(), user.email, TEST_PASSWORD, ip=OWNER).status_code == 302


def test_a_spoofed_forwarded_for_does_not_escape_the_address_counter():
    accounts = [_user() for _ in range(7)]
    answers = [
        _login(
            Client(), u.email, "guess", ip=GUESSER, HTTP_X_FORWARDED_FOR=f"192.0.2.{n}"
        ).status_code
        for n, u in enumerate(accounts)
    ]
    assert answers == [200] * 5 + [429] * 2


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_counters(settings):
    settings.GATEWAY_TRUSTED_PROXIES = [PROXY]
    victim = _user()
    guesses = [
        _login(Client(), victim.email, "guess", ip=PROXY, HTTP_X_FORWARDED_FOR=GUESSER).status_code
        for _ in range(7)
    ]
    assert guesses == [200] * 5 + [429] * 2
    # Another client behind the same proxy is not refused (a made-up hop at the
    # left of the list is not believed either: the right-most one is the client).
    owner = Client()
    response = _login(
        owner, victim.email, TEST_PASSWORD, ip=PROXY, HTTP_X_FORWARDED_FOR=f"{GUESSER}, {OWNER}"
    )
    assert response.status_code == 302 and _signed_in(owner)


# --- known devices --------------------------------------------------------------


def test_a_known_device_signs_in_while_the_account_is_attacked_from_everywhere():
    victim = _user()
    browser = Client()
    assert _login(browser, victim.email, TEST_PASSWORD, ip=OWNER).status_code == 302
    assert throttle.DEVICE_COOKIE in browser.cookies
    _sign_out(browser)
    # Guesses from many addresses and from the owner's own (shared) address.
    for n in range(10):
        _hammer(victim.email, ip=f"192.0.2.{n + 1}", times=3)
    _hammer(victim.email, ip=OWNER, times=8)
    assert _login(Client(), victim.email, TEST_PASSWORD, ip=OWNER).status_code == 429
    response = _login(browser, victim.email, TEST_PASSWORD, ip=OWNER)
    assert response.status_code == 302 and _signed_in(browser)


def test_a_known_device_with_two_factor_signs_in_while_codes_are_guessed():
    victim = _user()
    recovery = _enable_two_factor(victim)
    browser = Client()
    _login(browser, victim.email, TEST_PASSWORD, ip=OWNER)
    assert _code_step(browser, recovery[0], ip=OWNER).status_code == 302
    _sign_out(browser)
    attacker = Client()
    _login(attacker, victim.email, TEST_PASSWORD, ip=OWNER)
    for _ in range(8):
        _code_step(attacker, _wrong_code(victim), ip=OWNER)
    assert _code_step(attacker, _code(victim, steps_ahead=1), ip=OWNER).status_code == 429
    assert _login(browser, victim.email, TEST_PASSWORD, ip=OWNER).status_code == 302
    assert _code_step(browser, _code(victim, steps_ahead=1), ip=OWNER).status_code == 302
    assert _signed_in(browser)


def test_the_right_password_before_the_code_is_not_counted_as_a_failure():
    victim = _user()
    _enable_two_factor(victim)
    # Five right passwords whose code step was never finished: no wait anywhere.
    for _ in range(5):
        assert _login(Client(), victim.email, TEST_PASSWORD, ip=OWNER).status_code == 302
    owner = Client()
    assert _login(owner, victim.email, TEST_PASSWORD, ip=OWNER).status_code == 302
    assert _code_step(owner, _code(victim, steps_ahead=1), ip=OWNER).status_code == 302
