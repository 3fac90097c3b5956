# ruff: noqa: RUF001 - Chinese text keeps its full-width punctuation
"""The finance CSV exports for a user who reads the console in Chinese
(issue 18): a Chinese header row (every column labelled, the ledger's time
column naming its zone), the same rows as in English; ``?header=keys``
gives the stable keys."""

from __future__ import annotations

import csv
import io
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import translation

from accounts.models import Role
from console.kernel.csv_header import label_for
from invoicing import exports

pytestmark = pytest.mark.django_db


def download(client, membership, name, *, language="", **params) -> list[list[str]]:
    user = membership.user
    user.language = language
    user.save(update_fields=["language"])
    client.force_login(user)
    client.cookies.pop(settings.LANGUAGE_COOKIE_NAME, None)  # the saved choice decides
    response = client.get(f"/billing/exports/{name}.csv", params)
    assert response.status_code == 200, response.content[:300]
    text = b"".join(response.streaming_content).decode("utf-8")
    assert text.startswith("\ufeff")
    return list(csv.reader(io.StringIO(text[1:])))


def test_every_export_has_a_chinese_label_for_every_column(org):
    with translation.override("zh-hans"):
        for export in exports.EXPORTS.values():
            for key in export.header(ZoneInfo("Asia/Shanghai")):
                label = label_for(key, export.labels)
                assert label != key and any("\u4e00" <= c <= "\u9fff" for c in label), key


def test_chinese_finance_exports_and_header_keys(client, members, org, finalized):
    finance = members[Role.FINANCE]
    for name in ("invoices", "invoice-lines", "ledger"):
        english = download(client, finance, name)
        chinese = download(client, finance, name, language="zh-hans")
        keys = download(client, finance, name, language="zh-hans", header="keys")
        assert english[0] == keys[0] == exports.EXPORTS[name].header(ZoneInfo(org.timezone))
        assert chinese[0] != english[0] and len(chinese[0]) == len(english[0])
        assert chinese[1:] == english[1:] == keys[1:]
    invoices = download(client, finance, "invoices", language="zh-hans")
    assert invoices[0][:4] == ["发票号", "组织", "账期", "状态"] and "应付金额" in invoices[0]
    assert len(invoices) == 2 and invoices[1][0] == finalized.number
    ledger = download(client, finance, "ledger", language="zh-hans")
    assert ledger[0][1] == f"创建时间（{org.timezone}）"
