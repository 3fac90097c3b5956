# ruff: noqa: RUF001 - Chinese text is written with its full-width punctuation
"""The finance console in Simplified Chinese (issue 18): a finance user who
chose 简体中文 reads the invoice list, an invoice, the balance page, a credit
note's preview and the forms' errors in Chinese; the low-balance e-mail is
written in each recipient's own saved language (so a Chinese owner gets it
in Chinese while an English finance member of the same organization gets
it in English); a user who kept English still sees English."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from accounts.models import Role
from invoicing.models import BillingProfile
from invoicing.services.ledger import low_balance_check
from tests.invoicing.pages import as_member, html

pytestmark = pytest.mark.django_db

USD = 1_000_000  # micro-units


def speaks(membership, language: str):
    membership.user.language = language
    membership.user.save(update_fields=["language"])
    return membership


def visible_text(page: str) -> str:
    """The page's words as a reader sees them (no tags, scripts or styles)."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


@pytest.fixture
def zh_finance(client, members):
    return as_member(client, speaks(members[Role.FINANCE], "zh-hans"))


def test_the_invoice_list_in_chinese(zh_finance, finalized):
    page = html(zh_finance.get("/billing/invoices/"))
    text = visible_text(page)
    for chinese in ("发票", "余额与流水", "付款方式", "编号", "账期", "小计", "总计", "应付",
                    "已冲减", "筛选", "重置", "立即生成月度草稿", "合计，USD 发票 1 张"):  # fmt: skip
        assert chinese in text, chinese
    assert "已定稿" in text  # the status badge
    assert "<option" in page and "账期，最新优先" in page  # the sort choices
    for english in ("Invoices", "Balance &amp; ledger", "Subtotal", "Draft a month now",
                    "Filter", "sorted by", "Finalized", "Total − Credited"):  # fmt: skip
        assert english not in text, english


def test_an_invoice_in_chinese(zh_finance, finalized):
    text = visible_text(html(zh_finance.get(f"/billing/invoices/{finalized.pk}/")))
    assert f"发票 {finalized.number}" in text
    assert "· 输入 Token" in text and "· 输出 Token" in text  # usage lines worded again
    for chinese in ("付款状态", "待付款", "打印页面", "下载 PDF", "描述", "每百万 Token 单价",
                    "应付金额", "操作", "开具贷记单…", "记录付款…", "暂无贷记单。", "暂无付款。",
                    "历史"):  # fmt: skip
        assert chinese in text, chinese
    for english in ("Payment status", "Printable page", "Amount due", "Credit notes",
                    "No payments.", "Issue a credit note"):  # fmt: skip
        assert english not in text, english


def test_the_balance_page_in_chinese(zh_finance, prepaid):
    posted = zh_finance.post(
        "/billing/top-up/",
        {"action": "manual", "manual-amount": "5", "manual-reference": "TR-9"},
    )
    assert "已记录银行转账 TR-9" in visible_text(html(zh_finance.get(posted.url)))
    text = visible_text(html(zh_finance.get("/billing/balance/")))
    assert "银行转账充值 TR-9" in text  # the ledger's own reason, worded again
    for chinese in ("余额与流水", "预付费余额", "余额不足提醒", "流水", "充值", "赠送或调整",
                    "账单设置", "保存设置", "法定名称", "账单邮箱"):  # fmt: skip
        assert chinese in text, chinese
    for english in ("Prepaid balance", "Ledger", "No movements yet", "Billing settings",
                    "Save settings", "Legal name"):  # fmt: skip
        assert english not in text, english


