"""Node registry services: validation with errors per field, permissions,
tenancy, audit events without the token."""

from __future__ import annotations

import pytest

from accounts.errors import NotFound, PermissionDenied, ValidationFailed
from accounts.models import AuditEvent
from inference_node import services
from inference_node.models import Node, NodeHealth, NodeModel, NodeStatus
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db

TOKEN = "tok-abcdefghijklmnop-wxyz"


@pytest.fixture
def actor(owner, actor_for):
    return actor_for(owner)


def _create(actor, **overrides):
    fields = {
        "name": "gpu-1",
        "base_url": "http://10.0.0.5:8000/",
        "token": TOKEN,
        "weight": 2,
        "max_concurrency": 32,
        "labels": {"region": "eu-west", "hardware": "8xH100"},
        "models": [
            {
                "public_name": "llama",
                "upstream_name": "meta-llama/Llama-3.1-8B",
                "context_window": 8192,
            },
            {"public_name": "qwen"},
        ],
    }
    fields.update(overrides)
    return services.node_create(actor=actor, **fields)


def _counts():
    return (Node.objects.count(), NodeModel.objects.count(), AuditEvent.objects.count())


def test_create_stores_the_node_and_audits_without_the_token(org, actor):
    node = _create(actor)
    assert node.organization == org and node.base_url == "http://10.0.0.5:8000"
    assert node.token == TOKEN and node.token_hint == "…wxyz"
    assert node.status == NodeStatus.ACTIVE and node.health == NodeHealth.UNKNOWN
    models = {m.public_name: (m.upstream_name, m.context_window) for m in node.models.all()}
    assert models == {"llama": ("meta-llama/Llama-3.1-8B", 8192), "qwen": ("qwen", None)}
    event = AuditEvent.objects.get(action="node.create")
    assert event.organization == org and event.params["token"] == "set"
    assert event.params["models"] == ["llama", "qwen"]
    assert TOKEN not in str(event.params)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://10.0.0.5/", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("10.0.0.5:8000", "http:// or https://"),
        ("http://", "needs a host"),
        ("http://user:pw@10.0.0.5:8000", "no credentials"),
        ("http://10.0.0.5:8000/v1", "without /v1"),
        ("http://10.0.0.5:8000/?x=1", "no query"),
        ("http://10.0.0.5:99999", "valid URL"),
        ("", "Enter the node's base URL"),
    ],
)
def test_base_url_must_be_a_plain_http_url(actor, url, message):
    before = _counts()
    with pytest.raises(ValidationFailed) as exc:
        _create(actor, base_url=url)
    assert message in exc.value.fields["base_url"][0]
    assert _counts() == before


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9001",
        "http://10.0.0.5:8000",
        "http://192.168.1.20",
        "http://169.254.169.254",  # cloud metadata
        "http://[::1]:8000",
        "http://[::ffff:10.0.0.5]:8000",
        "http://0.0.0.0:8000",
        "http://localhost:8000",
    ],
)
def test_private_addresses_are_refused_when_the_operator_says_so(actor, settings, url):
    settings.NODE_ALLOW_PRIVATE_URLS = False
    before = _counts()
    with pytest.raises(ValidationFailed) as exc:
        _create(actor, base_url=url)
    assert "public internet" in exc.value.fields["base_url"][0]
    assert _counts() == before


