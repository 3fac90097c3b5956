"""A key pinned to one node (platform staff's load test of one channel):
every call goes to that node, never another one or a fallback model; a call
the node cannot take is a 503 (Anthropic: its overloaded 529) in the
caller's protocol, naming the node."""

from __future__ import annotations

import http.client
import json

import openai
import pytest

from accounts.services import api_key_issue
from inference_node.models import NodeStatus
from tests.gateway_bridge.conftest import NODE_TOKEN, register_node
from tests.gateway_bridge.vendor_fixtures import KEY_B, KEY_C, channel
from tests.inference_node.factories import NodeFactory

CHAT = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hello"}]}


@pytest.fixture
def staff(tenant):
    user = tenant.owner.user
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return tenant


def pinned_key(tenant, node_id: int) -> str:
    _, raw = api_key_issue(actor=tenant.actor, name=f"pinned-{node_id}", pinned_node_id=node_id)
    return raw


def post(gw, path: str, headers: dict, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
    try:
        conn.request(
            "POST", path, json.dumps(body), {"content-type": "application/json", **headers}
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_a_pinned_keys_calls_all_land_on_its_node(staff, start_gateway, sim, settings):
    # Two nodes serve the model; the second weighs ten times more, and round
    # robin sends most calls there.
    settings.GATEWAY_ROUTING_POLICY = "round_robin"
    heavy = register_node(sim.base_url, name="sim-b", weight=10)
    gw = start_gateway()
    raw = pinned_key(staff, staff.node.id)
    c = openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0, timeout=20)
    for i in range(12):
        c.chat.completions.create(
            **{**CHAT, "messages": [{"role": "user", "content": f"call {i}"}]}, max_tokens=4
        )
    events = gw.emitter.wait_for(12)
    assert {e["node_id"] for e in events} == {staff.node.id}
    # The same calls with the tenant's ordinary key reach the other node too.
    plain = openai.OpenAI(api_key=staff.raw, base_url=f"{gw.url}/v1", max_retries=0, timeout=20)
    for i in range(12):
        plain.chat.completions.create(
            **{**CHAT, "messages": [{"role": "user", "content": f"other {i}"}]}, max_tokens=4
        )
    assert heavy.id in {e["node_id"] for e in gw.emitter.wait_for(24)[12:]}


def test_a_key_pinned_to_a_node_without_the_model_is_refused_as_overloaded_in_both_formats(
    staff, start_gateway
):
    other = NodeFactory(
        organization=None,
        base_url=staff.node.base_url,
        token=NODE_TOKEN,
        name="large-only",
        serves=[("sim-chat-large", "sim-chat-large", 32768)],
    )
    gw = start_gateway()
    raw = pinned_key(staff, other.id)
    status, body = post(gw, "/v1/chat/completions", {"authorization": f"Bearer {raw}"}, CHAT)
    assert status == 503
    assert body["error"]["code"] == "pinned_node_unavailable"
    assert f"pinned to node {other.id}, which cannot serve this call" in body["error"]["message"]
    status, body = post(
        gw,
        "/v1/messages",
        {"x-api-key": raw, "anthropic-version": "2023-06-01"},
        {**CHAT, "max_tokens": 8},
    )
    # Anthropic's own status for "overloaded" (the gateway's 503 kind) is 529.
    assert status == 529
    assert body["type"] == "error"
    assert body["error"]["type"] == "overloaded_error"
    assert f"pinned to node {other.id}" in body["error"]["message"]
    # The model its node does serve works, on that node.
    c = openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0, timeout=20)
    c.chat.completions.create(model="sim-chat-large", messages=CHAT["messages"], max_tokens=4)
    events = gw.emitter.wait_for(3)
    assert [e["node_id"] for e in events] == [None, None, other.id]


def test_a_key_pinned_to_a_disabled_node_gets_no_other_node(staff, start_gateway):
    staff.node.status = NodeStatus.DISABLED
    staff.node.save(update_fields=["status"])
    register_node(staff.node.base_url, name="sim-b")
    gw = start_gateway()
    raw = pinned_key(staff, staff.node.id)
    status, body = post(gw, "/v1/chat/completions", {"authorization": f"Bearer {raw}"}, CHAT)
    assert status == 503
    assert f"pinned to node {staff.node.id}" in body["error"]["message"]
    # An ordinary key is served by the other node.
    status, _ = post(gw, "/v1/chat/completions", {"authorization": f"Bearer {staff.raw}"}, CHAT)
    assert status == 200


def test_a_key_pinned_to_a_backup_vendor_channel_uses_that_channel_and_its_keys(
    staff, start_gateway, vendor
):
    primary = channel(vendor.base_url, "anthropic", "sim-claude", "claude-sim", name="primary")
    backup = channel(
        vendor.base_url, "anthropic", "sim-claude", "claude-sim", keys=(KEY_B, KEY_C), tier=1,
        name="backup",
    )  # fmt: skip
    backup_credentials = set(backup.credentials.values_list("pk", flat=True))
    gw = start_gateway()
    ask = {"model": "sim-claude", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    # An ordinary key gets the primary tier; the pinned one only the backup channel.
    status, _ = post(gw, "/v1/messages", {"x-api-key": staff.raw, "anthropic-version": "1"}, ask)
    assert status == 200
    raw = pinned_key(staff, backup.id)
    for _ in range(6):
        status, _ = post(gw, "/v1/messages", {"x-api-key": raw, "anthropic-version": "1"}, ask)
        assert status == 200
    events = gw.emitter.wait_for(7)
    assert events[0]["node_id"] == primary.id
    assert {e["node_id"] for e in events[1:]} == {backup.id}
    assert {e["credential_id"] for e in events[1:]} <= backup_credentials
