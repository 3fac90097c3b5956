"""The accounts pages in Simplified Chinese (issue 18): a member who chose
简体中文 reads the key list, the new-key form (its errors too, the form's and
the services'), sub-accounts, members, settings and the flash messages in
Chinese, and gets the password-reset e-mail in Chinese whatever the browser
that asked for it; a member who did not still reads English."""

# ruff: noqa: RUF001 - Chinese text has full-width punctuation.
from __future__ import annotations

import pytest
from django.core import mail
from django.urls import reverse

from tests.factories import issue_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def zh_owner(owner):
    owner.user.language = "zh-hans"
    owner.user.save(update_fields=["language"])
    return owner


@pytest.fixture
def zh_client(client, zh_owner):
    client.force_login(zh_owner.user)
    return client


@pytest.fixture
def en_client(client, owner):
    client.force_login(owner.user)
    return client


def page(client, name: str, *args, **params) -> str:
    response = client.get(reverse(f"accounts:{name}", args=args), params)
    assert response.status_code == 200
    return response.content.decode()


# --- Chinese ------------------------------------------------------------------------------


def test_the_key_list_reads_chinese(zh_client, zh_owner, actor_for):
    key, _raw = issue_key(actor_for(zh_owner), "backend", spend_cap_daily=5_000_000)
    html = page(zh_client, "api_keys")
    assert "<title>API 密钥" in html
    assert ">新建密钥</a>" in html
    assert "<th>子账户 · 所有者</th>" in html and "<th>最近使用</th>" in html
    assert '<span class="badge active">有效</span>' in html
    assert 'data-period="today"' in html and '<span class="spend-period">今日</span>' in html
    assert ">吊销</button>" in html and ">轮换</a>" in html
    assert 'data-confirm="吊销密钥“backend”？' in html
    for english in ("New key", "Last used", "Revoke", "never", "Show:"):
        assert english not in html, english
    detail = page(zh_client, "api_key_detail", key.pk)
    assert "消费与上限" in detail and ">轮换密钥</a>" in detail and "每日消费上限" in detail


def test_the_new_key_form_and_its_errors_read_chinese(zh_client):
    html = page(zh_client, "api_key_create")
    assert "<h2>新建 API 密钥</h2>" in html
    assert ">每日消费上限</label>" in html and ">IP 允许列表</label>" in html
    assert 'placeholder="无上限"' in html
    assert "— 无（整个组织） —" in html
    assert ">创建密钥</button>" in html
    assert ">普通</option>" in html  # the priority choices
    # A value the form refuses, and values only the services refuse.
    response = zh_client.post(
        reverse("accounts:api_key_create"),
        {"name": "k1", "priority": "normal", "spend_cap_daily": "abc"},
    )
    html = response.content.decode()
    assert "“abc”不是有效金额，请输入数字，例如 25 或 12.50。" in html
    assert "is not an amount" not in html
    response = zh_client.post(
        reverse("accounts:api_key_create"),
        {"name": "k1", "priority": "normal", "rpm_limit": "0", "ip_allowlist": "nope"},
    )
    html = response.content.decode()
    assert "每分钟请求数至少为 1（留空表示不限制）。" in html
    assert "&#x27;nope&#x27; 不是有效的 IP 地址或 CIDR 网段。" in html


def test_revoking_a_key_flashes_chinese(zh_client, zh_owner, actor_for):
    key, _raw = issue_key(actor_for(zh_owner), "old-one")
    response = zh_client.post(reverse("accounts:api_key_revoke", args=[key.pk]), follow=True)
    html = response.content.decode()
    assert f"密钥“old-one”（{key.prefix}…）已吊销。" in html
    assert '<span class="badge revoked">已吊销</span>' in page(zh_client, "api_keys")


def test_sub_accounts_read_chinese(zh_client, sub):
    html = page(zh_client, "sub_accounts")
    assert "<h1>子账户</h1>" in html
    assert "<th>上限（每日 / 每月 / 累计）</th>" in html
    assert '<span class="badge active">有效</span>' in html
    assert "<h2>新建子账户</h2>" in html and ">创建子账户</button>" in html
    assert ">有效</option>" in html and ">已暂停</option>" in html
    # A clash the service finds, in Chinese.
    response = zh_client.post(
        reverse("accounts:sub_accounts"), {"name": "team-a", "status": "active"}
    )
    assert "名为“team-a”的子账户已存在。" in response.content.decode()
    detail = page(zh_client, "sub_account_detail", sub.pk)
    assert ">保存成员</button>" in detail and "此子账户下暂无密钥。" in detail


