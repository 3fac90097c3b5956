"""Health of vendor channels without /health: the prober lists the vendor's
models with the channel's first active key, in that vendor's auth header,
against a fake vendor on 127.0.0.1. A refused key fails the probe (naming its
hint) but is never disabled by it; a channel judged by traffic is not probed."""

from __future__ import annotations

import pytest
from django.urls import reverse

from inference_node import health, services
from inference_node.models import CredentialStatus, HealthCheck, NodeHealth
from tests.inference_node.factories import CredentialFactory, NodeFactory
from tests.inference_node.vendor_helpers import FakeVendor

pytestmark = pytest.mark.django_db

KEY = "sk-vendor-key-000000000-c0de"


@pytest.fixture
def vendors():
    made: list[FakeVendor] = []

    def make(style, key=KEY, **kwargs):
        vendor = FakeVendor(style, key, **kwargs)
        made.append(vendor)
        return vendor

    yield make
    for vendor in made:
        vendor.stop()


def _channel(org, vendor, *, kind, api_path="", keys=(KEY,), **fields):
    fields.setdefault("health_check", HealthCheck.MODELS)
    fields.setdefault("health", NodeHealth.UNKNOWN)
    node = NodeFactory(
        organization=org, kind=kind, base_url=vendor.url, api_path=api_path, **fields
    )
    for secret in keys:
        CredentialFactory(node=node, secret=secret)
    return node


def _probe(node):
    (result,) = health.probe_nodes([node]).results
    node.refresh_from_db()
    return result


CASES = [
    # kind, vendor style, api_path, path asked, auth headers expected, discovered
    (
        "openai",
        "openai",
        "",
        "/v1/models",
        {"Authorization": f"Bearer {KEY}"},
        [
            {"id": "gpt-4.1", "max_model_len": None},
            {"id": "deepseek-chat", "max_model_len": 128000},
        ],
    ),
    (
        "openai_compatible",
        "openai",
        "/api/paas/v4",
        "/api/paas/v4/models",
        {"Authorization": f"Bearer {KEY}"},
        [
            {"id": "gpt-4.1", "max_model_len": None},
            {"id": "deepseek-chat", "max_model_len": 128000},
        ],
    ),
    (
        "anthropic",
        "anthropic",
        "",
        "/v1/models",
        {"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        [
            {"id": "claude-sonnet-4-20250514", "max_model_len": 200000},
            {"id": "claude-3-5-haiku-20241022", "max_model_len": None},
        ],
    ),
    (
        "gemini",
        "gemini",
        "",
        "/v1beta/models",
        {"x-goog-api-key": KEY},
        [
            {"id": "gemini-2.5-flash", "max_model_len": 1048576},
            {"id": "gemini-2.5-pro", "max_model_len": 1048576},
        ],
    ),
]


@pytest.mark.parametrize(("kind", "style", "api_path", "path", "auth", "discovered"), CASES)
def test_each_kind_is_probed_with_its_own_auth_header_and_list_shape(
    org, vendors, kind, style, api_path, path, auth, discovered
):
    vendor = vendors(style, models_path=path)
    node = _channel(org, vendor, kind=kind, api_path=api_path)
    result = _probe(node)
    assert result.ok, result.error
    assert node.health == NodeHealth.HEALTHY and node.discovered_models == discovered
    assert node.last_latency_ms is not None and not node.metrics_available
    (seen,) = vendor.seen
    assert seen.path == path
    for name, value in auth.items():
        assert seen.headers.get(name) == value
    others = {"Authorization", "x-api-key", "x-goog-api-key"} - set(auth)
    assert not any(name in seen.headers for name in others)  # one vendor's header only
    assert KEY not in str(seen.query)  # never the key in the URL


