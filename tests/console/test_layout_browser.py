"""The console on a phone, in real headless Chromium: at 390 x 844 every role
of a populated organization opens the menu, reaches every item of its
navigation (read from the page itself) and the detail pages its lists link
to (a key, a sub-account, an invoice, a node, a call), and no page is wider
than the screen. At 1440 px the sidebar and the account links show without
the menu, and no page is wider than the window either. Screenshots go to
test-artifacts/."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from accounts.models import ApiKey, Membership, Organization, Role
from inference_node.models import Node
from tests.factories import MembershipFactory
from tests.services import sign_in
from usage.ingest import ingest_events
from usage.synth import batched, ensure_org, generate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "layout"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
ROLES = [Role.OWNER, Role.ADMIN, Role.FINANCE, Role.DEVELOPER, Role.VIEWER]
# The detail pages reached from a list: the list's path and its detail links.
DETAILS = [
    ("/keys/", re.compile(r"^/keys/\d+/$")),
    ("/sub-accounts/", re.compile(r"^/sub-accounts/\d+/$")),
    ("/billing/invoices/", re.compile(r"^/billing/invoices/\d+/$")),
    ("/nodes/", re.compile(r"^/nodes/\d+/$")),
    ("/usage/calls/", re.compile(r"^/usage/calls/[^/]+/$")),
]


@dataclass
class Populated:
    org: Organization
    members: dict[str, Membership]


@pytest.fixture
def populated(db, settings) -> Populated:
    """An organization with sub-accounts, keys (one the developer's), a few
    hundred calls over the last hours through the real ingest path (so the
    overview and analytics draw charts), its own node and a finalized invoice."""
    from invoicing.models import Invoice
    from usage.prices import invalidate_price_book
    from usage.seed import seed_catalog

    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    invalidate_price_book()
    seed_catalog()
    org, keys = ensure_org("layout", "Layout Works Ltd")
    now = datetime.now(UTC)
    events = generate(keys, start=now - timedelta(hours=20), hours=20, calls=400, seed=5)
    for chunk in batched(events, 200):
        ingest_events(chunk)
    members = {role: MembershipFactory(organization=org, role=role) for role in Role.values}
    developer_key = ApiKey.objects.get(pk=keys[2].key_id)
    developer_key.owner = members[Role.DEVELOPER].user
    developer_key.save(update_fields=["owner"])
    Node.objects.create(
        organization=org, name="gpu-eu-west-1-a100-node", base_url="http://10.0.0.5:8000"
    )
    Invoice.objects.create(
        organization=org,
        period="2026-10",
        period_start=datetime(2026, 10, 1, tzinfo=UTC),
        period_end=datetime(2026, 11, 1, tzinfo=UTC),
        currency=org.currency,
        status="finalized",
        number="INV-LAYOUT-1",
        total=123_450_000,
    )
    yield Populated(org, members)
    invalidate_price_book()


def settle(page) -> None:
    """Wait for the page's htmx partials (charts, tables) to arrive and draw."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !document.querySelector('[aria-busy=true]')", timeout=15000)


def page_width(page) -> int:
    return page.evaluate("() => document.documentElement.scrollWidth")


def open_menu(page) -> None:
    toggle = page.locator("button.menu-toggle")
    assert toggle.is_visible(), f"no Menu button on {page.url}"
    if toggle.get_attribute("aria-expanded") != "true":
        toggle.click()
    page.locator("nav.sidebar").wait_for(state="visible", timeout=5000)


def nav_links(page) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(
        "nav.sidebar a", "els => els.map(a => [a.textContent.trim(), a.getAttribute('href')])"
    )


def test_every_role_reaches_every_page_on_a_phone(live_server, browser_page, populated):
    from playwright.sync_api import Error as PlaywrightError

    page, errors = browser_page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(PHONE)
    base = live_server.url
    too_wide: list[str] = []
    unreachable: list[str] = []

    def check(role: str, label: str) -> None:
        settle(page)
        width = page_width(page)
        if width > PHONE["width"]:
            too_wide.append(f"{role} {page.url} is {width} px wide")
            page.screenshot(path=str(ARTIFACTS / f"too-wide-{role}-{label}.png"), full_page=True)

    for role in ROLES:
        member = populated.members[role]
        sign_in(page, base, member.user)
        # Folded: the navigation is hidden until the Menu button opens it.
        assert not page.locator("nav.sidebar").is_visible()
        open_menu(page)
        links = nav_links(page)
        assert links and links[0] == ["Overview", "/"], links
        page.screenshot(path=str(ARTIFACTS / f"menu-{role}.png"), full_page=True)
        check(role, "overview")

        visited = set()
        for text, href in links:
            open_menu(page)
            link = page.locator("nav.sidebar a", has_text=text).first
            try:
                # Generous timeouts: a loaded machine renders slowly; a link
                # that is hidden or covered still fails, only later.
                with page.expect_navigation(timeout=30000):
                    link.click(timeout=10000)  # visible, enabled, not covered
            except PlaywrightError as exc:  # reported with the others below
                unreachable.append(f"{role}: {text} ({href}): {exc.__class__.__name__}")
                continue
            visited.add(href)
            check(role, text.replace(" ", "-").replace("&", "and"))
            # The menu is closed on the new page, its own navigation unchanged.
            assert not page.locator("nav.sidebar").is_visible()
            assert nav_links(page) == links

        for list_path, detail in DETAILS:
            if list_path not in visited:
                continue
            page.goto(base + list_path)
            settle(page)
            hrefs = page.eval_on_selector_all(
                "main a", "els => els.map(a => a.getAttribute('href'))"
            )
            target = next((h for h in hrefs if h and detail.match(h)), None)
            assert target, f"{role}: no detail link on {list_path}"
            page.goto(base + target)
            check(role, list_path.strip("/").replace("/", "-") + "-detail")

        # The organization switcher and the account links are in the menu too.
        open_menu(page)
        for selector in ("#org-select", "nav.user >> text=Access tokens",
                         "nav.user >> text=Password", "nav.user >> text=Log out"):  # fmt: skip
            if not page.locator(selector).is_visible():
                unreachable.append(f"{role}: {selector} on {page.url}")
        page.click("nav.user >> text=Log out", timeout=3000)
        page.wait_for_url(re.compile(r".*/login/.*"), timeout=10000)

    assert unreachable == [], "\n".join(unreachable)
    assert too_wide == [], "\n".join(too_wide)
    assert errors == []


def test_wide_screen_shows_the_sidebar_and_fits(live_server, browser_page, populated):
    page, errors = browser_page
    page.set_viewport_size(DESKTOP)
    base = live_server.url
    sign_in(page, base, populated.members[Role.OWNER].user)
    assert not page.locator("button.menu-toggle").is_visible()
    assert page.locator("#org-select").is_visible()
    assert page.locator("nav.user >> text=Log out").is_visible()
    # The account links sit in the top bar, beside the brand.
    bar = page.locator("header.topbar").bounding_box()
    logout = page.locator("nav.user >> text=Log out").bounding_box()
    assert bar["y"] <= logout["y"] and logout["y"] + logout["height"] <= bar["y"] + bar["height"]
    too_wide = []
    for text, _href in nav_links(page):
        with page.expect_navigation():
            page.locator("nav.sidebar a", has_text=text).first.click()
        settle(page)
        assert page.locator("nav.sidebar").is_visible()
        if page_width(page) > DESKTOP["width"]:
            too_wide.append(f"{page.url} is {page_width(page)} px wide")
    page.screenshot(path=str(ARTIFACTS / "desktop-settings.png"), full_page=True)
    assert too_wide == []
    assert errors == []


def test_narrowest_phone_fits_every_owner_page(live_server, browser_page, populated):
    """360 px, the narrowest screen the console supports, with the owner's
    navigation (the longest); one screenshot per page."""
    page, errors = browser_page
    page.set_viewport_size({"width": 360, "height": 740})
    base = live_server.url
    sign_in(page, base, populated.members[Role.OWNER].user)
    open_menu(page)
    too_wide = []
    for text, _href in nav_links(page):
        open_menu(page)
        with page.expect_navigation():
            page.locator("nav.sidebar a", has_text=text).first.click()
        settle(page)
        name = re.sub(r"\W+", "-", text.lower())
        page.screenshot(path=str(ARTIFACTS / f"360-{name}.png"), full_page=True)
        if page_width(page) > 360:
            too_wide.append(f"{page.url} is {page_width(page)} px wide")
    assert too_wide == []
    assert errors == []


def test_without_script_a_phone_shows_the_menu_open(live_server, browser_page, owner):
    """The Menu button needs console.js; with script off the menu is simply open."""
    page, _errors = browser_page
    context = page.context.browser.new_context(java_script_enabled=False, viewport=PHONE)
    try:
        bare = context.new_page()
        sign_in(bare, live_server.url, owner.user)
        assert not bare.locator("button.menu-toggle").is_visible()
        assert bare.locator("nav.sidebar >> text=API keys").is_visible()
        assert bare.locator("nav.user >> text=Log out").is_visible()
        assert page_width(bare) <= PHONE["width"]
    finally:
        context.close()
