"""Sign-in throttling: wrong passwords slow down per account and address, per
address (whatever the account) and per known device; guesses on an account
from elsewhere never refuse its right password, and the real user on the
browser they signed in from before is not slowed down at all."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from accounts import throttle
from accounts.models import Role
from tests.factories import TEST_PASSWORD, MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db

HOME = "198.51.100.7"




@pytest.fixture
def limits(settings):
    settings.LOGIN_MAX_FAILURES = 5
    settings.LOGIN_FAILURE_WINDOW_SECONDS = 900
    settings.LOGIN_MAX_DELAY_SECONDS = 600
    return settings


def _user():
    return MembershipFactory(organization=OrganizationFactory(), role=Role.OWNER).user


def _login(client, email, password, ip=HOME):
    return client.post(
        reverse("accounts:login"), {"username": email, "password": password}, REMOTE_ADDR=ip
    )


def _sign_out(client) -> None:
    """Sign out, keeping the browser's other cookies (Client.logout() drops them all)."""
    del client.cookies[settings.SESSION_COOKIE_NAME]


def _signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_twenty_wrong_passwords_from_twenty_addresses_never_refuse_the_right_one(clock, limits):
    victim = _user()
    answers = [
        _login(Client(), victim.email, f"guess {n}", ip=f"203.0.113.{n}").status_code
        for n in range(1, 21)
    ]
    # Each is checked (the account's count across addresses refuses nothing) ...
    assert answers == [200] * 20
    # ... but with the account under attack, each address has one free failure on it.
    response = _login(Client(), victim.email, "guess again", ip="203.0.113.20")
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed sign-in attempts" in page and "Try again in 1 second" in page
    assert response["Retry-After"] == "1"
    # The right password from yet another address signs in at once.
    client = Client()
    assert _login(client, victim.email, TEST_PASSWORD, ip="203.0.113.99").status_code == 302
    assert _signed_in(client)


def test_the_delay_doubles_with_each_failure_and_ends(clock, limits):
    victim = _user()
    guesser = "203.0.113.5"
    for _ in range(5):
        assert _login(Client(), victim.email, "wrong", ip=guesser).status_code == 200
    waits = []
    for _ in range(4):
        response = _login(Client(), victim.email, "wrong", ip=guesser)
        assert response.status_code == 429
        waits.append(int(response["Retry-After"]))
        clock.advance(waits[-1])
        assert _login(Client(), victim.email, "wrong", ip=guesser).status_code == 200
    assert waits == [1, 2, 4, 8]
    # The wait is capped, and says when in words.
    for _ in range(10):
        clock.advance(600)
        _login(Client(), victim.email, "wrong", ip=guesser)
    response = _login(Client(), victim.email, "wrong", ip=guesser)
    assert response["Retry-After"] == "600"
    assert "Try again in 10 minutes" in response.content.decode()
    # Once the wait is over the address may try again (the count itself is forgotten
    # when the cache entry expires; here the clock only moves past the delay).
    clock.advance(600)
    assert _login(Client(), victim.email, TEST_PASSWORD, ip=guesser).status_code == 302


def test_spraying_eight_accounts_from_one_address_is_throttled(clock, limits):
    accounts = [_user() for _ in range(8)]
    answers = [_login(Client(), u.email, "Winter2026!").status_code for u in accounts]
    assert answers[:5] == [200] * 5
    assert answers[5:] == [429] * 3
    # Even an account the sprayer owns does not open the address again at once.
    mine = _user()
    assert _login(Client(), mine.email, TEST_PASSWORD).status_code == 429
    # Another address is not affected by this one's spraying.
    assert _login(Client(), accounts[-1].email, TEST_PASSWORD, ip="192.0.2.44").status_code == 302