def test_list_queries_ask_for_every_model_at_once(org, vendors):
    anthropic = vendors("anthropic")
    gemini = vendors("gemini", models_path="/v1beta/models")
    _probe(_channel(org, anthropic, kind="anthropic", name="a"))
    _probe(_channel(org, gemini, kind="gemini", name="g"))
    assert anthropic.seen[0].query == {"limit": "1000"}
    assert gemini.seen[0].query == {"pageSize": "1000"}


def test_a_refused_key_fails_the_probe_naming_its_hint_but_stays_active(org, vendors):
    vendor = vendors("openai", key="sk-the-right-one-000000")
    node = _channel(org, vendor, kind="openai", health=NodeHealth.HEALTHY)
    for _ in range(3):
        result = _probe(node)
    assert not result.ok
    assert result.error == "/v1/models answered HTTP 401: the vendor refused the API key …c0de"
    assert node.health == NodeHealth.UNHEALTHY and node.last_error == result.error
    assert KEY not in result.error
    key = node.credentials.get()
    assert key.status == CredentialStatus.ACTIVE  # a probe never disables a key
    vendor.status = 403
    assert "HTTP 403: the vendor refused" in _probe(node).error


def test_the_first_active_key_is_used(org, vendors):
    vendor = vendors("openai", key="sk-second-key-0000000-0002")
    node = _channel(org, vendor, kind="openai", keys=("sk-first-key-00000000-0001",))
    CredentialFactory(node=node, secret="sk-second-key-0000000-0002")
    node.credentials.filter(secret_hint="…0001").update(status=CredentialStatus.DISABLED)
    assert _probe(node).ok
    assert vendor.seen[0].headers["Authorization"] == "Bearer sk-second-key-0000000-0002"


def test_a_channel_without_an_active_key_fails_without_a_request(org, vendors):
    vendor = vendors("openai")
    node = _channel(org, vendor, kind="openai")
    node.credentials.update(status=CredentialStatus.DISABLED)
    result = _probe(node)
    assert not result.ok and result.error == "every API key is disabled"
    assert vendor.seen == []


def test_a_vendor_answer_that_is_not_a_model_list_fails(org, vendors):
    vendor = vendors("gemini", models_path="/v1/models")  # lists nothing at /v1beta
    node = _channel(org, vendor, kind="gemini")
    result = _probe(node)
    assert not result.ok and result.error == "/v1beta/models answered HTTP 404"


def test_channels_judged_by_traffic_are_not_probed(org, vendors):
    vendor = vendors("openai")
    node = _channel(org, vendor, kind="openai", health_check=HealthCheck.TRAFFIC)
    round_ = health.probe_nodes()
    assert node.pk not in {r.node_id for r in round_.results}
    assert health.probe_nodes([node]).results == ()
    assert vendor.seen == []
    node.refresh_from_db()
    assert node.last_probe_at is None and node.health == NodeHealth.UNKNOWN


def test_test_now_on_a_traffic_channel_checks_the_key_but_leaves_health(
    org, owner, actor_for, vendors, client
):
    vendor = vendors("openai")
    node = _channel(org, vendor, kind="openai", health_check=HealthCheck.TRAFFIC)
    outcome = services.node_test(actor=actor_for(owner), node_id=node.pk)
    assert outcome.result.ok and outcome.recorded is False and outcome.change is None
    node.refresh_from_db()
    assert node.last_probe_at is None and node.health == NodeHealth.UNKNOWN
    client.force_login(owner.user)
    body = client.post(
        reverse("inference_node:node_test", args=[node.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "The vendor answered" in body and "judged by traffic" in body
    assert len(vendor.seen) == 2


def test_the_detail_page_names_models_the_vendor_does_not_list(org, owner, vendors, client):
    vendor = vendors("anthropic")
    node = _channel(org, vendor, kind="anthropic")
    node.models.create(public_name="claude-opus-4", upstream_name="claude-opus-4-20250514")
    _probe(node)
    client.force_login(owner.user)
    body = client.get(reverse("inference_node:node_detail", args=[node.pk])).content.decode()
    assert "not listed by the node" in body and "claude-opus-4-20250514" in body
