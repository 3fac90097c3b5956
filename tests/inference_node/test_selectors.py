"""What the gateway may route to, and how the snapshot is cached; the
console's scoped reads."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest

from accounts.errors import NotFound, PermissionDenied
from inference_node import selectors, services
from inference_node.models import NodeHealth, NodeStatus
from inference_node.selectors import (
    RoutingSnapshot,
    arouting_snapshot,
    invalidate_routing_snapshot,
    routing_snapshot,
)
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(org, other_org):
    return {
        "own": NodeFactory(
            organization=org,
            name="own",
            token="own-token-0123456789",
            weight=3,
            max_concurrency=16,
            labels={"region": "eu-west", "hardware": "8xH100"},
            running=2,
            waiting=1,
            kv_cache_usage=0.5,
            prefix_cache_hit_rate=0.75,
            serves=[("llama", "meta-llama/Llama-3.1-8B-Instruct", 8192), "qwen"],
        ),
        "shared": NodeFactory(organization=None, name="shared", serves=["llama", "mistral"]),
        "draining": NodeFactory(organization=org, status=NodeStatus.DRAINING, serves=["llama"]),
        "disabled": NodeFactory(organization=org, status=NodeStatus.DISABLED, serves=["llama"]),
        "unhealthy": NodeFactory(organization=org, health=NodeHealth.UNHEALTHY, serves=["llama"]),
        "unknown": NodeFactory(organization=org, health=NodeHealth.UNKNOWN, serves=["llama"]),
        "foreign": NodeFactory(organization=other_org, name="foreign", serves=["llama", "secret"]),
    }


def _ids(nodes):
    return {n.node_id for n in nodes}


def test_for_model_returns_own_and_shared_healthy_active_nodes_only(org, fleet):
    nodes = routing_snapshot().for_model("llama", org.pk)
    assert _ids(nodes) == {fleet["own"].pk, fleet["shared"].pk}


def test_other_org_sees_its_own_and_shared_but_never_ours(other_org, fleet):
    snap = routing_snapshot()
    assert _ids(snap.for_model("llama", other_org.pk)) == {fleet["foreign"].pk, fleet["shared"].pk}
    assert snap.for_model("qwen", other_org.pk) == ()
    assert _ids(snap.for_model("llama", None)) == {fleet["shared"].pk}


def test_routable_node_carries_what_the_gateway_needs(org, fleet):
    (own,) = [n for n in routing_snapshot().for_model("llama", org.pk) if n.name == "own"]
    assert own.base_url == fleet["own"].base_url and own.token == "own-token-0123456789"
    assert (own.weight, own.max_concurrency) == (3, 16)
    assert own.upstream_model == "meta-llama/Llama-3.1-8B-Instruct"
    assert own.context_window == 8192
    assert (own.running, own.waiting, own.kv_cache_usage, own.prefix_cache_hit_rate) == (
        2,
        1,
        0.5,
        0.75,
    )
    assert dict(own.labels) == {"region": "eu-west", "hardware": "8xH100"}
    assert own.organization_id == org.pk
    assert "own-token" not in repr(own)
    with pytest.raises(dataclasses.FrozenInstanceError):
        own.weight = 99
    with pytest.raises(TypeError):
        own.labels["region"] = "us"


def test_context_window_falls_back_to_what_the_node_reported(org):
    NodeFactory(
        organization=org,
        serves=["m"],
        discovered_models=[{"id": "m", "max_model_len": 32768}],
    )
    (node,) = routing_snapshot().for_model("m", org.pk)
    assert node.context_window == 32768


def test_models_lists_what_an_org_can_be_served(org, other_org, fleet):
    snap = routing_snapshot()
    assert snap.models(org.pk) == {"llama", "qwen", "mistral"}
    assert snap.models(other_org.pk) == {"llama", "mistral", "secret"}
    assert snap.models(None) == {"llama", "mistral"}


def test_snapshot_is_built_with_two_queries(org, fleet, django_assert_num_queries):
    """The routable models with their nodes, and every active key pool."""
    with django_assert_num_queries(2):
        routing_snapshot()


def test_snapshot_is_cached_for_a_second_then_rebuilt(org, fleet, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(selectors.time, "monotonic", lambda: now[0])
    first = routing_snapshot()
    fleet["own"].status = NodeStatus.DISABLED
    fleet["own"].save()
    now[0] += 0.5
    assert routing_snapshot() is first  # cached: the change is not seen yet
    assert fleet["own"].pk in _ids(first.for_model("llama", org.pk))
    now[0] += 0.6
    rebuilt = routing_snapshot()
    assert rebuilt is not first
    assert fleet["own"].pk not in _ids(rebuilt.for_model("llama", org.pk))


def test_invalidation_forces_a_rebuild(org, fleet):
    first = routing_snapshot()
    fleet["shared"].health = NodeHealth.UNHEALTHY
    fleet["shared"].save()
    invalidate_routing_snapshot()
    assert _ids(routing_snapshot().for_model("llama", org.pk)) == {fleet["own"].pk}
    assert routing_snapshot() is not first


def test_services_invalidate_after_commit(
    org, owner, actor_for, fleet, django_capture_on_commit_callbacks
):
    assert fleet["own"].pk in _ids(routing_snapshot().for_model("llama", org.pk))
    with django_capture_on_commit_callbacks(execute=True):
        services.node_set_status(
            actor=actor_for(owner), node_id=fleet["own"].pk, status=NodeStatus.DRAINING
        )
    assert fleet["own"].pk not in _ids(routing_snapshot().for_model("llama", org.pk))


def test_concurrent_callers_share_one_rebuild(monkeypatch):
    builds = []

    def slow_build():
        builds.append(1)
        time.sleep(0.05)
        return RoutingSnapshot(by_model={}, built_at=time.monotonic())

    monkeypatch.setattr(selectors, "build_routing_snapshot", slow_build)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(routing_snapshot())) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len({id(r) for r in results}) == 1


def test_async_accessor_returns_the_cached_snapshot(org, fleet):
    snap = routing_snapshot()
    assert asyncio.run(arouting_snapshot()) is snap


def test_node_list_is_own_plus_shared(viewer, actor_for, fleet):
    names = {n.name for n in selectors.node_list(actor=actor_for(viewer))}
    assert "own" in names and "shared" in names and "foreign" not in names


def test_get_node_hides_other_orgs_and_refuses_changing_shared(owner, actor_for, fleet):
    actor = actor_for(owner)
    with pytest.raises(NotFound):
        selectors.get_node(actor, fleet["foreign"].pk)
    assert selectors.get_node(actor, fleet["shared"].pk).name == "shared"
    with pytest.raises(PermissionDenied):
        selectors.get_node(actor, fleet["shared"].pk, for_change=True)


@pytest.mark.parametrize("role", ["developer", "finance"])
def test_roles_without_node_access_cannot_list(members, actor_for, role, fleet):
    with pytest.raises(PermissionDenied):
        selectors.node_list(actor=actor_for(members[role]))


def test_missing_models_warns_about_configured_names_the_node_does_not_list(org):
    node = NodeFactory(
        organization=org,
        serves=["llama", ("qwen", "Qwen/Qwen2.5-7B", None)],
        discovered_models=[{"id": "llama", "max_model_len": None}],
    )
    assert selectors.missing_models(node) == ["Qwen/Qwen2.5-7B"]
    assert selectors.missing_models(NodeFactory(organization=org, serves=["x"])) == []


def test_an_organization_sees_its_own_and_the_shared_nodes_whatever_their_state(
    fleet, org, other_org
):
    own = {fleet[k].pk for k in ("own", "draining", "disabled", "unhealthy", "unknown")}

    assert set(selectors.nodes_own_and_shared(org.pk).values_list("pk", flat=True)) == {
        *own,
        fleet["shared"].pk,
    }
    assert set(
        selectors.nodes_own_and_shared(org.pk, other_org.pk).values_list("pk", flat=True)
    ) == {
        *own,
        fleet["shared"].pk,
        fleet["foreign"].pk,
    }
    assert set(selectors.nodes_own_and_shared().values_list("pk", flat=True)) == {
        fleet["shared"].pk
    }
