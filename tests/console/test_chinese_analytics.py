# ruff: noqa: RUF001
"""The analytics pages in Simplified Chinese (issue 18): a member who chose
简体中文 reads every page (tabs, intro, filter labels and choices, range
text, notes) and every chart partial in Chinese: the chart's title, its
figure's axis titles, legend names and hover labels, the notes under it
(the partial-bucket mark, the engine versus billed cache explanation), its
empty state and a filter's error. The staff margin report too. An English
member still reads English, and the CSVs keep their English column names."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from accounts.models import Role
from console.features.analytics.views import CHARTS, PAGES
from tests.console.test_analytics_data import RANGE
from tests.console.test_analytics_unknown_models import _ingest
from tests.console.test_analytics_views import login
from tests.factories import UserFactory

pytest_plugins = ["tests.console.test_analytics_data"]

pytestmark = pytest.mark.django_db

HAN = re.compile(r"[\u4e00-\u9fff]")
# Latin a Chinese console keeps, and the units and identifiers charts show.
KEPT = {"api", "token", "utc", "ttft", "ms", "kv", "csv", "all", "usd", "eur"}
WORD = re.compile(r"[A-Za-z]{3,}")


def chinese(client, data, role=Role.OWNER):
    login(client, data, role)
    user = data.members[role].user
    user.language = "zh-hans"
    user.save(update_fields=["language"])
    return client


def figures(html: str) -> list[dict]:
    return [
        json.loads(m)
        for m in re.findall(
            r'<script type="application/json" class="js-figure"[^>]*>(.*?)</script>', html, re.S
        )
    ]


def figure_words(fig: dict, data_names: set[str]) -> list[str]:
    """The English words of a figure's texts: trace names, hover labels, axis
    titles and annotations (data, such as model and key names, left out)."""
    texts = []
    for trace in fig["data"]:
        texts += [trace.get("name") or "", trace.get("hovertemplate") or ""]
    layout = fig["layout"]
    for axis in ("xaxis", "yaxis"):
        texts.append(((layout.get(axis) or {}).get("title") or {}).get("text") or "")
    texts += [a.get("text", "") for a in layout.get("annotations", [])]
    words = []
    for text in texts:
        text = re.sub(r"%\{[^}]*\}|<[^>]+>", " ", text)
        if text.strip() in data_names:
            continue
        words += [w for w in WORD.findall(text) if w.lower() not in KEPT]
    return words


def data_names(data) -> set[str]:
    from accounts.models import ApiKey, SubAccount
    from inference_node.models import Node
    from usage.models import CatalogModel

    names = set(CatalogModel.objects.values_list("name", flat=True))
    names |= {
        f"{k.name} ({k.public_id[:10]})" for k in ApiKey.objects.filter(organization=data.org)
    }
    names |= set(SubAccount.objects.filter(organization=data.org).values_list("name", flat=True))
    names |= set(Node.objects.values_list("name", flat=True))
    return names


def test_every_analytics_page_in_chinese(client, data):
    chinese(client, data)
    titles = {"latency": "延迟", "cache": "缓存", "spend": "消费", "errors": "错误", "nodes": "节点",
              "billing": "账单"}  # fmt: skip
    for name in PAGES:
        html = client.get(reverse(f"analytics:{name}"), RANGE).content.decode()
        title = titles.get(name)
        if title:
            assert f"<h1>{title}</h1>" in html, name
        for text in ("应用", "重置", "时间范围", "开始时间", "结束时间", "自定义范围", "（UTC），按",
                     "时间为 UTC 时区", "正在加载图表…", 'data-chart-error="无法加载此图表'):  # fmt: skip
            assert text in html, (name, text)
        for english in ("Time range", "Apply", "Loading chart", "Custom range", ", per "):
            assert english not in html, (name, english)
    latency = client.get(reverse("analytics:latency"), {**RANGE, "protocol": "openai"})
    html = latency.content.decode()
    assert "对比维度" in html and "不对比（全部调用）" in html and "对比分位数" in html
    assert "协议与流式输出仅在开始记录之后的调用中可知" in html
    spend = client.get(reverse("analytics:spend"), RANGE).content.decode()
    assert "消费堆叠维度" in spend and "全部协议" in spend and "流式与非流式" in spend


def test_every_chart_partial_in_chinese(client, data):
    chinese(client, data)
    names = data_names(data)
    for name, spec in CHARTS.items():
        r = client.get(reverse(f"analytics:chart_{name}"), RANGE)
        assert r.status_code == 200, name
        html = r.content.decode()
        heading = re.search(r"<h2>(.*?)</h2>", html).group(1)
        assert HAN.search(heading), (name, heading)
        for fig in figures(html):
            assert not figure_words(fig, names), (name, figure_words(fig, names))
            if spec.kind == "figure" and fig["layout"].get("xaxis", {}).get("title"):
                assert HAN.search(fig["layout"]["xaxis"]["title"]["text"]), name
        # Table headers in Chinese too.
        for header in re.findall(r"<th[^>]*>(.*?)</th>", html):
            assert HAN.search(header) or header in ("p50", "p90", "p99"), (name, header)


def test_chart_texts_in_chinese(client, data):
    chinese(client, data)

    def chart(name, **extra):
        return client.get(reverse(f"analytics:chart_{name}"), {**RANGE, **extra}).content.decode()

    spend = chart("spend")
    assert "<h2>按模型统计消费</h2>" in spend and "此时间范围内共" in spend
    fig = figures(spend)[0]
    assert fig["layout"]["xaxis"]["title"]["text"] == "小时 (UTC)"
    assert fig["layout"]["yaxis"]["title"]["text"] == f"消费（{data.org.currency}）"
    tokens = figures(chart("tokens"))[0]
    assert [t["name"] for t in tokens["data"]] == ["输入（未缓存）", "缓存读取", "缓存写入",
                                                  "输出（含推理）"]  # fmt: skip
    assert "Token" in tokens["data"][0]["hovertemplate"]
    errors = figures(chart("status_counts"))[0]
    assert errors["data"][0]["name"] == "2xx 成功"
    assert "次调用" in errors["data"][0]["hovertemplate"]
    cache = chart("cache_hit", compare="model")
    assert "<h2>前缀缓存命中率（按模型）</h2>" in cache
    latency = chart("latency", compare="node", pct="p99")
    assert "<h2>总延迟，按节点对比 p99</h2>" in latency
    # The node-side prefix hit rate against the billed cache-read share, said in Chinese.
    load = chart("node_load")
    assert "引擎前缀缓存命中率：" in load and "缓存提示词占比" in load
    # An empty chart explains itself in Chinese.
    empty = chart("spend", model="no-such-model")
    assert "期间没有调用。请清除模型、节点、密钥或子账户筛选条件" in empty
    # A filter error, on the page and on a chart partial.
    bad = {"range": "custom", "from": "2025-02-04T00:00", "to": "2025-02-03T00:00"}
    page = client.get(reverse("analytics:spend"), bad).content.decode()
    assert (
        "时间范围的结束时间必须晚于开始时间。" in page
        and "请修正上方的筛选条件以查看图表。" in page
    )
    r = client.get(reverse("analytics:chart_spend"), bad)
    assert r.status_code == 400
    assert "筛选条件无效：结束时间：时间范围的结束时间必须晚于开始时间。" in r.content.decode()


def test_the_running_bucket_is_marked_in_chinese(client, data):
    chinese(client, data)
    _ingest(data, datetime.now(UTC) - timedelta(minutes=5), 3, model="sim-chat-small")
    html = client.get(reverse("analytics:chart_spend")).content.decode()
    assert "最后一个小时（" in html and "尚未结束：其数据将持续增长至" in html
    fig = figures(html)[0]
    assert [a["text"] for a in fig["layout"]["annotations"]] == ["截至目前"]


def test_the_margin_report_in_chinese(client, db):
    from tests.usage.margin_fixtures import seed_margin
    from usage.facade import seed_catalog

    seed_catalog()
    seed_margin()
    client.force_login(UserFactory(is_staff=True, language="zh-hans"))
    rng = {"range": "custom", "from": "2025-06-02T00:00", "to": "2025-06-04T00:00"}
    html = client.get(reverse("analytics:margin"), rng).content.decode()
    for text in ("<h1>毛利</h1>", "仅限平台工作人员", "<h2>每日收入与供应商成本</h2>", "<h2>按模型</h2>",
                 "<h2>按渠道</h2>", "<h2>按组织</h2>", ">毛利率</th>", ">供应商成本</th>",
                 "下载 CSV", "次调用没有可比成本", ">全部调用<"):  # fmt: skip
        assert text in html, text
    fig = figures(html)[0]
    assert fig["layout"]["xaxis"]["title"]["text"] == "日期（UTC）"
    assert any(t["name"].startswith("供应商成本（") for t in fig["data"])
    assert "Vendor cost" not in html and "All calls" not in html
    # The CSV's header row in Chinese, the same words as the page; the keys on request.
    csv_text = client.get(reverse("analytics:margin_csv"), rng).content.decode()
    assert "供应商成本" in csv_text.splitlines()[0]
    keys = client.get(reverse("analytics:margin_csv"), {**rng, "header": "keys"}).content.decode()
    assert "vendor_cost" in keys.splitlines()[0]
    assert csv_text.splitlines()[1:] == keys.splitlines()[1:]


def test_an_english_member_still_reads_english(client, data):
    login(client, data)
    page = client.get(reverse("analytics:spend"), RANGE).content.decode()
    assert "<h1>Spend</h1>" in page and "Time range" in page and ", per hour" in page
    spend = client.get(reverse("analytics:chart_spend"), RANGE).content.decode()
    assert "<h2>Spend by model</h2>" in spend
    fig = figures(spend)[0]
    assert fig["layout"]["xaxis"]["title"]["text"] == "Hour (UTC)"
    tokens = figures(client.get(reverse("analytics:chart_tokens"), RANGE).content.decode())[0]
    assert tokens["data"][0]["name"] == "Input (uncached)"
    load = client.get(reverse("analytics:chart_node_load"), RANGE).content.decode()
    assert "Engine prefix-cache hit rate:" in load
    bad = {"range": "custom", "from": "2025-02-04T00:00", "to": "2025-02-03T00:00"}
    r = client.get(reverse("analytics:chart_spend"), bad)
    assert "These filters are not valid: To: The end of the time range" in r.content.decode()
    # The CSV's keys: an English reader's header row; a Chinese reader's on request.
    csv_text = client.get(reverse("analytics:chart_spend"), {**RANGE, "format": "csv"})
    assert csv_text.content.decode().lstrip("\ufeff").startswith("bucket_start,series,calls,")
    chinese(client, data)
    query = {**RANGE, "format": "csv", "header": "keys"}
    csv_text = client.get(reverse("analytics:chart_spend"), query)
    assert csv_text.content.decode().lstrip("\ufeff").startswith("bucket_start,series,calls,")


def test_the_overview_key_statuses_and_chart_error_text_in_chinese(client, data):
    chinese(client, data)
    html = client.get(reverse("console:overview")).content.decode()
    assert '<span class="badge active">有效</span>' in html
    assert 'data-chart-error="无法加载此图表（%(status)s）' in html
    assert 'data-copied-label="已复制"' in html
