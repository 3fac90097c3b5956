"""The "Nodes & channels" pages for vendor channels: the add form with its
presets and errors, the key pool on a channel's page (add, edit, disable,
enable, remove, with and without htmx), tiers and costs per model, the down
badge, and who may do what."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import AuditEvent
from inference_node.models import Credential, CredentialStatus, Node, NodeHealth
from tests.inference_node.factories import CredentialFactory, NodeModelFactory, vendor_channel

pytestmark = pytest.mark.django_db

KEY = "sk-page-test-key-000000-4f4f"


@pytest.fixture
def c(client, owner):
    client.force_login(owner.user)
    return client


@pytest.fixture
def channel(org):
    node = vendor_channel(organization=org, name="kimi", keys=(), preset="moonshot")
    CredentialFactory(node=node, secret=KEY, label="main", rpm_limit=500)
    NodeModelFactory(
        node=node,
        public_name="kimi-k2",
        upstream_name="kimi-k2-0711-preview",
        tier=1,
        weight=4,
        cost_currency="CNY",
        cost_input_per_mtok=4_000_000,
        cost_cache_read_per_mtok=1_000_000,
        cost_output_per_mtok=16_000_000,
    )
    return node


def _add_form(**fields):
    data = {
        "preset": "deepseek",
        "name": "deepseek",
        "kind": "",
        "base_url": "",
        "api_path": "",
        "health_check": "",
        "credentials": KEY,
        "token": "",
        "weight": "1",
        "max_concurrency": "64",
        "models": "deepseek-chat:128000 tier=0 currency=USD input=0.27 cache_read=0.07 output=1.1",
    }
    data.update(fields)
    return data


def test_adding_a_channel_from_a_preset(c, org):
    response = c.post(reverse("inference_node:node_create"), _add_form())
    node = Node.objects.get(name="deepseek")
    assert response.status_code == 302
    assert (node.kind, node.base_url, node.api_path, node.health_check) == (
        "openai_compatible",
        "https://api.deepseek.com",
        "/v1",
        "models",
    )
    assert node.credentials.get().secret == KEY
    row = node.models.get()
    assert (row.cost_currency, row.cost_input_per_mtok, row.cost_output_per_mtok) == (
        "USD",
        270_000,
        1_100_000,
    )
    detail = c.get(response.url).content.decode()
    assert KEY not in detail and "…4f4f" in detail
    assert "0.27 USD" in detail and "1.10 USD" in detail and "DeepSeek" in detail


def test_the_add_form_offers_presets_with_their_quirks(c):
    body = c.get(reverse("inference_node:node_create")).content.decode()
    assert 'name="preset"' in body and "Zhipu GLM" in body and "/api/paas/v4" in body
    assert "prompt_cache_hit_tokens" in body and 'id="preset-data"' in body
    assert 'type="password"' in body and 'name="credentials"' in body


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"credentials": ""}, "Add at least one API key"),
        ({"base_url": "ftp://api.deepseek.com"}, "http:// or https://"),
        ({"base_url": "https://api.deepseek.com/v1"}, "without /v1"),
        ({"models": "deepseek-chat=a\ndeepseek-chat=b"}, "listed twice"),
        ({"models": "deepseek-chat currency=USD input=-1 output=1"}, "cannot be negative"),
        ({"models": "deepseek-chat input=0.0000001"}, "six decimal places"),
        ({"models": "deepseek-chat speed=fast"}, "is not a setting"),
        ({"kind": "anthropic", "health_check": "health"}, "no /health endpoint"),
    ],
)
def test_add_form_errors_are_clear_and_save_nothing(c, fields, message):
    before = (Node.objects.count(), Credential.objects.count(), AuditEvent.objects.count())
    response = c.post(reverse("inference_node:node_create"), _add_form(**fields))
    body = response.content.decode()
    assert response.status_code == 200 and message in body, body[body.find("field-error") :][:300]
    assert KEY not in body  # the typed key is not sent back
    assert (Node.objects.count(), Credential.objects.count(), AuditEvent.objects.count()) == before


def test_channel_page_shows_kind_key_pool_and_model_costs(c, channel):
    body = c.get(reverse("inference_node:node_detail", args=[channel.pk])).content.decode()
    assert "OpenAI-compatible" in body and "Moonshot Kimi" in body
    assert "…4f4f" in body and "main" in body and "500 rpm" in body and KEY not in body
    assert "kimi-k2-0711-preview" in body and "4.00 CNY" in body and "16.00 CNY" in body
    listing = c.get(reverse("inference_node:nodes")).content.decode()
    assert (
        "1 of 1 active" in listing and "(tier 1)" in listing and "Nodes &amp; channels" in listing
    )


def test_key_pool_actions_with_htmx(c, channel):
    key = channel.credentials.get()
    args = [channel.pk, key.pk]
    hx = {"HTTP_HX_REQUEST": "true"}
    # add a second key
    response = c.post(
        reverse("inference_node:credential_add", args=[channel.pk]),
        {"secret": "sk-second-page-key-0000-5e5e", "label": "backup", "weight": "2"},
        **hx,
    )
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body and 'id="key-pool"' in body
    assert "…5e5e" in body and "sk-second-page-key" not in body
    # disable, enable, disable the first
    body = c.post(reverse("inference_node:credential_disable", args=args), **hx).content.decode()
    assert "disabled by" in body and "key-disabled" in body
    key.refresh_from_db()
    assert key.status == CredentialStatus.DISABLED
    c.post(reverse("inference_node:credential_enable", args=args), **hx)
    key.refresh_from_db()
    assert key.status == CredentialStatus.ACTIVE
    # remove it (another key is left)
    body = c.post(reverse("inference_node:credential_remove", args=args), **hx).content.decode()
    assert "removed" in body and "…4f4f" not in body.split("</p>", 1)[1]
    assert list(channel.credentials.values_list("label", flat=True)) == ["backup"]


def test_key_pool_actions_without_javascript(c, channel):
    key = channel.credentials.get()
    detail = reverse("inference_node:node_detail", args=[channel.pk])
    response = c.post(reverse("inference_node:credential_disable", args=[channel.pk, key.pk]))
    assert response.status_code == 302 and response.url == detail
    page = c.get(detail).content.decode()
    assert "down: every API key is disabled" in page and "This channel is down" in page
    channel.refresh_from_db()
    assert channel.health == NodeHealth.UNHEALTHY
    listing = c.get(reverse("inference_node:nodes")).content.decode()
    assert "channel-down" in listing
    # Removing the only key is refused with a message; nothing is lost.
    response = c.post(
        reverse("inference_node:credential_remove", args=[channel.pk, key.pk]), follow=True
    )
    assert "at least one API key" in response.content.decode()
    assert channel.credentials.count() == 1
    # Editing limits; the key itself is not a field.
    edit = reverse("inference_node:credential_edit", args=[channel.pk, key.pk])
    form = c.get(edit).content.decode()
    assert 'name="secret"' not in form and KEY not in form
    response = c.post(edit, {"label": "primary", "weight": "3", "tpm_limit": "90000"})
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.label, key.weight, key.tpm_limit, key.rpm_limit) == ("primary", 3, 90000, None)


def test_add_key_errors_show_in_the_pool(c, channel):
    response = c.post(
        reverse("inference_node:credential_add", args=[channel.pk]),
        {"secret": KEY, "weight": "1"},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert "already in the pool" in body and KEY not in body
    page = c.post(reverse("inference_node:credential_add", args=[channel.pk]), {"weight": "1"})
    assert page.status_code == 200 and "This field is required" in page.content.decode()
    assert channel.credentials.count() == 1


@pytest.mark.parametrize("role", ["viewer", "developer", "finance"])
def test_roles_that_cannot_manage_cannot_touch_keys(client, members, channel, role):
    client.force_login(members[role].user)
    key = channel.credentials.get()
    for name, args in [
        ("credential_add", [channel.pk]),
        ("credential_edit", [channel.pk, key.pk]),
        ("credential_disable", [channel.pk, key.pk]),
        ("credential_remove", [channel.pk, key.pk]),
    ]:
        response = client.post(reverse(f"inference_node:{name}", args=args), {"secret": "sk-x"})
        assert response.status_code == 403, name
    assert channel.credentials.count() == 1
    key.refresh_from_db()
    assert key.status == CredentialStatus.ACTIVE


def test_a_viewer_sees_hints_without_actions(client, viewer, channel):
    client.force_login(viewer.user)
    body = client.get(reverse("inference_node:node_detail", args=[channel.pk])).content.decode()
    assert "…4f4f" in body and "Add an API key" not in body and "credential_disable" not in body
    assert reverse("inference_node:credential_disable", args=[channel.pk, 1]) not in body


def test_a_key_of_another_node_is_not_found_through_ones_own_node(c, org, other_org, channel):
    foreign = CredentialFactory(node=vendor_channel(organization=other_org, keys=()))
    response = c.post(reverse("inference_node:credential_disable", args=[channel.pk, foreign.pk]))
    assert response.status_code == 404
    foreign.refresh_from_db()
    assert foreign.status == CredentialStatus.ACTIVE


def test_a_shared_channels_keys_and_costs_are_hidden(c):
    shared = vendor_channel(organization=None, name="platform-openai", keys=("sk-platform-9999",))
    NodeModelFactory(
        node=shared,
        public_name="gpt-4.1",
        cost_currency="USD",
        cost_input_per_mtok=2_000_000,
        cost_output_per_mtok=8_000_000,
    )
    body = c.get(reverse("inference_node:node_detail", args=[shared.pk])).content.decode()
    assert "platform-openai" in body and "gpt-4.1" in body
    assert "…9999" not in body and "8.00 USD" not in body and 'id="key-pool"' not in body
    key = shared.credentials.get()
    response = c.post(reverse("inference_node:credential_disable", args=[shared.pk, key.pk]))
    assert response.status_code == 403


def test_the_edit_form_shows_model_settings_and_saves_them_back_unchanged(c, channel):
    url = reverse("inference_node:node_detail", args=[channel.pk])
    page = c.get(url).content.decode()
    line = (
        "kimi-k2=kimi-k2-0711-preview tier=1 weight=4 currency=CNY input=4 cache_read=1 output=16"
    )
    assert line in page
    form = {
        "name": "kimi",
        "preset": "moonshot",
        "kind": "openai_compatible",
        "base_url": channel.base_url,
        "api_path": "",
        "health_check": "models",
        "token": "",
        "weight": "1",
        "max_concurrency": "64",
        "models": line,
    }
    updates = AuditEvent.objects.filter(action="node.update").count()
    assert c.post(url, form).status_code == 302
    assert AuditEvent.objects.filter(action="node.update").count() == updates  # nothing changed
    assert (
        c.post(url, {**form, "models": line.replace("output=16", "output=12.5")}).status_code == 302
    )
    assert channel.models.get().cost_output_per_mtok == 12_500_000
