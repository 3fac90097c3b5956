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
    "账单",
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
