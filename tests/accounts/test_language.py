"""The console's language (issue 18): the switcher sets it for the browser
and saves a signed-in user's choice on their account, which then wins at
every sign-in; money keeps its currency code in Chinese."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-enough-pass-phrase-7"


def switch(client, language: str, next_url: str = "/"):
    return client.post(reverse("accounts:set_language"), {"language": language, "next": next_url})


def sign_in(client, user):
    user.set_password(PASSWORD)
    user.save()
    return client.post(reverse("accounts:login"), {"username": user.email, "password": PASSWORD})


def test_switching_saves_the_signed_in_users_language(client, owner):
    client.force_login(owner.user)
    r = switch(client, "zh-hans", "/keys/")
    assert r.status_code == 302 and r["Location"] == "/keys/"
    owner.user.refresh_from_db()
    assert owner.user.language == "zh-hans"
    html = client.get("/").content.decode()
    assert '<html lang="zh-hans">' in html
    assert ">概览</a>" in html and ">退出登录</button>" in html
    assert 'value="zh-hans" lang="zh-hans" selected' in html


def test_an_unknown_language_is_refused_and_not_saved(client, owner):
    client.force_login(owner.user)
    switch(client, "xx")
    owner.user.refresh_from_db()
    assert owner.user.language == ""
    assert ">Overview</a>" in client.get("/").content.decode()


def test_the_accounts_language_wins_over_the_browsers_at_sign_in(client, owner):
    owner.user.language = "zh-hans"
    owner.user.save()
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "en"
    r = sign_in(client, owner.user)
    assert r.status_code == 302
    assert r.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    html = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert ">概览</a>" in html


def test_signing_out_keeps_the_language_for_the_sign_in_page(client, owner):
    client.force_login(owner.user)
    switch(client, "zh-hans")
    client.post(reverse("accounts:logout"))
    html = client.get(reverse("accounts:login")).content.decode()
    assert "<h1>登录</h1>" in html and "忘记密码？" in html  # noqa: RUF001 (Chinese punctuation)


def test_a_visitors_choice_becomes_the_accounts_when_it_has_none(client, owner):
    r = switch(client, "zh-hans", reverse("accounts:login"))
    assert r.status_code == 302
    assert "<h1>登录</h1>" in client.get(reverse("accounts:login")).content.decode()
    sign_in(client, owner.user)
    owner.user.refresh_from_db()
    assert owner.user.language == "zh-hans"


def test_the_browsers_language_is_used_until_one_is_chosen(client, owner):
    client.force_login(owner.user)
    html = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content.decode()
    assert ">概览</a>" in html
    owner.user.refresh_from_db()
    assert owner.user.language == ""  # following the browser is not a choice


def test_error_pages_and_overview_tiles_in_chinese(client, owner):
    client.force_login(owner.user)
    switch(client, "zh-hans")
    r = client.get("/no-such-page/")
    assert r.status_code == 404 and "<h1>未找到</h1>" in r.content.decode()
    html = client.get("/").content.decode()
    assert '<span class="tile-label">成员</span>' in html
    assert "您的角色：" in html  # noqa: RUF001 (Chinese punctuation)


def test_money_keeps_its_currency_code_in_chinese():
    from django.utils import translation

    from console.kernel.money import current_locale, format_amount

    with translation.override("zh-hans"):
        assert current_locale() == "zh_Hans"
        assert format_amount(1_234_567_890_000, "USD") == "1,234,567.89 USD"
        assert format_amount(1_234_567_890_000, "CNY") == "1,234,567.89 CNY"
        assert format_amount(1_234_500_000, "JPY") == "1,235 JPY"


def test_the_overview_usage_charts_in_chinese(client, owner):
    client.force_login(owner.user)
    switch(client, "zh-hans")
    kpis = client.get(reverse("analytics:chart_overview_kpis")).content.decode()
    assert "<h2>今日及本月用量</h2>" in kpis and "本月暂无调用。" in kpis
    top = client.get(reverse("analytics:chart_overview_top")).content.decode()
    assert "<h2>本月消费最高的模型与密钥</h2>" in top


def test_a_member_who_must_set_up_two_factor_can_still_switch_language(client, owner):
    owner.organization.require_two_factor = True
    owner.organization.save()
    client.force_login(owner.user)
    assert client.get("/").status_code == 302  # sent to set up a second factor
    r = switch(client, "zh-hans", reverse("accounts:two_factor"))
    assert r.status_code == 302 and r["Location"] == reverse("accounts:two_factor")
    owner.user.refresh_from_db()
    assert owner.user.language == "zh-hans"
    assert '<html lang="zh-hans">' in client.get(reverse("accounts:two_factor")).content.decode()


def test_roles_and_billing_modes_read_in_chinese_in_the_frame(client, owner):
    client.force_login(owner.user)
    switch(client, "zh-hans")
    html = client.get("/").content.decode()
    assert f"{owner.organization.name} (所有者)</option>" in html
    assert "您的角色：所有者" in html  # noqa: RUF001 (Chinese punctuation)
    assert ("后付费" in html) or ("预付费" in html)


def test_the_rest_api_answers_in_english_whatever_the_client_asks(client):
    r = client.get("/api/v1/keys/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9")
    assert r.status_code in (401, 403)
    assert r["Content-Language"] == "en"
    body = r.content.decode()
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in body), body