def test_the_real_user_on_their_usual_browser_is_not_locked_out_by_an_attacker(clock, limits):
    victim = _user()
    browser = Client()
    # The user signed in from this browser before: it is a known device now.
    assert _login(browser, victim.email, TEST_PASSWORD).status_code == 302
    assert throttle.DEVICE_COOKIE in browser.cookies
    _sign_out(browser)
    # An attacker hammers the account from many addresses, and from the user's own
    # (shared) address too.
    for n in range(30):
        _login(Client(), victim.email, f"guess {n}", ip=f"203.0.113.{n + 1}")
        _login(Client(), victim.email, f"guess {n}", ip=HOME)
    assert _login(Client(), victim.email, TEST_PASSWORD, ip=HOME).status_code == 429
    # The user, on their usual browser at their usual address, signs in at once.
    response = _login(browser, victim.email, TEST_PASSWORD)
    assert response.status_code == 302 and _signed_in(browser)
    # And a typo there does not cost them a wait.
    _sign_out(browser)
    assert _login(browser, victim.email, "typo").status_code == 200
    assert _login(browser, victim.email, TEST_PASSWORD).status_code == 302


def test_a_device_cookie_vouches_only_for_its_own_account_and_cannot_be_forged(clock, limits):
    victim, attacker = _user(), _user()
    browser = Client()
    # The attacker's browser knows the attacker's own account, not the victim's.
    assert _login(browser, attacker.email, TEST_PASSWORD).status_code == 302
    _sign_out(browser)
    answers = [_login(browser, victim.email, f"guess {n}", ip="203.0.113.8") for n in range(7)]
    assert [r.status_code for r in answers] == [200] * 5 + [429] * 2
    # A made-up cookie naming the victim is ignored.
    forged = Client()
    forged.cookies[throttle.DEVICE_COOKIE] = f'{{"d": "x", "u": [{victim.pk}]}}'
    assert _login(forged, victim.email, "guess", ip="203.0.113.8").status_code == 429


def test_a_known_device_is_throttled_on_its_own(clock, limits):
    victim = _user()
    browser = Client()
    _login(browser, victim.email, TEST_PASSWORD)
    _sign_out(browser)
    # A stolen cookie buys no unlimited guesses: the device has its own counter.
    answers = [_login(browser, victim.email, f"guess {n}").status_code for n in range(7)]
    assert answers == [200] * 5 + [429] * 2


def test_a_success_clears_the_account_count_but_not_the_address_count(clock, limits):
    victim = _user()
    for n in range(4):
        _login(Client(), victim.email, "wrong", ip=f"203.0.113.{n}")
    assert _login(Client(), victim.email, TEST_PASSWORD, ip="192.0.2.1").status_code == 302
    # The account's count started again: four more failures from elsewhere do not slow it.
    for n in range(4):
        assert _login(Client(), victim.email, "wrong", ip=f"198.18.0.{n}").status_code == 200
    assert _login(Client(), victim.email, TEST_PASSWORD, ip="192.0.2.2").status_code == 302


def test_the_cache_keys_carry_no_email_or_address(clock, limits):
    victim = _user()

    class _Request:
        COOKIES: dict = {}

    attempt = throttle.attempt_for(_Request(), victim.email, HOME, victim.pk)
    for key in attempt.keys:
        assert victim.email not in key and "@" not in key and HOME not in key


def test_the_admin_sign_in_is_no_way_around_the_throttle(clock, limits):
    staff = _user()
    staff.is_staff = staff.is_superuser = True
    staff.save()
    url = reverse("admin:login")
    answers = [
        Client()
        .post(url, {"username": staff.email, "password": "guess"}, REMOTE_ADDR="203.0.113.7")
        .status_code
        for _ in range(7)
    ]
    assert answers == [200] * 5 + [429] * 2
    # The console's sign-in shares the count (the password is not even checked).
    assert _login(Client(), staff.email, TEST_PASSWORD, ip="203.0.113.7").status_code == 429
    # Another address is not refused, on the admin's sign-in either.
    client = Client()
    response = client.post(
        url, {"username": staff.email, "password": TEST_PASSWORD}, REMOTE_ADDR="203.0.113.78"
    )
    assert response.status_code == 302 and _signed_in(client)