def test_members_and_invitations_read_chinese(zh_client, zh_owner, developer):
    html = page(zh_client, "members")
    assert "<h1>成员</h1>" in html and "<h2>邀请成员</h2>" in html
    assert "<th>加入时间</th>" in html and ">发送邀请</button>" in html
    assert ">开发者</option>" in html and ">移除…</a>" in html
    response = zh_client.post(
        reverse("accounts:members"),
        {"email": developer.user.email, "role": "viewer"},
    )
    assert f"{developer.user.email} 已是成员。" in response.content.decode()
    response = zh_client.post(
        reverse("accounts:members"), {"email": "new@example.com", "role": "viewer"}, follow=True
    )
    html = response.content.decode()
    assert "邀请已发送至 new@example.com。" in html
    assert '<span class="badge pending">待接受</span>' in html and ">撤回</button>" in html
    remove = page(zh_client, "member_remove", developer.pk)
    assert f"将 {developer.user.email} 移出 Acme" in remove


def test_settings_read_chinese(zh_client):
    html = page(zh_client, "organization_settings")
    assert "<h1>组织设置</h1>" in html
    assert ">时区</label>" in html and ">开发者密钥默认上限</label>" in html
    assert '<optgroup label="常用时区">' in html
    assert ">保存</button>" in html
    response = zh_client.post(
        reverse("accounts:organization_settings"),
        {"name": "Acme", "timezone": "Asia/Shanghai", "developer_key_cap": "1.1234567"},
    )
    assert "金额最多保留六位小数。" in response.content.decode()
    response = zh_client.post(
        reverse("accounts:organization_settings"),
        {"name": "Acme", "timezone": "Asia/Shanghai", "developer_key_cap": ""},
        follow=True,
    )
    assert "设置已保存。" in response.content.decode()


def test_the_password_reset_email_is_in_the_accounts_language(client, zh_owner):
    # Asked for from a browser that reads English: the e-mail follows the account.
    response = client.post(
        reverse("accounts:password_reset"),
        {"email": zh_owner.user.email},
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert response.status_code == 302
    [message] = mail.outbox
    assert message.subject == "重置您的 Token Console 密码"
    assert f"有人请求重置 Token Console 账户 {zh_owner.user.email} 的密码。" in message.body
    assert "/password/reset/" in message.body
    assert "Someone asked" not in message.body


def test_the_reset_pages_read_chinese_to_a_chinese_browser(client):
    html = client.get(reverse("accounts:password_reset"), HTTP_ACCEPT_LANGUAGE="zh-hans")
    html = html.content.decode()
    assert "<h1>重置密码</h1>" in html and ">发送链接</button>" in html
    assert ">电子邮件</label>" in html or "电子邮件" in html


# --- English stays English -------------------------------------------------------------


def test_an_english_member_still_reads_english(en_client, owner, actor_for, sub):
    issue_key(actor_for(owner), "backend")
    html = page(en_client, "api_keys")
    assert ">New key</a>" in html and "<th>Last used</th>" in html
    assert '<span class="badge active">active</span>' in html
    response = en_client.post(
        reverse("accounts:api_key_create"),
        {"name": "k1", "priority": "normal", "spend_cap_daily": "abc"},
    )
    assert "&#x27;abc&#x27; is not an amount" in response.content.decode()
    assert "<h1>Sub-accounts</h1>" in page(en_client, "sub_accounts")
    assert "<h2>Invite someone</h2>" in page(en_client, "members")
    settings_html = page(en_client, "organization_settings")
    assert "<h1>Organization settings</h1>" in settings_html
    assert '<optgroup label="Common">' in settings_html
    for chinese in ("密钥", "子账户", "成员", "设置"):
        assert chinese not in html, chinese


def test_an_english_account_gets_an_english_reset_email(client, owner):
    client.post(reverse("accounts:password_reset"), {"email": owner.user.email})
    [message] = mail.outbox
    assert message.subject == "Reset your Token Console password"
    assert "Someone asked to reset the password" in message.body


def test_the_invitation_email_follows_the_inviters_language(zh_owner, actor_for):
    from accounts.services import invitation_create
    from accounts.tasks import send_invitation_email
    from console.kernel import crypto

    invitation, raw = invitation_create(
        actor=actor_for(zh_owner), email="xin@example.com", role="viewer"
    )
    send_invitation_email(invitation.pk, crypto.seal(raw))
    [message] = mail.outbox
    assert message.subject == "您受邀加入 Acme"
    assert "邀请您以查看者身份加入 Acme。" in message.body
    assert f"/invite/{raw}/" in message.body