def test_a_credit_note_preview_in_chinese(zh_finance, finalized):
    url = f"/billing/invoices/{finalized.pk}/credit-notes/new/"
    form = visible_text(html(zh_finance.get(url)))
    assert "冲减内容" in form and "指定金额（含税）" in form and "预览贷记单" in form
    response = zh_finance.post(url, {"mode": "amount", "amount": "0.50", "reason": "慢"})
    page = html(response)
    assert 'id="credit-note-confirm"' in page
    text = visible_text(page)
    for chinese in ("核对贷记单", "尚未冲减任何金额", "贷记单总计", "当前应付金额",
                    "开具后应付金额", "效果", "减少应付金额；不退款。", "开具贷记单", "更改"):  # fmt: skip
        assert chinese in text, chinese
    table = re.search(r'<table id="preview-lines">.*?</table>', page, re.S).group(0)
    assert "冲减" in visible_text(table) and "Credit" not in visible_text(table)
    for english in ("Review the", "Nothing is credited yet", "Amount due now",
                    "Issue the credit note"):  # fmt: skip
        assert english not in text, english
    # A form error too: more than the invoice's total.
    refused = visible_text(
        html(zh_finance.post(url, {"mode": "amount", "amount": "999999", "reason": "x"}))
    )
    assert "超出了剩余可冲减的" in refused


def test_a_duplicate_payment_reference_is_refused_in_chinese(zh_finance, finalized):
    url = f"/billing/invoices/{finalized.pk}/payment/"
    data = {"method": "bank_transfer", "reference": "TR-中-1", "amount": "1.00"}
    first = zh_finance.post(url, data)
    assert first.status_code == 302
    # The flash message on the invoice it leads to.
    assert "已记录付款 TR-中-1" in visible_text(html(zh_finance.get(first.url)))
    again = zh_finance.post(url, data)
    assert again.status_code == 200
    text = visible_text(html(again))
    assert "参考号 TR-中-1 已被记录" in text and "一笔发票付款" in text
    assert "本次未重复记录" in text
    assert "already recorded" not in text
    # The form's own labels and errors.
    empty = visible_text(html(zh_finance.post(url, {"method": "bank_transfer", "reference": ""})))
    assert "参考号" in empty and "到账日期" in empty and "该字段是必填项。" in empty


def test_the_low_balance_mail_is_in_each_recipients_language(
    django_capture_on_commit_callbacks, prepaid, owner, finance
):
    """Whose language: the recipient's saved one. A Chinese owner and an
    English finance member get one mail each, each in their language."""
    speaks(owner, "zh-hans")
    BillingProfile.objects.create(organization=prepaid, low_balance_threshold=5 * USD)
    with django_capture_on_commit_callbacks(execute=True):
        assert low_balance_check(organization_id=prepaid.pk)
    by_recipient = {tuple(m.to): m for m in mail.outbox}
    assert set(by_recipient) == {(owner.user.email,), (finance.user.email,)}
    chinese = by_recipient[(owner.user.email,)]
    assert chinese.subject == f"{prepaid.name}：预付费余额不足"
    assert "已低于您设置的提醒阈值" in chinese.body and "/billing/balance/" in chinese.body
    english = by_recipient[(finance.user.email,)]
    assert english.subject == f"{prepaid.name}: prepaid balance is low"
    assert "below your threshold of" in english.body


def test_a_billing_address_gets_the_owners_language(
    django_capture_on_commit_callbacks, prepaid, owner, finance
):
    """An address that is no member's (the billing e-mail) is written to in
    the language of the organization's owner who chose one."""
    speaks(owner, "zh-hans")
    BillingProfile.objects.create(
        organization=prepaid, low_balance_threshold=5 * USD, billing_email="ap@acme.example"
    )
    with django_capture_on_commit_callbacks(execute=True):
        low_balance_check(organization_id=prepaid.pk)
    [sent] = mail.outbox
    assert sent.to == ["ap@acme.example"] and "预付费余额不足" in sent.subject


def test_an_english_user_still_sees_english(client, members, finalized):
    c = as_member(client, speaks(members[Role.FINANCE], "en"))
    listing = visible_text(html(c.get("/billing/invoices/")))
    assert "Invoices" in listing and "Draft a month now" in listing and "发票" not in listing
    detail = visible_text(html(c.get(f"/billing/invoices/{finalized.pk}/")))
    assert "Payment status" in detail and "付款状态" not in detail
    assert "· input tokens" in detail
    balance = visible_text(html(c.get("/billing/balance/")))
    assert "Prepaid balance" in balance and "预付费余额" not in balance
