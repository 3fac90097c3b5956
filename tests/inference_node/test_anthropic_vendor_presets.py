"""Presets for the Anthropic-protocol endpoints that Kimi, GLM, DeepSeek and
Qwen document for Claude Code: kind anthropic, an https base URL on the
vendor's own domain, an API path that puts ``/v1/messages`` where the vendor
serves it, judged by traffic (no model list is documented there), example
models with context windows, and quirks in English and Chinese. The "Add
node" form offers each one and fills itself from it (the page's preset data
and, for what is left empty, the service), and the REST API takes the key."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import pytest
from django.urls import reverse
from django.utils import translation

from gateway_bridge.pipeline.channel_request import prefixed as _prefixed
from inference_node import presets, services
from inference_node.models import HealthCheck, Node, NodeKind
from inference_node.serializers import NodeInput

pytestmark = pytest.mark.django_db

KEY = "sk-anthropic-preset-key-0000-5e5e"
# key → (the vendor's domain, where its Messages API answers)
EXPECTED = {
    "moonshot-anthropic": ("moonshot.cn", "/anthropic/v1/messages"),
    "zhipu-anthropic": ("bigmodel.cn", "/api/anthropic/v1/messages"),
    "deepseek-anthropic": ("deepseek.com", "/anthropic/v1/messages"),
    "dashscope-anthropic": ("aliyuncs.com", "/apps/anthropic/v1/messages"),
}
KEYS = sorted(EXPECTED)


@pytest.fixture
def c(client, owner):
    client.force_login(owner.user)
    return client


def _preset_data(page: str) -> dict:
    found = re.search(
        r'<script id="preset-data" type="application/json">(.*?)</script>', page, re.S
    )
    assert found, "the add form carries its presets' data"
    return json.loads(found.group(1))


@pytest.mark.parametrize("key", KEYS)
def test_each_preset_is_the_vendors_anthropic_endpoint(key):
    preset = presets.PRESETS[key]
    domain, messages_path = EXPECTED[key]
    url = urlsplit(preset.base_url)
    assert preset.kind == NodeKind.ANTHROPIC and preset.is_vendor
    assert url.scheme == "https" and not url.path and not url.query
    assert url.hostname == domain or url.hostname.endswith("." + domain)
    # The gateway swaps the /v1 of the client's path for the channel's API path.
    assert _prefixed("/v1/messages", preset.api_path) == messages_path
    assert presets.api_prefix(preset.kind, preset.api_path) + "/messages" == messages_path
    # Claude Code's ANTHROPIC_BASE_URL for the vendor, as its docs give it.
    assert preset.base_url + preset.api_path.removesuffix("/v1") in str(preset.quirks)
    assert preset.health_check == HealthCheck.TRAFFIC
    assert preset.models and all(m.context_window for m in preset.models)
    assert len({m.public_name for m in preset.models}) == len(preset.models)
    assert "cache_read_input_tokens" in str(preset.quirks)


@pytest.mark.parametrize("key", KEYS)
def test_labels_and_quirks_are_translated(key):
    preset = presets.PRESETS[key]
    english = (str(preset.label), str(preset.quirks))
    with translation.override("zh-hans"):
        chinese = (str(preset.label), str(preset.quirks))
    assert chinese[0] != english[0] and chinese[1] != english[1]
    assert "Anthropic Messages under" not in chinese[1]
    assert "cache_read_input_tokens" in chinese[1]  # field names stay as the vendor spells them


@pytest.mark.parametrize("key", KEYS)
def test_a_channel_made_from_the_preset_gets_its_settings(key, owner, actor_for):
    preset = presets.PRESETS[key]
    node = services.node_create(
        actor=actor_for(owner), name=f"cc-{key}", preset=key, credentials=[{"secret": KEY}]
    )
    assert (node.kind, node.base_url, node.api_path, node.health_check, node.preset) == (
        "anthropic",
        preset.base_url,
        preset.api_path,
        "traffic",
        key,
    )


def test_the_add_form_offers_the_presets_and_prefills_from_them(c):
    page = c.get(reverse("inference_node:node_create")).content.decode()
    data = _preset_data(page)
    for key in KEYS:
        preset = presets.PRESETS[key]
        assert f'<option value="{key}">{preset.label}</option>' in page
        assert f'data-preset="{key}"' in page and f"<code>{preset.api_path}</code>" in page
        # What the form's script puts in the fields when the preset is chosen.
        assert data[key] == {
            "kind": "anthropic",
            "base_url": preset.base_url,
            "api_path": preset.api_path,
            "health_check": "traffic",
            "models": preset.models_text,
            "quirks": str(preset.quirks),
        }
        assert all(re.fullmatch(r"[\w.=-]+:\d+", line) for line in preset.models_text.split("\n"))


@pytest.mark.parametrize("key", KEYS)
def test_the_add_form_posted_with_only_the_preset_and_a_key(c, key):
    preset = presets.PRESETS[key]
    first = preset.models[0]
    response = c.post(
        reverse("inference_node:node_create"),
        {
            "preset": key,
            "name": f"claude-code-{key}",
            "kind": "",
            "base_url": "",
            "api_path": "",
            "health_check": "",
            "credentials": KEY,
            "token": "",
            "weight": "1",
            "max_concurrency": "64",
            "models": first.line,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    node = Node.objects.get(name=f"claude-code-{key}")
    assert (node.kind, node.base_url, node.api_path, node.health_check) == (
        "anthropic",
        preset.base_url,
        preset.api_path,
        "traffic",
    )
    model = node.models.get()
    assert (model.public_name, model.upstream_name, model.context_window) == (
        first.public_name,
        first.vendor_id,
        first.context_window,
    )
    detail = c.get(response.url).content.decode()
    assert KEY not in detail and str(preset.label) in detail


def test_the_add_form_in_chinese_shows_the_translated_presets(client, admin):
    admin.user.language = "zh-hans"
    admin.user.save(update_fields=["language"])
    client.force_login(admin.user)
    page = client.get(reverse("inference_node:node_create")).content.decode()
    data = _preset_data(page)
    for key in KEYS:
        preset = presets.PRESETS[key]
        with translation.override("zh-hans"):
            label, quirks = str(preset.label), str(preset.quirks)
        assert f'<option value="{key}">{label}</option>' in page
        assert data[key]["quirks"] == quirks


def test_the_api_takes_the_preset_keys(client, owner):
    client.force_login(owner.user)
    help_text = str(NodeInput().fields["preset"].help_text)
    assert all(key in help_text for key in KEYS)
    response = client.post(
        "/api/v1/nodes/",
        {
            "name": "ds-claude-code",
            "preset": "deepseek-anthropic",
            "credentials": [{"secret": KEY}],
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert KEY not in response.content.decode()
    assert (body["kind"], body["preset"], body["api_path"], body["health_check"]) == (
        "anthropic",
        "deepseek-anthropic",
        "/anthropic/v1",
        "traffic",
    )
    assert body["base_url"] == "https://api.deepseek.com"
