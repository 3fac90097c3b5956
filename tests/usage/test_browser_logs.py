"""The call logs in real headless Chromium: filter, open a call in the side
panel, and watch the live tail prepend a new call."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from accounts.models import Role
from tests.services import sign_in
from tests.usage.log_fixtures import T0, call, mixed_calls, save, tenant

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_filter_open_a_call_and_live_tail(live_server, browser_page):
    page, errors = browser_page
    t = tenant("Acme", "acme")
    mixed_calls(t)
    user = t.members[Role.OWNER].user
    ARTIFACTS.mkdir(exist_ok=True)

    sign_in(page, live_server.url, user)

    # Filter to errors: only the four failed calls are listed.
    page.goto(f"{live_server.url}/usage/calls/")
    page.fill("#id_status", "errors")
    page.click("#call-filters button[type=submit]")
    page.wait_for_url("**status=errors**")
    assert page.locator("#calls-body tr").count() == 4

    # A bad value is an inline error, not a failure.
    page.fill("#id_status", "teapot")
    page.click("#call-filters button[type=submit]")
    page.wait_for_selector("#field-status .field-error")

    # Open one call in the side panel (htmx), without leaving the page.
    page.goto(f"{live_server.url}/usage/calls/")
    target = t.calls[3]
    page.click(f"#call-{target.request_id} td a")
    page.wait_for_selector(f"#call-panel [data-request-id='{target.request_id}']")
    assert "Upstream time" in page.inner_text("#call-panel")
    assert page.url.endswith("/usage/calls/")
    page.screenshot(path=str(ARTIFACTS / "call-logs-detail.png"), full_page=True)
    page.click("#call-panel [data-close-panel]")
    page.wait_for_selector("#call-panel", state="hidden")

    # Live tail: a call recorded now appears on top within a few seconds.
    page.click("#live-toggle")
    page.wait_for_selector("#calls-body[data-live-tail]")
    fresh = save([call(t.org, t.key, started_at=T0 + timedelta(hours=1), model="fresh-model")])[0]
    page.wait_for_selector(f"#call-{fresh.request_id}", timeout=8000)
    first = page.locator("#calls-body tr").first.get_attribute("id")
    assert first == f"call-{fresh.request_id}"
    # And only once, however many polls have run since.
    page.wait_for_timeout(4500)
    assert page.locator(f"#call-{fresh.request_id}").count() == 1
    assert page.locator("#calls-body tr").count() == len(t.calls) + 1
    page.screenshot(path=str(ARTIFACTS / "call-logs-live.png"), full_page=True)

    page.goto(f"{live_server.url}/usage/models/")
    assert "read-only" in page.inner_text("main")
    assert errors == []
