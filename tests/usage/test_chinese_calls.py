# ruff: noqa: RUF001
"""The usage app's pages in Simplified Chinese (issue 18): a member who chose
简体中文 reads the call logs (filters, headings, sort and paging links, the
live-tail switch), a filter's error, a call's detail (panel and page) and the
models & prices page in Chinese; an English member still reads English, and
the REST API's errors stay English whatever the member chose."""

from __future__ import annotations

import re

import pytest

from tests.usage.log_fixtures import login
from usage.seed import seed_catalog

pytestmark = pytest.mark.django_db

URL = "/usage/calls/"
API = "/api/v1/calls/"


def chinese(client, t):
    member = login(client, t)
    user = t.members["owner"].user
    user.language = "zh-hans"
    user.save(update_fields=["language"])
    return member


def test_the_call_logs_in_chinese(client, a):
    html = chinese(client, a).get(URL).content.decode()
    for text in (
        "<title>调用日志",
        "<h1>调用日志</h1>",
        "导出 CSV",
        "应用筛选",
        "快捷范围",
        "不限时间",
        "全部密钥",
        "全部子账户",
        "全部模型",
        "全部节点",
        "最小延迟（ms）",
        "请求 ID",
        "时间为 UTC 时区",
        "实时追踪：关",
        "按时间排序，最早的在前",
        "时间 (UTC)",
        ">密钥</th>",
        ">缓存读取</th>",
        ">首字延迟 ms</th>",
        ">客户端 IP</th>",
        "成功（400 以下）",  # the status datalist
        "未找到（404）",
    ):
        assert text in html, text
    for english in ("Call logs", "Apply filters", "Quick range", "Live tail", "Sort by time"):
        assert english not in html, english


def test_a_filter_error_in_chinese(client, a):
    html = chinese(client, a).get(URL, {"status": "teapot"}).content.decode()
    assert "请填写 ok、errors、4xx、429、5xx，或 100 到 599 之间的状态码。" in html
    html = client.get(URL, {"from": "2026-11-20T12:00", "to": "2026-11-20T11:00"}).content.decode()
    assert "时间范围的结束时间必须晚于开始时间。" in html
    html = client.get(URL, {"request_id": "a b"}).content.decode()
    assert "请求 ID 只能包含字母、数字和 . _ : -。" in html
    # A broken paging link: the hidden field's error names the field in Chinese too.
    html = client.get(URL, {"before": "not-a-cursor"}).content.decode()
    assert "此分页链接格式有误，请从第一页重新开始。" in html


def test_a_calls_detail_in_chinese(client, a):
    call = a.calls[0]
    url = f"/usage/calls/{call.request_id}/"
    page = chinese(client, a).get(url).content.decode()
    for text in ("← 调用日志", "<dt>开始时间</dt>", "<dt>输入 Token</dt>", "<dt>首字延迟</dt>",
                 "<dt>网关开销</dt>", "<dt>客户端 IP</dt>", "（计入输出）"):  # fmt: skip
        assert text in page, text
    assert "<title>调用 " in page
    panel = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "在单独页面中打开" in panel and 'aria-label="关闭（Esc）"' in panel
    assert re.search(r"<dt>缓存</dt><dd>(未命中|命中前缀缓存|命中响应缓存)</dd>", panel)
    for english in ("Started", "Input tokens", "Open as a page", "Gateway overhead"):
        assert english not in panel, english


def test_the_models_page_in_chinese(client, a):
    seed_catalog()
    html = chinese(client, a).get("/usage/models/").content.decode()
    for text in ("<h1>模型与价格</h1>", "价格为当前生效的每百万 Token 价格", ">系列</th>", ">标价<",
                 ">您的价格", ">输入</th>", ">缓存写入</th>"):  # fmt: skip
        assert text in html, text
    assert "Prices are per million tokens" not in html and ">You pay" not in html


def test_an_english_member_still_reads_english(client, a):
    login(client, a)
    html = client.get(URL, {"status": "teapot"}).content.decode()
    assert "<h1>Call logs</h1>" in html and "Apply filters" in html and "Quick range" in html
    assert "Use ok, errors, 4xx, 429, 5xx or a status code from 100 to 599." in html
    detail = client.get(f"/usage/calls/{a.calls[0].request_id}/").content.decode()
    assert "<dt>Started</dt>" in detail and "<dt>Input tokens</dt>" in detail
    seed_catalog()
    models = client.get("/usage/models/").content.decode()
    assert "<h1>Models &" in models and "You pay" in models


def test_the_api_keeps_its_english_errors_for_a_chinese_member(client, a):
    r = chinese(client, a).get(API, {"status": "teapot"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert r.status_code == 400
    assert "Use ok, errors, 4xx, 429, 5xx" in r.content.decode()
