# ruff: noqa: RUF001 (Chinese punctuation in the expected texts)
"""Nodes & channels in Simplified Chinese (issue 18): an admin who chose
简体中文 reads the list, a node's page, the add form with its errors (the
private-address rule among them), the key pool and the API key form in
Chinese, with the key never shown back; an English user still reads English,
and the REST API and the gateway's address check stay English whatever the
user chose."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import translation

from inference_node.addresses import why_not_public
from inference_node.models import NodeStatus
from tests.inference_node.factories import CredentialFactory, NodeFactory, vendor_channel

pytestmark = pytest.mark.django_db

KEY = "sk-chinese-page-key-000000-7a7a"
NEW_KEY = "sk-chinese-page-new-key-0000-9c9c"


@pytest.fixture(autouse=True)
def _no_language_left_behind():
    """A request activates its user's language in this thread and leaves it
    there: later tests that call services directly expect English."""
    yield
    translation.deactivate()


def _client(client, membership, language):
    membership.user.language = language
    membership.user.save(update_fields=["language"])
    client.force_login(membership.user)
    return client


@pytest.fixture
def zh(client, admin):
    return _client(client, admin, "zh-hans")


@pytest.fixture
def en(client, admin):
    return _client(client, admin, "en")


@pytest.fixture
def node(org):
    return NodeFactory(organization=org, name="gpu-1", serves=["llama"], token="tok-1234567890")


@pytest.fixture
def channel(org):
    node = vendor_channel(organization=org, name="kimi", keys=(), preset="moonshot")
    CredentialFactory(node=node, secret=KEY, label="main", rpm_limit=500)
    return node


def _add_form(**fields):
    data = {
        "preset": "",
        "name": "gpu-2",
        "kind": "",
        "base_url": "https://llm.example.com:8000",
        "api_path": "",
        "health_check": "",
        "credentials": "",
        "token": "",
        "weight": "1",
        "max_concurrency": "64",
        "region": "",
        "hardware": "",
        "models": "",
    }
    data.update(fields)
    return data


def test_the_list_and_a_node_page_are_in_chinese(zh, node, channel):
    listing = zh.get(reverse("inference_node:nodes")).content.decode()
    for text in ("节点与渠道", "添加节点", "健康状况", "最近在线", "运行中", "健康", "立即测试"):
        assert text in listing, text
    assert "1 / 1 有效" in listing  # the channel's key pool
    assert "Test now" not in listing and "Last seen" not in listing

    page = zh.get(reverse("inference_node:node_detail", args=[node.pk])).content.decode()
    for text in ("最近探测", "连续探测", "上下文窗口", "API 密钥", "基础 URL", "权重", "保存"):
        assert text in page, text
    assert "OpenAI 兼容（自托管或供应商）" in page  # the kind's label
    assert "Last probe" not in page and "Max concurrency" not in page

    kimi = zh.get(reverse("inference_node:node_detail", args=[channel.pk])).content.decode()
    assert "月之暗面 Kimi" in kimi and "添加 API 密钥" in kimi and "500 rpm" in kimi
    assert KEY not in kimi


def test_the_add_form_speaks_chinese_and_so_do_its_errors(zh, settings):
    page = zh.get(reverse("inference_node:node_create")).content.decode()
    for text in ("添加节点", "预设", "不使用：手动配置", "健康检查", "注意事项", "智谱 GLM"):
        assert text in page, text
    assert "Presets: addresses" not in page

    settings.NODE_ALLOW_PRIVATE_URLS = False
    response = zh.post(
        reverse("inference_node:node_create"), _add_form(base_url="http://10.0.0.5:8000")
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "10.0.0.5 是私有、环回或保留地址（10.0.0.5：私有地址）" in body
    assert "租户节点必须可通过公网访问" in body
    assert "tenant nodes must be reachable" not in body

    models = zh.post(
        reverse("inference_node:node_create"), _add_form(models="llama=meta/llama bogus")
    ).content.decode()
    assert "第 1 行：“bogus”不是有效设置" in models  # the models field's own parser

    settings.NODE_ALLOW_PRIVATE_URLS = True  # no resolving of the vendor's name here
    vendor = zh.post(
        reverse("inference_node:node_create"),
        _add_form(name="ds", preset="deepseek", base_url=""),
    ).content.decode()
    assert "请至少添加一个 API 密钥" in vendor  # a service error on the form
    assert "DeepSeek：OpenAI 聊天接口，使用 Bearer 密钥。" in vendor  # the preset's quirks


def test_the_api_key_form_is_chinese_and_never_shows_the_key(zh, channel):
    key = channel.credentials.get()
    add = reverse("inference_node:credential_add", args=[channel.pk])
    page = zh.get(add).content.decode()
    assert "添加 API 密钥" in page and "每分钟请求数" in page and "保存后不再显示。" in page

    bad = zh.post(add, {"secret": NEW_KEY, "weight": "0", "label": "backup"})
    body = bad.content.decode()
    assert bad.status_code == 200 and NEW_KEY not in body
    assert "Ensure this value" not in body  # Django's own message, in Chinese too

    dup = zh.post(add, {"secret": KEY, "weight": "1"}).content.decode()
    assert "该 API 密钥已在密钥池中。" in dup and KEY not in dup

    edit = reverse("inference_node:credential_edit", args=[channel.pk, key.pk])
    page = zh.get(edit).content.decode()
    assert f"API 密钥 {key.secret_hint}" in page and "密钥本身无法修改或查看" in page
    assert KEY not in page

    saved = zh.post(edit, {"label": "main", "weight": "2"}, follow=True).content.decode()
    assert f"API 密钥 {key.secret_hint} 已保存。" in saved

    done = zh.post(
        reverse("inference_node:credential_disable", args=[channel.pk, key.pk]),
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert f"API 密钥 {key.secret_hint} 已停用。" in done
    assert "此渠道不可用：所有 API 密钥均已停用" in done  # the down reason, translated
    assert "由 " in done and " 停用" in done  # who disabled it


def test_status_changes_confirm_and_report_in_chinese(zh, node):
    confirm = zh.get(reverse("inference_node:node_drain", args=[node.pk])).content.decode()
    assert "确定排空“gpu-1”？" in confirm and "排空节点" in confirm and "取消" in confirm
    done = zh.post(reverse("inference_node:node_drain", args=[node.pk]), follow=True)
    assert "节点“gpu-1”已排空" in done.content.decode()
    node.refresh_from_db()
    assert node.status == NodeStatus.DRAINING


def test_an_english_user_still_reads_english(en, node, channel, settings):
    listing = en.get(reverse("inference_node:nodes")).content.decode()
    assert "Nodes &amp; channels" in listing and "Last seen" in listing and "节点" not in listing
    page = en.get(reverse("inference_node:node_detail", args=[node.pk])).content.decode()
    assert "Last probe" in page and "Probes in a row" in page and "最近探测" not in page
    settings.NODE_ALLOW_PRIVATE_URLS = False
    body = en.post(
        reverse("inference_node:node_create"), _add_form(base_url="http://10.0.0.5:8000")
    ).content.decode()
    assert "10.0.0.5 is a private, loopback or reserved address (10.0.0.5: a private address)" in (
        body
    )
    key = channel.credentials.get()
    edit = en.get(reverse("inference_node:credential_edit", args=[channel.pk, key.pk]))
    assert "The key itself cannot be changed or shown" in edit.content.decode()


def test_the_api_and_the_gateway_check_stay_english(zh, settings):
    settings.NODE_ALLOW_PRIVATE_URLS = False
    response = zh.post(
        "/api/v1/nodes/",
        {"name": "gpu-9", "base_url": "http://10.0.0.9:8000"},
        content_type="application/json",
    )
    assert response.status_code == 400
    message = str(response.json()["error"]["fields"]["base_url"])
    assert "tenant nodes must be reachable on the public internet" in message

    import ipaddress

    with translation.override("zh-hans"):
        assert why_not_public(ipaddress.ip_address("10.1.2.3")) == "a private address"
        assert (
            why_not_public(ipaddress.ip_address("::ffff:127.0.0.1"))
            == "an IPv6 form of 127.0.0.1 (an IPv4-mapped address, a loopback address)"
        )
        assert why_not_public(
            ipaddress.ip_address("::ffff:127.0.0.1"), translate=translation.gettext
        ) == ("127.0.0.1 的 IPv6 形式（IPv4 映射地址，环回地址）")


def test_the_probers_reasons_are_shown_in_chinese_and_stored_in_english(zh, node):
    node.health = "unhealthy"
    node.last_error = "/health answered HTTP 503; /v1/models: no answer within the timeout"
    node.save()
    page = zh.get(reverse("inference_node:node_detail", args=[node.pk])).content.decode()
    assert "/health 返回 HTTP 503；/v1/models：超时未响应" in page
    assert "异常" in page  # the health badge

    from inference_node.templatetags.node_tags import key_reason, node_error

    with translation.override("zh-hans"):
        assert node_error("cannot connect (connection refused)") == "无法连接（连接被拒绝）"
        assert (
            node_error("/v1/models answered HTTP 401: the vendor refused the API key …9f2c")
            == "/v1/models 返回 HTTP 401：供应商拒绝了 API 密钥 …9f2c"
        )
        assert node_error("401: Incorrect API key provided") == "401: Incorrect API key provided"
        assert key_reason("disabled by ann@example.com") == "由 ann@example.com 停用"
    with translation.override("en"):
        assert node_error(node.last_error) == node.last_error
    node.refresh_from_db()
    assert node.last_error.startswith("/health answered HTTP 503")


def test_a_shared_node_refuses_changes_in_chinese(zh):
    shared = NodeFactory(organization=None, name="platform-gpu", serves=["m"])
    page = zh.get(reverse("inference_node:node_drain", args=[shared.pk]))
    assert page.status_code == 403
    assert "平台共享节点由平台工作人员管理。" in page.content.decode()
    detail = zh.get(reverse("inference_node:node_detail", args=[shared.pk])).content.decode()
    assert "共享" in detail and "平台共享节点，由平台工作人员运维，所有组织均可使用。" in detail