def test_public_and_allowed_private_addresses_are_accepted(actor, settings):
    settings.NODE_ALLOW_PRIVATE_URLS = False
    assert _create(actor, base_url="http://93.184.216.34:8000", name="public").base_url
    settings.NODE_ALLOW_PRIVATE_URLS = True  # the embedded default: a simulator on loopback
    assert _create(actor, base_url="http://127.0.0.1:9001", name="local").base_url


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("weight", 0, "between 1 and"),
        ("weight", "abc", "whole number"),
        ("weight", 2.5, "whole number"),
        ("max_concurrency", -1, "between 1 and"),
        ("name", "  ", "Enter a name"),
        ("labels", {"Region!": "x"}, "Label name"),
        ("labels", ["region"], "JSON object"),
        ("token", "has space", "no spaces"),
        ("models", [{"public_name": "a"}, {"public_name": "a"}], "listed twice"),
        ("models", [{"public_name": "a", "context_window": 0}], "between 1 and"),
        ("models", [{"public_name": "has space"}], "no spaces"),
        ("models", [{"upstream_name": "x"}], "public name"),
    ],
)
def test_invalid_fields_are_reported_against_the_field(actor, field, value, message):
    before = _counts()
    with pytest.raises(ValidationFailed) as exc:
        _create(actor, **{field: value})
    assert message in " ".join(exc.value.fields[field])
    assert _counts() == before


def test_several_errors_are_reported_at_once(actor):
    with pytest.raises(ValidationFailed) as exc:
        _create(actor, name="", base_url="gopher://x", weight=0)
    assert set(exc.value.fields) == {"name", "base_url", "weight"}


def test_names_are_unique_per_organization_only(actor, other_owner, actor_for):
    _create(actor)
    with pytest.raises(ValidationFailed) as exc:
        _create(actor)
    assert "already exists" in exc.value.fields["name"][0]
    assert _create(actor_for(other_owner)).name == "gpu-1"


@pytest.mark.parametrize("role", ["viewer", "developer", "finance"])
def test_only_owners_and_admins_manage(members, actor_for, role):
    with pytest.raises(PermissionDenied):
        _create(actor_for(members[role]))


def test_admin_may_manage(admin, actor_for):
    assert _create(actor_for(admin)).name == "gpu-1"


def test_update_keeps_the_token_unless_given_and_never_audits_it(actor):
    node = _create(actor)
    services.node_update(actor=actor, node_id=node.pk, weight=5, name="gpu-one")
    node.refresh_from_db()
    assert (node.weight, node.name, node.token) == (5, "gpu-one", TOKEN)
    event = AuditEvent.objects.filter(action="node.update").latest("id")
    assert event.params["weight"] == [2, 5] and "token" not in event.params

    services.node_update(actor=actor, node_id=node.pk, token="new-token-1234567890")
    node.refresh_from_db()
    assert node.token == "new-token-1234567890"
    event = AuditEvent.objects.filter(action="node.update").latest("id")
    assert event.params == {"token": "set"}
    services.node_update(actor=actor, node_id=node.pk, token="")
    node.refresh_from_db()
    assert node.token == ""
    assert AuditEvent.objects.filter(action="node.update").latest("id").params == {
        "token": "cleared"
    }


def test_update_replaces_models_and_skips_audit_when_nothing_changed(actor):
    node = _create(actor)
    services.node_update(actor=actor, node_id=node.pk, models=[{"public_name": "mistral"}])
    assert [m.public_name for m in node.models.all()] == ["mistral"]
    audits = AuditEvent.objects.count()
    services.node_update(
        actor=actor, node_id=node.pk, models=[{"public_name": "mistral"}], weight=2
    )
    assert AuditEvent.objects.count() == audits


def test_update_rejects_unknown_fields_and_name_clashes(actor):
    node = _create(actor)
    _create(actor, name="gpu-2")
    with pytest.raises(ValidationFailed) as exc:
        services.node_update(actor=actor, node_id=node.pk, organization_id=5)
    assert "organization_id" in exc.value.fields
    with pytest.raises(ValidationFailed) as exc:
        services.node_update(actor=actor, node_id=node.pk, name="gpu-2")
    assert "already exists" in exc.value.fields["name"][0]


