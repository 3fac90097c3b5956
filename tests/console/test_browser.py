"""The console in real headless Chromium (Playwright driving /usr/bin/chromium):
log in, create a sub-account and a key with an IP allowlist, see the secret
once, find the copy button, revoke the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from accounts.models import ApiKey, SubAccount
from tests.services import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_create_sub_account_and_key_then_revoke(live_server, owner, browser_page):
    page, errors = browser_page
    ARTIFACTS.mkdir(exist_ok=True)

    # Log in with the owner's e-mail and password.
    sign_in(page, live_server.url, owner.user)
    assert owner.organization.name in page.content()

    # Create a sub-account.
    page.goto(f"{live_server.url}/sub-accounts/")
    page.fill("#sub-account-form #id_name", "Research team")
    page.fill("#sub-account-form #id_spend_cap_monthly", "100")
    page.click("#sub-account-form button[type=submit]")
    page.wait_for_selector("h1:has-text('Research team')")
    sub = SubAccount.objects.get(organization=owner.organization, name="Research team")
    assert sub.spend_cap_monthly == 100_000_000

    # Open the htmx key form, submit a bad CIDR first: the error is inline.
    page.goto(f"{live_server.url}/keys/")
    page.click("#new-key")
    page.wait_for_selector("#key-form")
    page.fill("#key-form #id_name", "browser key")
    page.select_option("#key-form #id_sub_account", str(sub.pk))
    page.fill("#key-form #id_ip_allowlist", "10.0.0.0/8, 999.1.1.1")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#field-ip_allowlist .field-error")
    assert "999.1.1.1" in page.inner_text("#field-ip_allowlist .field-error")
    assert not ApiKey.objects.filter(name="browser key").exists()

    # Fix it: the key is created and its secret shown once with a copy button.
    page.fill("#key-form #id_ip_allowlist", "10.0.0.0/8, 2001:db8::/32")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#key-secret")
    raw = page.input_value("#raw-key")
    assert raw.startswith("sk-")
    assert "will not be shown again" in page.inner_text("#key-secret")
    copy = page.locator("#copy-key")
    assert copy.is_visible()
    copy.click()
    page.wait_for_selector("#copy-key.copied")
    page.screenshot(path=str(ARTIFACTS / "key-created.png"), full_page=True)
    key = ApiKey.objects.get(name="browser key")
    assert key.sub_account_id == sub.pk
    assert key.ip_allowlist == ["10.0.0.0/8", "2001:db8::/32"]

    # The list shows the prefix, never the secret.
    page.goto(f"{live_server.url}/keys/")
    assert key.prefix in page.content()
    assert raw not in page.content()

    # Revoke with confirmation.
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("tr[data-key='browser key'] button.danger")
    page.wait_for_selector("text=revoked.")
    key.refresh_from_db()
    assert key.status == "revoked"
    page.screenshot(path=str(ARTIFACTS / "key-revoked.png"), full_page=True)
    assert errors == []
