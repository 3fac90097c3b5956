"""The call detail panel in headless Chromium: Esc closes it and gives the
focus back to the call that opened it; its link opens the call's own page."""

from __future__ import annotations

import pytest

from accounts.models import Role
from tests.services import sign_in
from tests.usage.log_fixtures import mixed_calls, tenant

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_escape_closes_the_panel_and_its_link_opens_the_calls_page(live_server, browser_page):
    page, errors = browser_page
    t = tenant("Acme", "acme")
    mixed_calls(t)
    sign_in(page, live_server.url, t.members[Role.OWNER].user)

    page.goto(f"{live_server.url}/usage/calls/")
    target = t.calls[3]
    opener = f"#call-{target.request_id} td a"
    page.click(opener)
    page.wait_for_selector(f"#call-panel [data-request-id='{target.request_id}']")
    page.keyboard.press("Escape")
    page.wait_for_selector("#call-panel", state="hidden")
    assert page.evaluate("document.activeElement.closest('tr').id") == f"call-{target.request_id}"

    page.click(opener)
    page.click("#call-page-link")
    page.wait_for_url(f"**/usage/calls/{target.request_id}/")
    assert "Upstream time" in page.inner_text("main")
    assert errors == []
