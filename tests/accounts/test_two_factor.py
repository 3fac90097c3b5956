"""Optional TOTP second factor: turned on by scanning a QR code and
confirming a code; sign-in then asks for a code after the password; a code
is good once; recovery codes are good once; wrong codes are throttled like
wrong passwords."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django_otp.oath import TOTP

from accounts import throttle, two_factor
from accounts.models import RecoveryCode, Role
from tests.factories import TEST_PASSWORD, MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db

HOME = "198.51.100.7"


@pytest.fixture(autouse=True)
def no_device_throttle(settings):
    # django-otp's own per-device delay (1 s, 2 s, ... after a wrong code) would
    # make these tests wait; the console's throttle is what is tested here.
    settings.OTP_TOTP_THROTTLE_FACTOR = 0
    settings.LOGIN_MAX_FAILURES = 5
    settings.LOGIN_MAX_DELAY_SECONDS = 600


@pytest.fixture
def user():
    return MembershipFactory(organization=OrganizationFactory(), role=Role.OWNER).user


def _code(user, *, steps_ahead: int = 0) -> str:
    device = two_factor.confirmed_device(user) or two_factor.setup_device(user)
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():06d}"


def _enable(user) -> list[str]:
    two_factor.setup_device(user)
    codes = two_factor.confirm_setup(user, _code(user))
    assert codes
    return codes


def _password(client, user, ip=HOME):
    return client.post(
        reverse("accounts:login"),
        {"username": user.email, "password": TEST_PASSWORD},
        REMOTE_ADDR=ip,
    )


def _code_step(client, code, ip=HOME):
    return client.post(reverse("accounts:login_code"), {"code": code}, REMOTE_ADDR=ip)


def _signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_turning_it_on_shows_a_qr_code_needs_a_right_code_and_shows_recovery_codes_once(
    client, user
):
    client.force_login(user)
    url = reverse("accounts:two_factor")
    page = client.get(url).content.decode()
    assert "<svg" in page and "is <strong>off</strong>" in page

    wrong = client.post(url, {"action": "confirm", "code": "000000"})
    assert wrong.status_code == 400 and not two_factor.is_enabled(user)

    turned_on = client.post(url, {"action": "confirm", "code": _code(user)}).content.decode()
    assert two_factor.is_enabled(user)
    rows = list(RecoveryCode.objects.filter(user=user))
    assert len(rows) == two_factor.RECOVERY_CODES
    for row in rows:  # shown on the page, stored only as a digest
        assert row.code_hash not in turned_on
    shown = [c for c in turned_on.split("<code>")[1:] if "-" in c[:13]]
    assert len(shown) == two_factor.RECOVERY_CODES
    assert not any(code.split("</code>")[0] in row.code_hash for code in shown for row in rows)

    again = client.get(url).content.decode()
    assert "is <strong>on</strong>" in again and shown[0].split("</code>")[0] not in again


def test_sign_in_asks_for_the_code_after_the_password(client, user):
    _enable(user)
    after_password = _password(client, user)
    assert after_password.status_code == 302
    assert after_password["Location"] == reverse("accounts:login_code")
    assert not _signed_in(client)
    # Without the code nothing is open.
    assert client.get(reverse("console:overview")).status_code == 302

    # (The current step's code was spent turning the factor on: the next one.)
    done = _code_step(client, _code(user, steps_ahead=1))
    assert done.status_code == 302 and done["Location"] == reverse("console:overview")
    assert _signed_in(client)
    assert client.get(reverse("console:overview")).status_code == 200


def test_a_wrong_code_does_not_sign_in(client, user):
    _enable(user)
    _password(client, user)
    wrong = _code_step(client, "123456" if _code(user) != "123456" else "654321")
    assert wrong.status_code == 200 and "not right" in wrong.content.decode()
    assert not _signed_in(client)


def test_the_code_step_needs_the_password_step_first(client, user):
    _enable(user)
    response = _code_step(client, _code(user))
    assert response.status_code == 302 and response["Location"] == reverse("accounts:login")
    assert not _signed_in(client)


def test_a_code_that_signed_in_once_is_refused_the_second_time(user):
    _enable(user)  # spends the current step's code
    first, second = Client(), Client()
    code = _code(user, steps_ahead=1)
    _password(first, user)
    _code_step(first, code)
    assert _signed_in(first)

    _password(second, user)
    replay = _code_step(second, code)
    assert replay.status_code == 200 and not _signed_in(second)


def test_a_recovery_code_works_once(user):
    codes = _enable(user)
    first, second = Client(), Client()
    _password(first, user)
    _code_step(first, codes[0].upper())  # case and dashes do not matter
    assert _signed_in(first)
    assert two_factor.recovery_codes_left(user) == two_factor.RECOVERY_CODES - 1

    _password(second, user)
    assert _code_step(second, codes[0]).status_code == 200
    assert not _signed_in(second)
    _code_step(second, codes[1])
    assert _signed_in(second)


def test_wrong_codes_are_throttled_like_wrong_passwords(monkeypatch, user):
    now = [1_800_000_000.0]
    monkeypatch.setattr(throttle, "_now", lambda: now[0])
    _enable(user)
    attacker = Client()
    assert _password(attacker, user, ip="203.0.113.9").status_code == 302
    answers = [_code_step(attacker, f"{n:06d}", ip="203.0.113.9").status_code for n in range(1, 8)]
    # The password step counted once; four more wrong codes are free, then each waits.
    assert answers[:4] == [200] * 4
    assert 429 in answers[4:]
    locked = _code_step(attacker, _code(user, steps_ahead=1), ip="203.0.113.9")
    assert locked.status_code == 429 and int(locked["Retry-After"]) >= 1
    assert not _signed_in(attacker)
    now[0] += settings.LOGIN_MAX_DELAY_SECONDS + 1
    assert _code_step(attacker, _code(user, steps_ahead=1), ip="203.0.113.9").status_code == 302


def test_turning_it_off_needs_a_code_and_sign_in_is_one_step_again(client, user):
    _enable(user)
    client.force_login(user)
    url = reverse("accounts:two_factor")
    assert client.post(url, {"action": "disable", "code": "nope"}).status_code == 400
    assert two_factor.is_enabled(user)
    client.post(url, {"action": "disable", "code": _code(user, steps_ahead=1)})
    assert not two_factor.is_enabled(user) and not RecoveryCode.objects.filter(user=user).exists()

    fresh = Client()
    assert _password(fresh, user)["Location"] == reverse("console:overview")
    assert _signed_in(fresh)


def test_the_admin_sign_in_asks_for_the_code_too(user):
    user.is_staff = user.is_superuser = True
    user.save()
    _enable(user)
    browser = Client()
    response = browser.post(
        reverse("admin:login"), {"username": user.email, "password": TEST_PASSWORD}
    )
    assert response.status_code == 302 and response["Location"] == reverse("accounts:login_code")
    assert not _signed_in(browser)
    _code_step(browser, _code(user, steps_ahead=1))
    assert _signed_in(browser)


def test_an_owner_can_require_two_factor_of_every_member(client):
    org = OrganizationFactory()
    owner = MembershipFactory(organization=org, role=Role.OWNER).user
    member = MembershipFactory(organization=org, role=Role.DEVELOPER).user
    url = reverse("accounts:two_factor")

    client.force_login(owner)
    # Not before the owner has a second factor themselves.
    refused = client.post(url, {"action": "require"})
    assert refused.status_code == 400 and "for yourself first" in refused.content.decode()
    _enable(owner)
    assert client.post(url, {"action": "require"}).status_code == 302
    org.refresh_from_db()
    assert org.require_two_factor

    # A developer cannot lift it.
    other = Client()
    other.force_login(member)
    assert other.post(url, {"action": "unrequire"}).status_code == 400
    org.refresh_from_db()
    assert org.require_two_factor

    # Without a second factor, the member reaches only the page that sets one up.
    overview = other.get(reverse("console:overview"))
    assert overview.status_code == 302 and overview["Location"] == url
    assert other.get(url).status_code == 200
    assert other.get("/api/v1/keys/").status_code == 200  # the API is not a sign-in
    _enable(member)
    assert other.get(reverse("console:overview")).status_code == 200

    # Nor can a member turn theirs off while it is required.
    assert other.post(url, {"action": "disable", "code": "x"}).status_code == 400
    assert two_factor.is_enabled(member)


def test_the_setup_key_and_recovery_codes_are_never_stored_the_plain_settings_page_is(client, user):
    client.force_login(user)
    url = reverse("accounts:two_factor")
    setup = client.get(url)
    assert 'data-testid="totp-secret"' in setup.content.decode()
    assert setup["Cache-Control"] == "no-store"
    turned_on = client.post(url, {"action": "confirm", "code": _code(user)})
    assert 'data-testid="recovery-codes"' in turned_on.content.decode()
    assert turned_on["Cache-Control"] == "no-store"
    # On, with no new codes: nothing secret on the page, an ordinary answer.
    plain = client.get(url)
    assert 'data-testid="totp-secret"' not in plain.content.decode()
    assert "no-store" not in plain.get("Cache-Control", "")
    new_codes = client.post(url, {"action": "regenerate", "code": _code(user, steps_ahead=1)})
    assert 'data-testid="recovery-codes"' in new_codes.content.decode()
    assert new_codes["Cache-Control"] == "no-store"
