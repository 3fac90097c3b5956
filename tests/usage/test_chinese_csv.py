# ruff: noqa: RUF001 - Chinese text keeps its full-width punctuation
"""The call-log CSV for a user who reads the console in Chinese (issue 18):
a byte-order mark and a Chinese header row, the same data rows as the
English file; ``?header=keys`` gives the stable keys, and the REST API's
export always does, whatever language the request asks for."""

from __future__ import annotations

import csv
import io

import pytest
from django.conf import settings

from accounts.models import Role
from tests.usage.log_fixtures import mixed_calls, tenant
from usage import call_csv

pytestmark = pytest.mark.django_db
EXPORT = "/usage/calls/export.csv"


@pytest.fixture
def a():
    t = tenant("Acme", "acme", timezone="Europe/Berlin")
    mixed_calls(t)
    return t


def download(client, t, url=EXPORT, *, language="", **params) -> list[list[str]]:
    user = t.members[Role.OWNER].user
    user.language = language
    user.save(update_fields=["language"])
    client.force_login(user)
    client.cookies.pop(settings.LANGUAGE_COOKIE_NAME, None)  # the saved choice decides
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:300]
    raw = b"".join(response.streaming_content)
    assert raw.startswith(b"\xef\xbb\xbf")  # Excel reads the file as UTF-8
    return list(csv.reader(io.StringIO(raw.decode("utf-8-sig"))))


def test_a_chinese_download_has_a_chinese_header_and_the_same_rows(client, a):
    english = download(client, a)
    chinese = download(client, a, language="zh-hans")
    assert english[0] == list(call_csv.CSV_COLUMNS)
    assert chinese[0][:4] == ["请求 ID", "开始时间", "结束时间", "API 密钥前缀"]
    assert "费用" in chinese[0] and "首字延迟（ms）" in chinese[0] and "客户端 IP" in chinese[0]
    assert len(chinese[0]) == len(english[0])
    # Every column has its label: no key is left in the Chinese header.
    assert not set(chinese[0]) & set(call_csv.CSV_COLUMNS)
    assert chinese[1:] == english[1:] and len(english) == len(a.calls) + 1


def test_header_keys_gives_the_stable_keys(client, a):
    keys = download(client, a, language="zh-hans", header="keys")
    assert keys[0] == list(call_csv.CSV_COLUMNS)
    assert keys[1:] == download(client, a)[1:]


def test_the_api_export_keeps_its_keys_in_every_language(client, a):
    for url, params in (("/api/v1/calls/export.csv", {}), ("/api/v1/calls/", {"format": "csv"})):
        user = a.members[Role.OWNER].user
        user.language = "zh-hans"
        user.save(update_fields=["language"])
        client.force_login(user)
        response = client.get(url, params, HTTP_ACCEPT_LANGUAGE="zh-hans")
        assert response.status_code == 200
        text = b"".join(response.streaming_content).decode("utf-8-sig")
        assert text.splitlines()[0] == ",".join(call_csv.CSV_COLUMNS)
