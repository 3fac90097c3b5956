# ruff: noqa: RUF001 - Chinese text keeps its full-width punctuation
"""Invoice and credit-note PDFs in the buyer's document language (issue 18):
the organization chooses it in its billing settings; the stored PDF made at
finalization, a draft's preview and the credit notes print every label in
Chinese, with the amounts exactly as ``console.kernel.money`` formats them in that
locale, and the header blocks still apart on the rendered page. Whoever
downloads it, in whatever console language, gets the same document."""

from __future__ import annotations

import pypdfium2 as pdfium
import pytest
from django.urls import reverse
from django.utils import translation

from accounts.models import Role
from console.kernel.money import format_amount
from invoicing.models import BillingProfile, DocumentLanguage
from invoicing.pdf import credit_note_pdf, invoice_pdf
from invoicing.pdf.parts import MINUS, local_date
from invoicing.services import credit_note_create, invoice_draft, invoice_finalize
from tests.invoicing.pages import as_member
from tests.invoicing.pdf_text import SELLER, assert_apart, flat, header_blocks, pages

pytestmark = pytest.mark.django_db

BUYER = "上海示例科技有限公司"


def in_zh(fn, *args):
    """``fn(*args)`` with Chinese active: how the PDF formats an amount."""
    with translation.override("zh-hans"):
        return fn(*args)


def zh_minor(amount_minor: int, currency: str) -> str:
    from invoicing.money import from_minor

    return in_zh(format_amount, from_minor(amount_minor, currency), currency)


@pytest.fixture
def chinese_profile(org, seller):
    return BillingProfile.objects.update_or_create(
        organization=org,
        defaults={
            "legal_name": BUYER,
            "address": "上海市浦东新区世纪大道100号\nSuite 1",
            "tax_id": "91310000MA1FL4XQ3K",
            "billing_email": "ap@buyer.example",
            "tax_rate_ppm": 60_000,
            "invoice_discount_ppm": 50_000,
            "document_language": DocumentLanguage.ZH_HANS,
        },
    )[0]


def test_a_chinese_invoice_prints_chinese_labels_and_every_amount(
    org, month_calls, chinese_profile, members, actor_for
):
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    cur = invoice.currency
    assert invoice.buyer["language"] == "zh-hans"
    # The PDF stored at finalization is the Chinese one.
    text = flat("\n".join(pages(bytes(invoice.pdf))))
    for label in (
        "发票", "发票号", "开具日期", "到期日", "账期", "币种", "销售方", "购买方", "说明",
        "数量（Token）", "单价（每百万 Token）", "金额", "输入 Token", "输出 Token", "小计",
        "折扣 5 %", "税额", "合计", "应付金额", "付款", "状态：已开具", "税号：DE123456789",
        "税号：91310000MA1FL4XQ3K", "（自然月，时区 Europe/Berlin）",
    ):  # fmt: skip
        assert label in text, label
    for amount in (
        in_zh(format_amount, invoice.subtotal, cur),
        in_zh(format_amount, invoice.total, cur),
        in_zh(format_amount, invoice.tax_amount, cur),
        f"{MINUS}{in_zh(format_amount, invoice.discount_amount, cur)}",
        zh_minor(invoice.amount_due_minor, cur),
    ):
        assert amount in text, amount
    assert f"应付金额 {zh_minor(invoice.amount_due_minor, cur)}" in text
    due = local_date(invoice.due_at, org.timezone)
    assert f"请于 {due} 前支付 {zh_minor(invoice.amount_due_minor, cur)}" in text
    assert invoice.number in text and BUYER in text
    for english in ("Invoice number", "Amount due", "Subtotal", "Bill to", "Tax ID", "Page"):
        assert english not in text, english
    assert "???" not in text

    # The credit note speaks the invoice's language.
    note = credit_note_create(
        invoice_id=invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        amount=1_234_567,
        reason="延迟超过约定水平",
    )
    note_text = flat("\n".join(pages(credit_note_pdf(note))))
    for label in ("贷记单", "贷记单号", f"冲减发票 {invoice.number}", "贷记总额", "冲减应付金额",
                  "原因", "延迟超过约定水平"):  # fmt: skip
        assert label in note_text, label
    assert zh_minor(note.amount_minor, cur) in note_text
    invoice.refresh_from_db()
    again = flat("\n".join(pages(invoice_pdf(invoice))))
    assert "贷记单" in again and note.number in again and "已收付款" not in again


