"""The keys list in headless Chromium: each capped period draws a visible
progress bar, rows stay compact with restrictions, and the copy button of a
new invitation link copies it (console.js, no inline script)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from accounts.actors import Actor
from accounts.models import Role
from tests.factories import MembershipFactory, OrganizationFactory, issue_key
from tests.services import sign_in
from tests.usage.factories import PriceFactory, event
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_spend_bars_are_drawn_and_rows_stay_compact(live_server, browser_page, settings):
    page, errors = browser_page
    settings.USAGE_RETENTION_DAYS = 0
    seed_catalog()  # a transactional test before this one flushed the migration's rows
    org = OrganizationFactory(name="Acme", slug="acme")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    PriceFactory(
        model__name="bar-model",
        input_per_mtok=1_000_000,
        cache_read_per_mtok=0,
        cache_write_per_mtok=0,
        output_per_mtok=0,
    )
    invalidate_price_book()
    invalidate_directory()
    key, _ = issue_key(
        Actor(owner),
        "svc",
        spend_cap_daily=2_000_000,
        spend_cap_monthly=3_000_000,
        allowed_models=["bar-model", "sim-chat-small", "sim-chat-large"],
        ip_allowlist=["203.0.113.0/24", "198.51.100.7"],
        rpm_limit=60,
        tpm_limit=100_000,
        expires_at=timezone.now() + timedelta(days=30),
    )
    ingest_events([
        event(key, started_at=timezone.now() - timedelta(seconds=5), model="bar-model",
              input_tokens=1_500_000, output_tokens=0)
    ])  # fmt: skip
    sign_in(page, live_server.url, owner.user)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/keys/")

    bar = page.locator('tr[data-key="svc"] .spend-bar[data-period="today"] progress')
    assert bar.is_visible()
    assert bar.get_attribute("value") == "75"
    assert bar.bounding_box()["width"] > 60
    row = page.locator('tr[data-key="svc"]').bounding_box()
    assert row["height"] < 130, row  # three periods of spend, restrictions as chips
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "keys-spend.png"), full_page=True)
    assert errors == []


def test_the_invitation_link_is_copied_by_its_button(live_server, browser_page):
    page, errors = browser_page
    org = OrganizationFactory(name="Acme", slug="acme")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    sign_in(page, live_server.url, owner.user)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{live_server.url}/members/")
    page.fill("#invite-form #id_email", "new@example.com")
    page.click("#invite-form button[type=submit]")
    page.wait_for_selector("#invite-link")
    link = page.input_value("#invite-link")
    assert "/invite/" in link
    page.click("[data-copy-target=invite-link]")
    page.wait_for_selector("button.copied")
    assert page.evaluate("navigator.clipboard.readText()") == link
    assert errors == []
