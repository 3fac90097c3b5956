"""Two-factor sign-in in real headless Chromium, under the
Content-Security-Policy: turn it on from the account page (the QR code is
drawn, the key typed into an "app", recovery codes shown), sign out, sign in
with the password and then the code, with no JavaScript or policy error."""

from __future__ import annotations

import time
from base64 import b32decode

import pytest
from django_otp.oath import TOTP

from accounts import two_factor
from tests.services import BROWSER_PASSWORD, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _app_code(key_text: str, steps_ahead: int = 0) -> str:
    """What an authenticator app shows for the key the page printed."""
    raw = key_text.replace(" ", "")
    key = b32decode(raw + "=" * (-len(raw) % 8))
    totp = TOTP(key)
    totp.time = time.time() + 30 * steps_ahead
    return f"{totp.token():06d}"


def test_turn_on_two_factor_then_sign_in_with_the_code(live_server, owner, browser_page):
    page, errors = browser_page
    sign_in(page, live_server.url, owner.user)

    page.goto(f"{live_server.url}/account/two-factor/")
    assert page.locator(".qr svg").is_visible()
    key_text = page.inner_text("[data-testid=totp-secret]")
    page.fill("#id_code", _app_code(key_text))
    page.click("button[value=confirm]")
    page.wait_for_selector("[data-testid=recovery-codes] li")
    assert page.locator("[data-testid=recovery-codes] li").count() == two_factor.RECOVERY_CODES
    assert two_factor.is_enabled(owner.user)

    page.context.clear_cookies()
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", owner.user.email)
    page.fill("#id_password", BROWSER_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/login/code/")
    page.fill("#id_code", _app_code(key_text, steps_ahead=1))
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert errors == []
