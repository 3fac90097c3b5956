"""REST API for nodes: same permissions as the console, the accounts error
format, a write-only token."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from inference_node.models import Node, NodeStatus
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db

TOKEN = "api-secret-token-0000-beef"


@pytest.fixture
def api(client):
    def as_member(membership):
        client.force_login(membership.user)
        return client

    return as_member


@pytest.fixture
def node(org):
    return NodeFactory(organization=org, name="gpu-1", token=TOKEN, serves=["llama"])


def _post(c, url, data=None):
    return c.post(url, data or {}, content_type="application/json")


def _patch(c, url, data):
    return c.patch(url, data, content_type="application/json")


def test_list_and_retrieve_show_health_load_and_never_the_token(api, viewer, node):
    NodeFactory(organization=None, name="shared-1", token="shared-token-abcdef")
    c = api(viewer)
    data = c.get("/api/v1/nodes/").json()
    by_name = {n["name"]: n for n in data["results"]}
    assert set(by_name) == {"gpu-1", "shared-1"}
    own, shared = by_name["gpu-1"], by_name["shared-1"]
    assert "token" not in own and own["token_hint"] == "…beef"
    assert own["base_url"] == node.base_url and own["shared"] is False
    assert own["models"] == [
        {
            "public_name": "llama",
            "upstream_name": "llama",
            "context_window": None,
            "tier": 0,
            "weight": None,
            "cost_currency": "",
            "cost_input_per_mtok": None,
            "cost_cache_read_per_mtok": None,
            "cost_cache_write_per_mtok": None,
            "cost_output_per_mtok": None,
        }
    ]
    assert own["kind"] == "openai_compatible" and own["health_check"] == "health"
    assert own["credentials"] == [] and shared["credentials"] is None
    assert set(own["health"]) >= {"state", "last_seen_at", "latency_ms", "last_error"}
    assert set(own["load"]) == {
        "metrics_available",
        "running",
        "waiting",
        "kv_cache_usage",
        "prefix_cache_hit_rate",
    }
    assert shared["base_url"] is None and shared["token_hint"] is None and shared["shared"]
    one = c.get(f"/api/v1/nodes/{node.pk}/").json()
    assert one["id"] == node.pk and TOKEN not in str(one)


def test_create_takes_a_write_only_token(api, owner, org):
    response = _post(
        api(owner),
        "/api/v1/nodes/",
        {
            "name": "gpu-2",
            "base_url": "http://10.1.2.3:8000",
            "token": TOKEN,
            "weight": 3,
            "labels": {"region": "us-east"},
            "models": [
                {"public_name": "llama", "upstream_name": "meta/llama", "context_window": 4096}
            ],
        },
    )
    assert response.status_code == 201
    data = response.json()
    assert "token" not in data and TOKEN not in response.content.decode()
    assert (
        data["token_hint"] == "…beef"
        and data["weight"] == 3
        and data["labels"] == {"region": "us-east"}
    )
    assert Node.objects.get(pk=data["id"]).token == TOKEN
    assert data["health"]["state"] == "unknown"


def test_validation_errors_use_the_error_format(api, owner, node):
    c = api(owner)
    bad = _post(c, "/api/v1/nodes/", {"name": "gpu-1", "base_url": "ftp://x", "weight": 0})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["fields"]) == {"name", "base_url", "weight"}
    missing = _post(c, "/api/v1/nodes/", {"name": "x"})
    assert missing.status_code == 400 and "base_url" in missing.json()["error"]["fields"]
    wrong_type = _post(
        c, "/api/v1/nodes/", {"name": "x", "base_url": "http://a", "models": "llama"}
    )
    assert wrong_type.status_code == 400 and wrong_type.json()["error"]["code"] == "invalid"


def test_partial_update_and_status_actions(api, admin, node):
    c = api(admin)
    response = _patch(c, f"/api/v1/nodes/{node.pk}/", {"weight": 7, "token": "another-token-1234"})
    assert response.status_code == 200 and response.json()["weight"] == 7
    assert "another-token" not in response.content.decode()
    assert Node.objects.get(pk=node.pk).token == "another-token-1234"
    for action, status in [("drain", "draining"), ("disable", "disabled"), ("enable", "active")]:
        response = _post(c, f"/api/v1/nodes/{node.pk}/{action}/")
        assert response.status_code == 200 and response.json()["status"] == status
    assert AuditEvent.objects.filter(target_id=str(node.pk), action="node.drain").exists()


def test_test_action_probes_the_node(api, owner, org, fake_node):
    node = NodeFactory(organization=org, base_url=fake_node.url)
    response = _post(api(owner), f"/api/v1/nodes/{node.pk}/test/")
    assert response.status_code == 200
    data = response.json()
    # An organization's own node: its health and model ids, no metric values.
    assert data["result"]["ok"] is True and data["result"]["metrics"] == "skipped"
    assert data["result"]["models"] == [{"id": "llama"}]
    assert data["node"]["load"]["running"] is None


@pytest.mark.parametrize("role", ["viewer", "developer", "finance"])
def test_roles_that_cannot_manage_get_403(api, members, node, role):
    c = api(members[role])
    for response in (
        _post(c, "/api/v1/nodes/", {"name": "x", "base_url": "http://a"}),
        _patch(c, f"/api/v1/nodes/{node.pk}/", {"weight": 2}),
        _post(c, f"/api/v1/nodes/{node.pk}/drain/"),
        _post(c, f"/api/v1/nodes/{node.pk}/test/"),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "permission_denied"
    assert Node.objects.get(pk=node.pk).status == NodeStatus.ACTIVE


@pytest.mark.parametrize("role", ["developer", "finance"])
def test_roles_without_nodes_cannot_even_list(api, members, node, role):
    c = api(members[role])
    assert c.get("/api/v1/nodes/").status_code == 403
    assert c.get(f"/api/v1/nodes/{node.pk}/").status_code == 403


def test_shared_nodes_are_read_only(api, owner):
    shared = NodeFactory(organization=None)
    c = api(owner)
    assert c.get(f"/api/v1/nodes/{shared.pk}/").status_code == 200
    response = _patch(c, f"/api/v1/nodes/{shared.pk}/", {"weight": 5})
    assert response.status_code == 403 and response.json()["error"]["code"] == "shared_node"
    assert _post(c, f"/api/v1/nodes/{shared.pk}/disable/").status_code == 403
    assert Node.objects.get(pk=shared.pk).status == NodeStatus.ACTIVE


def test_anonymous_is_refused(client, node):
    assert client.get("/api/v1/nodes/").status_code in (401, 403)


def test_schema_generates(api, owner):
    response = api(owner).get("/api/v1/schema/")
    assert response.status_code == 200 and b"/api/v1/nodes/{id}/drain/" in response.content
