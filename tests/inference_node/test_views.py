"""Console pages of the node registry: the role matrix, forms and their
errors, POST actions, the token never shown, and tenant isolation on every
object route (console and API)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import AuditEvent, Role
from console.kernel.crypto import hint
from inference_node.models import Credential, Node, NodeHealth, NodeStatus
from tests.factories import MembershipFactory, OrganizationFactory
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db

TOKEN_A = "node-a-secret-token-7f3e"
TOKEN_SHARED = "shared-secret-token-91ab"
KEY_A = "sk-org-a-vendor-key-0000-5e1f"


@pytest.fixture
def world():
    out = {}
    for tag in ("a", "b"):
        org = OrganizationFactory(name=f"Org {tag.upper()}")
        members = {role: MembershipFactory(organization=org, role=role) for role in Role.values}
        node = NodeFactory(
            organization=org,
            name=f"node-{tag}",
            base_url=f"http://10.0.{ord(tag)}.1:8000",
            token=TOKEN_A if tag == "a" else "",
            serves=[f"model-{tag}"],
        )
        key = Credential.objects.create(
            node=node, secret=KEY_A if tag == "a" else f"sk-key-{tag}-0123456789", label=tag
        )
        key.secret_hint = hint(key.secret)
        key.save()
        out[tag] = {"org": org, "members": members, "node": node, "key": key}
    out["shared"] = NodeFactory(
        organization=None,
        name="platform-gpu",
        base_url="http://192.168.77.7:9000",
        token=TOKEN_SHARED,
        serves=["shared-model"],
        metrics_available=True,
        running=4,
        kv_cache_usage=0.5,
    )
    return out


def _login(client, membership):
    client.force_login(membership.user)
    return client


OBJECT_ROUTES = {
    "inference_node:node_detail": lambda w: [w["node"].pk],
    "inference_node:node_drain": lambda w: [w["node"].pk],
    "inference_node:node_enable": lambda w: [w["node"].pk],
    "inference_node:node_disable": lambda w: [w["node"].pk],
    "inference_node:node_test": lambda w: [w["node"].pk],
    "inference_node:credential_add": lambda w: [w["node"].pk],
    "inference_node:credential_edit": lambda w: [w["node"].pk, w["key"].pk],
    "inference_node:credential_disable": lambda w: [w["node"].pk, w["key"].pk],
    "inference_node:credential_enable": lambda w: [w["node"].pk, w["key"].pk],
    "inference_node:credential_remove": lambda w: [w["node"].pk, w["key"].pk],
}
API_OBJECT_ROUTES = {
    "node-detail": lambda w: [w["node"].pk],
    "node-drain": lambda w: [w["node"].pk],
    "node-enable": lambda w: [w["node"].pk],
    "node-disable": lambda w: [w["node"].pk],
    "node-test": lambda w: [w["node"].pk],
    "node-credentials": lambda w: [w["node"].pk],
    "node-credential": lambda w: [w["node"].pk, w["key"].pk],
    "node-credential-disable": lambda w: [w["node"].pk, w["key"].pk],
    "node-credential-enable": lambda w: [w["node"].pk, w["key"].pk],
}

# Read by tests/test_route_isolation.py: the object routes this module proves isolated.
ISOLATED_ROUTES = set(OBJECT_ROUTES) | set(API_OBJECT_ROUTES)


def _state(node):
    node = Node.objects.get(pk=node.pk)
    keys = [(k.pk, k.label, k.weight, k.status, k.secret) for k in node.credentials.all()]
    return (node.name, node.status, node.weight, node.last_probe_at, node.token, keys)


@pytest.mark.parametrize("route", sorted(OBJECT_ROUTES))
@pytest.mark.parametrize("method", ["get", "post"])
def test_other_org_owner_cannot_reach_console_objects(client, world, route, method):
    # Given the owner of org B, when they address org A's node by id
    c = _login(client, world["b"]["members"]["owner"])
    target = world["a"]["node"]
    before = _state(target)
    url = reverse(route, args=OBJECT_ROUTES[route](world["a"]))
    data = {"name": "hijacked", "base_url": "http://x:1", "weight": 9, "secret": "sk-hijack-12345"}
    response = getattr(c, method)(url, data)
    # Then it is not found (or the method is not allowed), and nothing changed
    assert response.status_code in (404, 405)
    assert b"node-a" not in response.content and b"Org A" not in response.content
    assert _state(target) == before


@pytest.mark.parametrize("route", sorted(API_OBJECT_ROUTES))
@pytest.mark.parametrize("method", ["get", "post", "patch", "delete"])
def test_other_org_owner_cannot_reach_api_objects(client, world, route, method):
    c = _login(client, world["b"]["members"]["owner"])
    target = world["a"]["node"]
    before = _state(target)
    url = reverse(route, args=API_OBJECT_ROUTES[route](world["a"]))
    data = {"weight": 9, "secret": "sk-hijack-12345"}
    response = getattr(c, method)(url, data, content_type="application/json")
    assert response.status_code in (404, 405)
    if response.status_code == 404:
        assert response.json()["error"]["code"] == "not_found"
    assert _state(target) == before


def test_lists_show_only_own_and_shared_nodes(client, world):
    c = _login(client, world["b"]["members"]["owner"])
    body = c.get(reverse("inference_node:nodes")).content.decode()
    assert "node-b" in body and "platform-gpu" in body and "node-a" not in body
    api = c.get("/api/v1/nodes/").json()
    assert {n["name"] for n in api["results"]} == {"node-b", "platform-gpu"}


ROLE_PAGES = [
    ("inference_node:nodes", None, {"owner": 200, "admin": 200, "viewer": 200}),
    ("inference_node:node_create", None, {"owner": 200, "admin": 200, "viewer": 403}),
    ("inference_node:node_detail", "own", {"owner": 200, "admin": 200, "viewer": 200}),
    ("inference_node:node_detail", "shared", {"owner": 200, "admin": 200, "viewer": 200}),
    ("inference_node:node_drain", "own", {"owner": 200, "admin": 200, "viewer": 403}),
    ("inference_node:node_disable", "own", {"owner": 200, "admin": 200, "viewer": 403}),
    ("inference_node:node_enable", "own", {"owner": 200, "admin": 200, "viewer": 403}),
    ("inference_node:node_drain", "shared", {"owner": 403, "admin": 403, "viewer": 403}),
]


@pytest.mark.parametrize(("url_name", "which", "expected"), ROLE_PAGES)
@pytest.mark.parametrize("role", Role.values)
def test_role_matrix_on_pages(client, world, url_name, which, expected, role):
    node = {"own": world["a"]["node"], "shared": world["shared"], None: None}[which]
    url = reverse(url_name, args=[node.pk] if node else [])
    response = _login(client, world["a"]["members"][role]).get(url)
    # Developers and finance have no nodes page at all.
    assert response.status_code == expected.get(role, 403)


def test_sidebar_link_only_for_roles_that_see_nodes(client, world):
    for role, shown in [
        ("owner", True),
        ("viewer", True),
        ("developer", False),
        ("finance", False),
    ]:
        client.force_login(world["a"]["members"][role].user)
        body = client.get(reverse("console:overview")).content.decode()
        assert (reverse("inference_node:nodes") in body) is shown, role


def test_viewer_reads_but_cannot_change(client, world):
    c = _login(client, world["a"]["members"]["viewer"])
    node = world["a"]["node"]
    body = c.get(reverse("inference_node:nodes")).content.decode()
    assert "node-a" in body and "Add node" not in body and "Drain" not in body
    detail = c.get(reverse("inference_node:node_detail", args=[node.pk])).content.decode()
    assert node.base_url in detail and "<form" not in detail.split("<main>")[1].split("Models")[0]
    assert (
        c.post(reverse("inference_node:node_detail", args=[node.pk]), {"weight": 5}).status_code
        == 403
    )
    assert c.post(reverse("inference_node:node_drain", args=[node.pk])).status_code == 403
    assert c.post(reverse("inference_node:node_test", args=[node.pk])).status_code == 403
    assert Node.objects.get(pk=node.pk).status == NodeStatus.ACTIVE


@pytest.mark.parametrize("role", ["owner", "viewer"])
def test_token_is_never_shown_and_shared_address_is_hidden(client, world, role):
    c = _login(client, world["a"]["members"][role])
    node, shared = world["a"]["node"], world["shared"]
    pages = [
        reverse("inference_node:nodes"),
        reverse("inference_node:node_detail", args=[node.pk]),
        reverse("inference_node:node_detail", args=[shared.pk]),
        "/api/v1/nodes/",
        f"/api/v1/nodes/{node.pk}/",
        f"/api/v1/nodes/{shared.pk}/",
    ]
    for url in pages:
        body = c.get(url).content.decode()
        assert TOKEN_A not in body and TOKEN_SHARED not in body, url
        assert "192.168.77.7" not in body, url
    detail = c.get(reverse("inference_node:node_detail", args=[node.pk])).content.decode()
    assert "…7f3e" in detail  # the last 4 characters only
    shared_page = c.get(reverse("inference_node:node_detail", args=[shared.pk])).content.decode()
    assert (
        "platform-gpu" in shared_page and "shared-model" in shared_page and "50.0 %" in shared_page
    )


def test_htmx_refresh_returns_only_the_table(client, world):
    c = _login(client, world["a"]["members"]["viewer"])
    response = c.get(
        reverse("inference_node:nodes"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="node-table"
    )
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body and 'id="nodes"' in body
    full = c.get(reverse("inference_node:nodes")).content.decode()
    assert 'hx-trigger="every 5s"' in full and "<html" in full


def test_create_node_with_models_textarea(client, world):
    c = _login(client, world["a"]["members"]["admin"])
    response = c.post(
        reverse("inference_node:node_create"),
        {
            "name": "gpu-new",
            "base_url": "https://gpu.example.com/",
            "token": "brand-new-token-5555",
            "weight": "2",
            "max_concurrency": "8",
            "region": "eu-west",
            "hardware": "",
            "models": "llama=meta-llama/Llama-3.1-8B-Instruct:131072\n\n# a comment\nqwen\nollama=llama3:8b",
        },
    )
    node = Node.objects.get(name="gpu-new")
    assert response.status_code == 302 and response.url == reverse(
        "inference_node:node_detail", args=[node.pk]
    )
    assert node.organization == world["a"]["org"] and node.labels == {"region": "eu-west"}
    assert node.base_url == "https://gpu.example.com" and node.token == "brand-new-token-5555"
    models = {m.public_name: (m.upstream_name, m.context_window) for m in node.models.all()}
    assert models == {
        "llama": ("meta-llama/Llama-3.1-8B-Instruct", 131072),
        "qwen": ("qwen", None),
        "ollama": ("llama3:8b", None),
    }
    detail = c.get(response.url).content.decode()
    assert "brand-new-token-5555" not in detail


def test_create_form_shows_clear_errors_and_saves_nothing(client, world):
    c = _login(client, world["a"]["members"]["owner"])
    nodes, events = Node.objects.count(), AuditEvent.objects.count()
    response = c.post(
        reverse("inference_node:node_create"),
        {
            "name": "node-a",
            "base_url": "ftp://files.example.com",
            "weight": "1",
            "max_concurrency": "4",
            "models": "good\n=missing-public\nbad=",
        },
    )
    body = response.content.decode()
    assert response.status_code == 200 and "field-error" in body
    assert "Line 2: the public model name is missing" in body
    assert "Line 3: the upstream model name is missing" in body
    assert Node.objects.count() == nodes and AuditEvent.objects.count() == events
    # With the models fixed, the service's errors show on their fields.
    response = c.post(
        reverse("inference_node:node_create"),
        {"name": "node-a", "base_url": "ftp://x", "weight": "1", "max_concurrency": "4"},
    )
    body = response.content.decode()
    assert "http:// or https://" in body and "already exists" in body
    assert Node.objects.count() == nodes


def test_edit_keeps_token_when_left_empty_and_can_remove_it(client, world):
    c = _login(client, world["a"]["members"]["owner"])
    node = world["a"]["node"]
    url = reverse("inference_node:node_detail", args=[node.pk])
    form = {
        "name": "node-a",
        "base_url": node.base_url,
        "token": "",
        "weight": "4",
        "max_concurrency": "64",
        "models": "model-a\nmodel-c:4096",
    }
    assert c.post(url, form).status_code == 302
    node.refresh_from_db()
    assert node.token == TOKEN_A and node.weight == 4
    assert sorted(m.public_name for m in node.models.all()) == ["model-a", "model-c"]
    assert c.post(url, {**form, "clear_token": "on"}).status_code == 302
    node.refresh_from_db()
    assert node.token == ""


def test_drain_confirm_then_post_then_enable(client, world):
    c = _login(client, world["a"]["members"]["owner"])
    node = world["a"]["node"]
    confirm = c.get(reverse("inference_node:node_drain", args=[node.pk])).content.decode()
    assert "Drain &#x27;node-a&#x27;?" in confirm or "Drain 'node-a'?" in confirm
    response = c.post(reverse("inference_node:node_drain", args=[node.pk]), follow=True)
    assert "drained" in response.content.decode()
    assert Node.objects.get(pk=node.pk).status == NodeStatus.DRAINING
    response = c.post(reverse("inference_node:node_enable", args=[node.pk]), {"next": "list"})
    assert response.url == reverse("inference_node:nodes")
    assert Node.objects.get(pk=node.pk).status == NodeStatus.ACTIVE
    c.post(reverse("inference_node:node_disable", args=[node.pk]))
    assert Node.objects.get(pk=node.pk).status == NodeStatus.DISABLED
    actions = set(
        AuditEvent.objects.filter(target_id=str(node.pk)).values_list("action", flat=True)
    )
    assert actions == {"node.drain", "node.enable", "node.disable"}


def test_test_now_probes_and_shows_the_result(client, world, fake_node):
    c = _login(client, world["a"]["members"]["owner"])
    node = world["a"]["node"]
    node.base_url, node.token, node.health = fake_node.url, "", NodeHealth.UNKNOWN
    node.save()
    response = c.post(reverse("inference_node:node_test", args=[node.pk]), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert "The node answered in" in body and "llama" in body
    assert "running" not in body and "not read" in body  # no metric values relayed
    assert Node.objects.get(pk=node.pk).health == NodeHealth.HEALTHY
    fake_node.stop()
    page = c.post(reverse("inference_node:node_test", args=[node.pk])).content.decode()
    assert "<html" in page and "cannot connect (connection refused)" in page


def test_test_now_is_post_only(client, world):
    c = _login(client, world["a"]["members"]["owner"])
    assert (
        c.get(reverse("inference_node:node_test", args=[world["a"]["node"].pk])).status_code == 405
    )


def test_detail_warns_about_models_the_node_does_not_serve(client, world):
    node = world["a"]["node"]
    node.discovered_models = [{"id": "something-else", "max_model_len": 4096}]
    node.save()
    c = _login(client, world["a"]["members"]["viewer"])
    body = c.get(reverse("inference_node:node_detail", args=[node.pk])).content.decode()
    assert "not listed by the node" in body and "model-a" in body
    table = c.get(reverse("inference_node:nodes")).content.decode()
    assert "not served by the node: model-a" in table


def test_shared_node_page_is_read_only_for_owners(client, world):
    c = _login(client, world["a"]["members"]["owner"])
    shared = world["shared"]
    body = c.get(reverse("inference_node:node_detail", args=[shared.pk])).content.decode()
    assert "Test now" not in body and "Save" not in body
    response = c.post(reverse("inference_node:node_detail", args=[shared.pk]), {"weight": 9})
    assert response.status_code == 403
    assert c.post(reverse("inference_node:node_test", args=[shared.pk])).status_code == 403
    assert Node.objects.get(pk=shared.pk).last_probe_at is None


def test_platform_staff_manage_shared_nodes_in_the_admin(client, world):
    from accounts.models import User

    staff = User.objects.create_superuser("staff@example.com", "staff-pass-123456")
    client.force_login(staff)
    shared = world["shared"]
    url = reverse("admin:inference_node_node_change", args=[shared.pk])
    page = client.get(url).content.decode()
    assert "platform-gpu" in page and TOKEN_SHARED not in page
    form = {
        "organization": "",
        "name": "platform-gpu",
        "base_url": "http://192.168.77.8:9000/",
        "token": "",
        "status": "active",
        "weight": "2",
        "max_concurrency": "64",
        "labels": "{}",
        "kind": "openai_compatible",
        "preset": "",
        "api_path": "",
        "health_check": "health",
        "credentials-TOTAL_FORMS": "0",
        "credentials-INITIAL_FORMS": "0",
        "credentials-MIN_NUM_FORMS": "0",
        "credentials-MAX_NUM_FORMS": "1000",
        "models-TOTAL_FORMS": "1",
        "models-INITIAL_FORMS": "1",
        "models-MIN_NUM_FORMS": "0",
        "models-MAX_NUM_FORMS": "1000",
        "models-0-id": str(shared.models.get().pk),
        "models-0-node": str(shared.pk),
        "models-0-public_name": "shared-model",
        "models-0-upstream_name": "shared-upstream",
        "models-0-context_window": "",
        "models-0-tier": "1",
        "models-0-weight": "3",
        "models-0-cost_currency": "usd",
        "models-0-cost_input_per_mtok": "0.15",
        "models-0-cost_cache_read_per_mtok": "",
        "models-0-cost_cache_write_per_mtok": "",
        "models-0-cost_output_per_mtok": "0.6",
    }
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    shared.refresh_from_db()
    assert shared.token == TOKEN_SHARED  # an empty field keeps the token
    assert shared.base_url == "http://192.168.77.8:9000" and shared.weight == 2
    model = shared.models.get()
    assert model.upstream_name == "shared-upstream" and (model.tier, model.weight) == (1, 3)
    assert model.cost_currency == "USD"
    assert (model.cost_input_per_mtok, model.cost_output_per_mtok) == (150_000, 600_000)
    assert model.cost_cache_read_per_mtok is None
    bad = client.post(url, {**form, "base_url": "ftp://nope"})
    assert bad.status_code == 200 and "http:// or https://" in bad.content.decode()
