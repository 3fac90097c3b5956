"""Simplified Chinese in real headless Chromium (issue 18): the owner switches
the console to 简体中文 with the footer's switcher, finds the navigation in
Chinese on every page of it, signs out (the sign-in page stays Chinese), and
on signing in again from a browser that forgot the choice the account still
has it."""

from __future__ import annotations

import pytest

from tests.services import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The owner's navigation, in order, as a Chinese-speaking user reads it.
OWNER_NAV_ZH = [
    "概览",
    "API 密钥",
    "子账户",
    "成员",
    "节点与渠道",
    "调用日志",
    "分析",
    "模型广场",
    "容量规划",
    "账单",
    "告警",
    "Webhook",
    "模型与价格",
    "审计日志",
    "设置",
]


def nav_labels(page) -> list[list[str]]:
    return page.eval_on_selector_all(
        "nav.sidebar a", "els => els.map(a => [a.textContent.trim(), a.getAttribute('href')])"
    )


def test_owner_switches_to_simplified_chinese_and_keeps_it(live_server, owner, browser_page):
    page, errors = browser_page
    base = live_server.url

    sign_in(page, base, owner.user)
    assert next(t for t, _ in nav_labels(page)) == "Overview"
    assert page.get_attribute("html", "lang") == "en"

    # The footer's switcher submits itself (console.js, no inline script).
    with page.expect_navigation():
        page.select_option("#language-select", "zh-hans")
    page.wait_for_selector("nav.sidebar a:has-text('概览')")
    assert page.url == f"{base}/"
    assert page.get_attribute("html", "lang") == "zh-hans"
    links = nav_labels(page)
    assert [t for t, _ in links] == OWNER_NAV_ZH
    owner.user.refresh_from_db()
    assert owner.user.language == "zh-hans"

    # Every page of the navigation: the frame in Chinese, the page marked so.
    for _label, href in links:
        page.goto(f"{base}{href}")
        assert page.get_attribute("html", "lang") == "zh-hans", href
        assert [t for t, _ in nav_labels(page)] == OWNER_NAV_ZH, href
        assert page.inner_text(".menu-toggle").strip() == "菜单", href
        assert "退出登录" in page.inner_text("nav.user"), href
        assert "访问令牌" in page.inner_text("nav.user"), href
        assert page.input_value("#language-select") == "zh-hans", href
        assert page.locator("nav.sidebar a.active").count() <= 1, href
    page.goto(f"{base}/")
    assert "成员" in page.inner_text(".tiles") and "子账户" in page.inner_text(".tiles")

    # Sign out: the sign-in page is in Chinese too.
    page.click("nav.user button:has-text('退出登录')")
    page.goto(f"{base}/login/")
    assert page.inner_text("h1") == "登录"
    assert page.inner_text("#forgot-password") == "忘记密码？"  # noqa: RUF001 (Chinese punctuation)

    # Another browser (no cookie): English until signing in, then the account's choice.
    page.context.clear_cookies()
    page.goto(f"{base}/login/")
    assert page.inner_text("h1") == "Sign in"
    owner.user.refresh_from_db()
    sign_in(page, base, owner.user)
    assert [t for t, _ in nav_labels(page)] == OWNER_NAV_ZH
    assert page.get_attribute("html", "lang") == "zh-hans"

    # And back to English, saved the same way.
    with page.expect_navigation():
        page.select_option("#language-select", "en")
    page.wait_for_selector("nav.sidebar a:has-text('Overview')")
    owner.user.refresh_from_db()
    assert owner.user.language == "en"
    assert errors == []


