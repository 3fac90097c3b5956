"""The overview's usage charts in Simplified Chinese (issue 18): tile titles,
periods, the cache note and the top tables' headers are Chinese on the page;
the CSV's header row is Chinese too (``?header=keys``: the stable column
keys), its data (period names included) the same as in English."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.urls import reverse

from tests.console.test_analytics_unknown_models import _ingest
from tests.console.test_analytics_views import login

pytest_plugins = ["tests.console.test_analytics_data"]

pytestmark = pytest.mark.django_db


def test_the_overview_tiles_and_top_tables_in_chinese(client, data):
    login(client, data)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    _ingest(data, datetime.now(UTC) - timedelta(minutes=10), 2, model="sim-chat-small")
    kpis = client.get(reverse("analytics:chart_overview_kpis")).content.decode()
    for text in (
        "<h3>今日</h3>",
        "<h3>本月</h3>",
        ">消费</span>",
        ">请求数</span>",
        ">错误率</span>",
    ):
        assert text in kpis, text
    assert "缓存提示词占比：" in kpis and '"name":"消费"' in kpis  # noqa: RUF001
    top = client.get(reverse("analytics:chart_overview_top")).content.decode()
    assert "<h3>消费最高的模型</h3>" in top and "<h3>消费最高的密钥</h3>" in top
    assert ">调用次数<" in top and ">模型<" in top
    url = reverse("analytics:chart_overview_kpis")
    rows = list(csv.DictReader(io.StringIO(
        client.get(url, {"format": "csv", "header": "keys"}).content.decode().lstrip("\ufeff")
    )))  # fmt: skip
    assert {r["period"] for r in rows} == {"Today", "This month"}
    chinese = client.get(url, {"format": "csv"}).content.decode()
    assert chinese.startswith("\ufeff账期,") and "Today" in chinese
    top = reverse("analytics:chart_overview_top")
    keys = client.get(top, {"format": "csv", "header": "keys"}).content.decode()
    assert "spend_" + data.org.currency in keys
    chinese_top = client.get(top, {"format": "csv"}).content.decode()
    assert f"消费（{data.org.currency}）" in chinese_top  # noqa: RUF001