def test_the_chinese_header_blocks_do_not_overlap(org, month_calls, chinese_profile):
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    textpage = pdfium.PdfDocument(bytes(invoice.pdf))[0].get_textpage()
    issued = local_date(invoice.issued_at, org.timezone)
    blocks = header_blocks(
        textpage,
        title="发票",
        status="状态：已开具",
        number_and_dates=[
            "发票号",
            invoice.number,
            "开具日期",
            issued,
            "到期日",
            "2025-03（自然月，时区 Europe/Berlin）",
        ],
        seller=[SELLER["name"], "Friedrichstraße 1", "税号：DE123456789"],
        buyer=[BUYER, "Suite 1", "税号：91310000MA1FL4XQ3K"],
    )
    assert_apart(blocks)


def test_a_long_chinese_draft_numbers_its_pages_in_chinese(
    org, month_calls, chinese_profile, add_model_lines
):
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    add_model_lines(draft)
    texts = pages(invoice_pdf(draft))
    assert len(texts) >= 3
    for number, text in enumerate(texts, start=1):
        assert f"第 {number} 页，共 {len(texts)} 页" in flat(text)
        assert "草稿" in text
    for text in texts[1:-1]:
        assert "数量（Token）" in text and "（续）" in text
    first = flat(texts[0])
    assert "发票草稿" in first and "草稿 · 尚未开具，无需付款" in first and "开具时分配" in first
    assert "并非付款请求" in flat("\n".join(texts)) and "请于" not in flat("\n".join(texts))
    assert "1,000,079" in flat("\n".join(texts))


def test_the_language_is_the_organizations_not_the_readers(
    client, org, month_calls, chinese_profile, members
):
    """A console user reading in English downloads the Chinese document, and
    an English organization's PDF stays English for a Chinese reader."""
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    c = as_member(client, members[Role.FINANCE])
    url = reverse("invoicing:invoice_pdf", args=[draft.pk])
    chinese = flat(pages(c.get(url, HTTP_ACCEPT_LANGUAGE="en").content)[0])
    assert "发票草稿" in chinese and "Draft invoice" not in chinese
    BillingProfile.objects.filter(pk=chinese_profile.pk).update(document_language="en")
    english = flat(pages(c.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content)[0])
    assert "Draft invoice" in english and "发票草稿" not in english


def test_a_finalized_invoice_keeps_its_language(org, month_calls, chinese_profile, members,
                                               actor_for):  # fmt: skip
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    BillingProfile.objects.filter(pk=chinese_profile.pk).update(document_language="en")
    note = credit_note_create(
        invoice_id=invoice.pk, actor=actor_for(members[Role.FINANCE]), amount=1_000_000,
        reason="SLA",
    )  # fmt: skip
    assert "贷记单" in flat(pages(credit_note_pdf(note))[0])
    assert "应付金额" in flat(pages(invoice_pdf(invoice))[0])


def test_the_billing_settings_choose_the_document_language(client, members, org):
    c = as_member(client, members[Role.FINANCE])
    page = c.get("/billing/balance/").content.decode()
    assert 'name="document_language"' in page and "简体中文" in page
    url = reverse("invoicing:billing_settings")
    response = c.post(url, {"legal_name": "Acme", "document_language": "fr"})
    assert response.status_code == 200
    assert c.post(url, {"legal_name": "Acme", "document_language": "zh-hans"}).status_code == 302
    assert BillingProfile.objects.get(organization=org).document_language == "zh-hans"
    # A form posted without the field keeps the language set.
    assert c.post(url, {"legal_name": "Acme SE"}).status_code == 302
    assert BillingProfile.objects.get(organization=org).document_language == "zh-hans"


def test_the_language_field_reads_in_chinese(client, members, org, settings):
    c = as_member(client, members[Role.FINANCE])
    c.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    page = c.get("/billing/balance/").content.decode()
    assert "发票语言" in page and "发票和贷记单 PDF 使用的语言。" in page
    assert "Invoice language" not in page
