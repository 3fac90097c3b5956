"""Creating and editing vendor channels: presets fill what is left empty, a
vendor channel needs a key, the kind and health check must agree, and each
model mapping takes a tier, a weight and a cost price (integer micro-units,
never negative)."""

from __future__ import annotations

import pytest

from accounts.errors import ValidationFailed
from accounts.models import AuditEvent
from inference_node import presets, services
from inference_node.models import Credential, HealthCheck, Node, NodeHealth, NodeKind
from inference_node.selectors import build_routing_snapshot

pytestmark = pytest.mark.django_db

KEY = "sk-deepseek-abcdefghijkl-77aa"


@pytest.fixture
def actor(owner, actor_for):
    return actor_for(owner)


def _counts():
    return (Node.objects.count(), Credential.objects.count(), AuditEvent.objects.count())


@pytest.mark.parametrize("key", sorted(presets.PRESETS))
def test_each_preset_fills_kind_address_path_and_health_check(actor, key):
    preset = presets.PRESETS[key]
    base_url = "" if preset.base_url else "http://10.0.0.7:8000"
    node = services.node_create(
        actor=actor,
        name=f"ch-{key}",
        preset=key,
        base_url=base_url,
        credentials=[{"secret": KEY}],
    )
    assert (node.kind, node.preset, node.api_path, node.health_check) == (
        preset.kind,
        key,
        preset.api_path,
        preset.health_check,
    )
    assert node.base_url == (preset.base_url or base_url)
    assert node.credentials.get().secret_hint == "…77aa"


def test_presets_are_consistent():
    vendors = [p for p in presets.PRESETS.values() if p.key != "self_hosted"]
    assert {p.kind for p in vendors} == set(NodeKind.values)
    for p in vendors:
        assert p.base_url.startswith("https://")
        # The Anthropic-protocol endpoints of Chinese vendors document no model list.
        anthropic_endpoint = p.key.endswith("-anthropic")
        assert p.health_check == (HealthCheck.TRAFFIC if anthropic_endpoint else HealthCheck.MODELS)
        assert p.quirks and p.models and all(m.context_window for m in p.models)
        assert not p.base_url.endswith("/v1")
    assert presets.PRESETS["self_hosted"].health_check == HealthCheck.HEALTH
    assert presets.PRESETS["zhipu"].api_path == "/api/paas/v4"
    assert presets.PRESETS["gemini"].api_path == "/v1beta"
    assert "prompt_cache_hit_tokens" in presets.PRESETS["deepseek"].quirks
    assert presets.api_prefix(NodeKind.GEMINI, "") == "/v1beta"
    assert presets.api_prefix(NodeKind.OPENAI_COMPATIBLE, "/api/v1/") == "/api/v1"


def test_what_the_caller_gives_wins_over_the_preset(actor):
    node = services.node_create(
        actor=actor,
        name="qwen-intl",
        preset="qwen",
        base_url="https://dashscope-intl.aliyuncs.com",
        health_check="traffic",
        credentials=[{"secret": KEY, "label": "intl", "rpm_limit": 600}],
    )
    assert node.base_url == "https://dashscope-intl.aliyuncs.com"
    assert node.api_path == "/compatible-mode/v1" and node.health_check == "traffic"
    key = node.credentials.get()
    assert (key.label, key.rpm_limit) == ("intl", 600)
    event = AuditEvent.objects.get(action="node.create")
    assert event.params["credentials"] == ["…77aa"] and KEY not in str(event.params)
    assert event.params["preset"] == "qwen" and event.params["health_check"] == "traffic"


def test_a_vendor_channel_without_a_key_is_refused(actor):
    before = _counts()
    with pytest.raises(ValidationFailed) as exc:
        services.node_create(actor=actor, name="openai", preset="openai")
    assert "at least one API key" in exc.value.fields["credentials"][0]
    with pytest.raises(ValidationFailed) as exc:
        services.node_create(
            actor=actor, name="x", base_url="https://api.example.com", health_check="traffic"
        )
    assert "at least one API key" in exc.value.fields["credentials"][0]
    assert _counts() == before


def test_a_vendor_kind_defaults_to_its_model_list_and_refuses_health(actor):
    node = services.node_create(
        actor=actor,
        name="claude",
        kind="anthropic",
        base_url="https://api.anthropic.com",
        credentials=[{"secret": KEY}],
    )
    assert node.health_check == HealthCheck.MODELS
    with pytest.raises(ValidationFailed) as exc:
        services.node_create(
            actor=actor,
            name="gemini",
            kind="gemini",
            base_url="https://generativelanguage.googleapis.com",
            health_check="health",
            credentials=[{"secret": KEY}],
        )
    assert "no /health endpoint" in exc.value.fields["health_check"][0]
    with pytest.raises(ValidationFailed) as exc:
        services.node_update(actor=actor, node_id=node.pk, health_check="health")
    assert "no /health endpoint" in exc.value.fields["health_check"][0]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"kind": "cohere"}, "kind", "Choose a kind"),
        ({"health_check": "ping"}, "health_check", "Choose a health check"),
        ({"preset": "mistral"}, "preset", "Choose one of the presets"),
        ({"api_path": "api/v1"}, "api_path", "starts with /"),
        ({"api_path": "/api/../admin"}, "api_path", "plain path"),
        ({"api_path": "/v1?key=x"}, "api_path", "plain path"),
        ({"base_url": "https://open.bigmodel.cn/v1"}, "base_url", "without /v1"),
        ({"credentials": [{"secret": ""}]}, "credentials", "Enter the API key"),
        ({"credentials": [{"secret": KEY}, {"secret": KEY}]}, "credentials", "listed twice"),
        ({"credentials": "sk-a-string"}, "credentials", "a list"),
    ],
)
def test_channel_fields_are_validated(actor, fields, field, message):
    data = {
        "name": "ch",
        "base_url": "https://api.example.com",
        "health_check": "models",
        "credentials": [{"secret": KEY}],
        **fields,
    }
    before = _counts()
    with pytest.raises(ValidationFailed) as exc:
        services.node_create(actor=actor, **data)
    assert message in " ".join(exc.value.fields[field])
    assert KEY not in str(exc.value.fields)
    assert _counts() == before


