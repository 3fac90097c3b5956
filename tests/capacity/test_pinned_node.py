"""Platform staff may load-test one node (a channel): the run's key is pinned
to it, so the load lands there alone. Owners who are not staff cannot pin,
neither through the form nor the API."""

from __future__ import annotations

import time
from unittest import mock

import pytest
from django.urls import reverse

from accounts.models import ApiKey
from console.features.capacity import services
from console.features.capacity.models import LoadTest, Status
from console.features.capacity.runner import run_load_test
from inference_node.models import Node
from tests.capacity.test_views import API, API_BODY, FORM
from tests.gateway_bridge.conftest import register_node
from tests.inference_node.factories import NodeFactory
from usage.seed import seed_catalog

STAFF_ONLY = "Only platform staff may run a load test against one node."


def _make_staff(membership):
    membership.user.is_staff = True
    membership.user.save(update_fields=["is_staff"])
    return membership


@pytest.fixture
def nodes(db):
    seed_catalog()
    return (
        NodeFactory(organization=None, name="chan-a", serves=["sim-chat-small"]),
        NodeFactory(organization=None, name="chan-b", serves=["sim-chat-large"]),
    )


def _post_form(client, membership, **extra):
    client.force_login(membership.user)
    with mock.patch("console.features.capacity.services.registered_task"):
        return client.post(reverse("capacity:list"), {**FORM, **extra})


def test_an_owner_who_is_not_staff_cannot_pin_a_test_by_form(client, owner, nodes):
    client.force_login(owner.user)
    assert b"Node (platform staff)" not in client.get(reverse("capacity:list")).content
    response = _post_form(client, owner, node=str(nodes[0].pk))
    assert response.status_code == 200
    assert STAFF_ONLY in response.content.decode()
    assert not LoadTest.objects.exists()


def test_an_owner_who_is_not_staff_cannot_pin_a_test_by_api(client, owner, nodes):
    client.force_login(owner.user)
    with mock.patch("console.features.capacity.services.registered_task"):
        response = client.post(
            API, {**API_BODY, "node": nodes[0].pk}, content_type="application/json"
        )
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"node": [STAFF_ONLY]}
    assert not LoadTest.objects.exists()


def test_staff_pin_a_test_to_a_node_and_the_result_page_names_it(client, owner, nodes):
    _make_staff(owner)
    client.force_login(owner.user)
    page = client.get(reverse("capacity:list")).content.decode()
    assert "Node (platform staff)" in page and f"#{nodes[0].pk} chan-a" in page
    response = _post_form(client, owner, node=str(nodes[0].pk))
    assert response.status_code == 302
    test = LoadTest.objects.get()
    assert (test.pinned_node_id, test.pinned_node_name) == (nodes[0].pk, "chan-a")
    detail = client.get(response["Location"]).content.decode()
    assert f"Pinned to node #{nodes[0].pk} (chan-a)" in detail
    body = client.get(f"{API}{test.pk}/").json()
    assert (body["node"], body["node_name"]) == (nodes[0].pk, "chan-a")


def test_staff_cannot_pin_to_a_node_without_the_model_or_another_orgs_node(
    client, owner, other_org, nodes
):
    _make_staff(owner)
    response = _post_form(client, owner, node=str(nodes[1].pk))  # serves sim-chat-large only
    assert "This node does not serve sim-chat-small." in response.content.decode()
    theirs = NodeFactory(organization=other_org, name="theirs", serves=["sim-chat-small"])
    client.force_login(owner.user)
    response = client.post(API, {**API_BODY, "node": theirs.pk}, content_type="application/json")
    assert response.status_code == 400
    assert "No such node." in response.content.decode()
    assert not LoadTest.objects.exists()


def test_a_staff_load_test_pinned_to_one_node_drives_only_that_node(lab, saturating_sim):
    _make_staff(lab.owner)
    pinned = Node.objects.get(name="sim-saturating")
    # A second node, ten times heavier, serves the same model from the same
    # simulator: unpinned, the gateway sends it most of the calls.
    heavy = register_node(saturating_sim.base_url, name="sim-heavy", weight=10)
    deadline = time.monotonic() + 10
    while heavy.pk not in {
        n.node_id for n in lab.gateway.gateway.state.nodes.for_model("sim-chat-small", lab.org.pk)
    }:
        assert time.monotonic() < deadline, "the gateway never saw the second node"
        time.sleep(0.1)
    test = services.load_test_start(
        actor=lab.actor, model="sim-chat-small", input_tokens=64, output_tokens=8,
        prefix_share=50, steps=[4, 8], step_seconds=5, budget=10_000_000, node=pinned.pk,
        enqueue=False,
    )  # fmt: skip
    LoadTest.objects.filter(pk=test.pk).update(step_seconds=1)  # quicker than the form allows
    run_load_test(test.pk)

    test.refresh_from_db()
    assert test.status == Status.DONE, test.error
    assert all(step.ok > 0 and step.errors == 0 for step in test.results.all())
    events = lab.gateway.emitter.events
    assert events and {e["node_id"] for e in events} == {pinned.pk}
    assert ApiKey.objects.get(pk=test.api_key_id).pinned_node_id == pinned.pk