def test_other_orgs_nodes_are_not_found_and_shared_ones_are_read_only(actor, other_org):
    foreign = NodeFactory(organization=other_org)
    shared = NodeFactory(organization=None)
    for node_id in (foreign.pk, 999_999):
        with pytest.raises(NotFound):
            services.node_update(actor=actor, node_id=node_id, weight=3)
        with pytest.raises(NotFound):
            services.node_set_status(actor=actor, node_id=node_id, status="disabled")
    with pytest.raises(PermissionDenied):
        services.node_update(actor=actor, node_id=shared.pk, weight=3)
    with pytest.raises(PermissionDenied):
        services.node_set_status(actor=actor, node_id=shared.pk, status="draining")
    foreign.refresh_from_db()
    shared.refresh_from_db()
    assert foreign.weight == 1 and shared.status == NodeStatus.ACTIVE


@pytest.mark.parametrize(
    ("status", "action"),
    [("draining", "node.drain"), ("disabled", "node.disable"), ("active", "node.enable")],
)
def test_set_status_audits_each_change_once(actor, status, action):
    node = _create(actor)
    if status == "active":
        services.node_set_status(actor=actor, node_id=node.pk, status="disabled")
    services.node_set_status(actor=actor, node_id=node.pk, status=status)
    services.node_set_status(actor=actor, node_id=node.pk, status=status)  # no-op
    node.refresh_from_db()
    assert node.status == status
    assert AuditEvent.objects.filter(action=action, target_id=str(node.pk)).count() == 1


def test_set_status_rejects_unknown_status(actor):
    node = _create(actor)
    with pytest.raises(ValidationFailed) as exc:
        services.node_set_status(actor=actor, node_id=node.pk, status="paused")
    assert "status" in exc.value.fields


def test_node_test_probes_now_and_records_it(actor, fake_node):
    node = _create(actor, base_url=fake_node.url, token="")
    outcome = services.node_test(actor=actor, node_id=node.pk)
    assert outcome.result.ok and outcome.node.health == NodeHealth.HEALTHY
    assert outcome.change is not None and outcome.change.after == "healthy"
    assert outcome.node.discovered_models[0]["id"] == "llama"
    event = AuditEvent.objects.get(action="node.test")
    assert event.params["ok"] is True and event.actor == actor.user


def test_node_test_of_a_dead_node_reports_the_error(actor, fake_node):
    fake_node.stop()
    node = _create(actor, base_url=fake_node.url)
    outcome = services.node_test(actor=actor, node_id=node.pk)
    assert not outcome.result.ok and "cannot connect" in outcome.result.error
    assert outcome.node.consecutive_failures == 1


def test_viewer_cannot_test(viewer, actor_for, org):
    node = NodeFactory(organization=org)
    with pytest.raises(PermissionDenied):
        services.node_test(actor=actor_for(viewer), node_id=node.pk)


def test_changing_the_address_forgets_what_was_seen(actor, org):
    node = NodeFactory(
        organization=org,
        consecutive_successes=9,
        discovered_models=[{"id": "x", "max_model_len": None}],
        running=3,
        metrics_available=True,
    )
    services.node_update(actor=actor, node_id=node.pk, weight=2)
    node.refresh_from_db()
    assert node.health == NodeHealth.HEALTHY  # other changes keep the health
    services.node_update(actor=actor, node_id=node.pk, base_url="http://10.9.9.9:8000")
    node.refresh_from_db()
    assert node.health == NodeHealth.UNKNOWN and node.consecutive_successes == 0
    assert node.discovered_models == [] and node.running is None and not node.metrics_available


def test_enabling_a_disabled_node_waits_for_a_fresh_probe(actor, org):
    node = NodeFactory(organization=org)
    services.node_set_status(actor=actor, node_id=node.pk, status="draining")
    services.node_set_status(actor=actor, node_id=node.pk, status="active")
    node.refresh_from_db()
    assert node.health == NodeHealth.HEALTHY  # draining nodes are still probed
    services.node_set_status(actor=actor, node_id=node.pk, status="disabled")
    services.node_set_status(actor=actor, node_id=node.pk, status="active")
    node.refresh_from_db()
    assert node.status == NodeStatus.ACTIVE and node.health == NodeHealth.UNKNOWN