def test_models_take_tier_weight_and_cost_and_reach_the_routing_snapshot(org, actor):
    node = services.node_create(
        actor=actor,
        name="deepseek",
        preset="deepseek",
        credentials=[{"secret": KEY}],
        models=[
            {
                "public_name": "deepseek-chat",
                "tier": 1,
                "weight": 5,
                "cost_currency": "usd",
                "cost_input_per_mtok": 270_000,
                "cost_cache_read_per_mtok": 70_000,
                "cost_output_per_mtok": 1_100_000,
            }
        ],
    )
    row = node.models.get()
    assert (row.tier, row.weight, row.cost_currency) == (1, 5, "USD")
    assert (row.cost_input_per_mtok, row.cost_cache_write_per_mtok) == (270_000, None)
    (routable,) = build_routing_snapshot().for_model("deepseek-chat", org.pk)
    assert routable.tier == 1 and routable.weight == 5 and routable.kind == "openai_compatible"
    assert routable.cost.output_per_mtok == 1_100_000 and routable.cost.currency == "USD"
    assert [c.hint for c in routable.credentials] == ["…77aa"]
    assert node.health == NodeHealth.UNKNOWN  # a vendor channel: routable before its probe


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"cost_input_per_mtok": -1, "cost_currency": "USD"}, "cannot be negative"),
        ({"cost_input_per_mtok": 2.5, "cost_currency": "USD"}, "whole number of micro-units"),
        ({"cost_input_per_mtok": True, "cost_currency": "USD"}, "whole number of micro-units"),
        ({"cost_input_per_mtok": 1, "cost_output_per_mtok": 2}, "currency"),
        ({"cost_currency": "USD", "cost_input_per_mtok": 5}, "input and output"),
        ({"cost_currency": "XYZ"}, "use one of"),
        ({"tier": 10}, "between 0 and 9"),
        ({"tier": -1}, "between 0 and 9"),
        ({"weight": 0}, "between 1 and"),
    ],
)
def test_bad_model_settings_are_form_errors(actor, model, message):
    with pytest.raises(ValidationFailed) as exc:
        services.node_create(
            actor=actor,
            name="gpu",
            base_url="http://10.0.0.5:8000",
            models=[{"public_name": "llama", **model}],
        )
    assert message in exc.value.fields["models"][0]


def test_a_public_model_is_mapped_once_per_channel(actor):
    with pytest.raises(ValidationFailed) as exc:
        services.node_create(
            actor=actor,
            name="gpu",
            base_url="http://10.0.0.5:8000",
            models=[
                {"public_name": "gpt-4o", "upstream_name": "a"},
                {"public_name": "gpt-4o", "upstream_name": "b"},
            ],
        )
    assert "listed twice" in exc.value.fields["models"][0]


def test_editing_kind_or_path_forgets_what_the_prober_saw(org, actor):
    node = services.node_create(
        actor=actor, name="glm", preset="zhipu", credentials=[{"secret": KEY}]
    )
    Node.objects.filter(pk=node.pk).update(
        health=NodeHealth.HEALTHY, discovered_models=[{"id": "glm-4.5", "max_model_len": None}]
    )
    services.node_update(actor=actor, node_id=node.pk, weight=3, preset="")
    node.refresh_from_db()
    assert node.health == NodeHealth.HEALTHY and node.preset == ""
    services.node_update(actor=actor, node_id=node.pk, api_path="/api/coding/paas/v4")
    node.refresh_from_db()
    assert node.health == NodeHealth.UNKNOWN and node.discovered_models == []
    event = AuditEvent.objects.filter(action="node.update").latest("id")
    assert event.params["api_path"] == ["/api/paas/v4", "/api/coding/paas/v4"]


def test_a_self_hosted_node_becomes_a_vendor_channel_only_with_a_key(org, actor):
    node = services.node_create(actor=actor, name="gpu", base_url="http://10.0.0.5:8000")
    with pytest.raises(ValidationFailed) as exc:
        services.node_update(actor=actor, node_id=node.pk, health_check="traffic")
    assert "at least one API key" in exc.value.fields["health_check"][0]
    services.credential_add(actor=actor, node_id=node.pk, secret=KEY)
    services.node_update(actor=actor, node_id=node.pk, health_check="traffic")
    node.refresh_from_db()
    assert node.health_check == "traffic" and node.is_vendor


def test_an_edit_that_forgets_health_keeps_a_keyless_channel_down(org, actor):
    node = services.node_create(
        actor=actor, name="kimi", preset="moonshot", credentials=[{"secret": KEY}]
    )
    key = node.credentials.get()
    services.credential_set_status(actor=actor, credential_id=key.pk, status="disabled")
    services.node_update(actor=actor, node_id=node.pk, health_check="traffic")
    node.refresh_from_db()
    assert node.health == NodeHealth.UNHEALTHY and node.last_error == "every API key is disabled"