def test_the_sign_in_page_switches_language_before_signing_in(live_server, owner, browser_page):
    page, errors = browser_page
    base = live_server.url
    page.goto(f"{base}/login/")
    assert page.inner_text("h1") == "Sign in"
    with page.expect_navigation():
        page.select_option("#language-select", "zh-hans")
    assert page.url == f"{base}/login/"
    assert page.inner_text("h1") == "登录"
    assert page.inner_text("button[type=submit]") == "登录"
    # A user who never chose keeps what the sign-in page was switched to.
    sign_in(page, base, owner.user)
    assert [t for t, _ in nav_labels(page)] == OWNER_NAV_ZH
    owner.user.refresh_from_db()
    assert owner.user.language == "zh-hans"
    assert errors == []


HAN_RE = r"[\u4e00-\u9fff]"


def _calls(org) -> str:
    """Recent calls (the charts draw traces) and calls last month; the
    month's period."""
    from datetime import UTC, timedelta

    from django.utils import timezone

    from accounts.actors import Actor
    from accounts.models import Membership
    from tests.factories import issue_key
    from tests.usage.factories import event
    from usage.ingest import ingest_events
    from usage.seed import seed_catalog

    seed_catalog()
    owner = Membership.objects.filter(organization=org, role="owner").first()
    key, _ = issue_key(Actor(owner), name="zh-walk")
    now = timezone.now()
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last_month = (first - timedelta(days=1)).replace(day=10, hour=12, tzinfo=UTC)
    ingest_events(
        [event(key, started_at=now - timedelta(hours=h)) for h in (1, 2, 4)]
        + [event(key, started_at=last_month + timedelta(minutes=m)) for m in (1, 2)]
    )
    return f"{last_month:%Y-%m}"


def test_every_page_and_the_invoice_pdf_read_in_chinese(live_server, owner, browser_page, settings):
    import re

    import pypdfium2 as pdfium

    from invoicing.services import invoice_draft, invoice_finalize
    from usage.ingest.directory import invalidate_directory
    from usage.prices import invalidate_price_book

    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    invalidate_price_book()
    invalidate_directory()
    period = _calls(owner.organization)
    owner.organization.name = "示例科技"
    owner.organization.save(update_fields=["name"])
    owner.user.language = "zh-hans"
    owner.user.save(update_fields=["language"])
    page, errors = browser_page
    base = live_server.url
    sign_in(page, base, owner.user)

    links = nav_labels(page)
    assert [t for t, _ in links] == OWNER_NAV_ZH
    for label, href in links:
        page.goto(f"{base}{href}")
        page.wait_for_load_state("networkidle")
        heading = page.inner_text("main h1")
        assert re.search(HAN_RE, heading), f"{href}: heading {heading!r}"
        body = page.inner_text("main")
        han = len(re.findall(HAN_RE, body))
        assert han >= 10, f"{label} {href}: {han} Chinese characters in {body[:300]!r}"
        # Charts drawn in the browser: legends and axis titles in Chinese.
        for text in page.eval_on_selector_all(
            ".plot .legendtext, .plot .g-ytitle text, .plot .g-xtitle text, .plot .gtitle",
            "els => els.map(e => e.textContent)",
        ):
            if re.search(r"[A-Za-z]{4,}\s+[A-Za-z]{4,}", text):
                raise AssertionError(f"{href}: chart text in English {text!r}")

    # The organization's invoices in Chinese (Billing → balance → billing settings), then
    # last month's invoice, finalized, downloaded from its page.
    page.goto(f"{base}/billing/balance/")
    page.select_option("#profile-form select[name=document_language]", "zh-hans")
    with page.expect_navigation():
        page.click("#profile-form button[type=submit]")
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=owner.organization_id, period=period).pk
    )
    page.goto(f"{base}/billing/invoices/{invoice.pk}/")
    assert "下载 PDF" in page.inner_text("#pdf-link")
    with page.expect_download() as download:
        page.click("#pdf-link")
    pdf = pdfium.PdfDocument(download.value.path())
    text = "".join(p.get_textpage().get_text_range() for p in pdf)
    for label in ("发票", "销售方", "购买方", "应付金额", "示例科技"):
        assert label in text, (label, text)
    invalidate_price_book()
    invalidate_directory()
    assert errors == []
