"""Key pools against a vendor (the simulator in vendor mode, one credential
made to fail): a 429 cools that key and traffic moves to the other; a 401
disables it with an audit event; a channel whose every key is down fails
over to the backup tier; each call is billed once."""

from __future__ import annotations

import time

import anthropic
import openai

from accounts.models import AuditEvent
from inference_node.models import Credential, CredentialStatus, NodeHealth
from tests.gateway_bridge.vendor_fixtures import KEY_A, KEY_B, KEY_C, admin, captured, channel


def keys_used(sim) -> list[str]:
    """The last four characters of the key of every call the vendor received."""
    out = []
    for request in captured(sim):
        headers = request["headers"]
        value = headers.get("authorization") or headers.get("x-api-key") or ""
        out.append(value[-4:])
    return out


def gpt(gw, raw) -> openai.OpenAI:
    return openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)


def ask(client, model="sim-gpt"):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=8
    )


def test_a_rate_limited_key_cools_and_traffic_moves_to_the_other(vendor, tenant, start_gateway):
    node = channel(vendor.base_url, "openai", "sim-gpt", "gpt-sim", keys=(KEY_A, KEY_B))
    # The failing key is by far the heavier: the first call goes to it.
    node.credentials.filter(secret_hint=KEY_A[-4:]).update(weight=1000)
    admin(vendor, "/admin/faults", {"key_faults": {KEY_A: 429}, "key_retry_after_seconds": 60})
    gw = start_gateway()
    client = gpt(gw, tenant.raw)
    for _ in range(8):
        assert ask(client).choices[0].message.content
    used = keys_used(vendor)
    assert used[0] == KEY_A[-4:] and used.count(KEY_A[-4:]) == 1  # then resting for 60 s
    assert used.count(KEY_B[-4:]) == 8
    events = gw.emitter.wait_for(8)
    assert len(events) == 8 and {e["status_code"] for e in events} == {200}
    b = node.credentials.get(secret_hint=KEY_B[-4:])
    assert {e["credential_id"] for e in events} == {b.pk}
    metrics = gw.gateway.metrics.render()
    assert "gateway_credential_coolings_total 1" in metrics
    # Cooling is not a fault of the key: it stays active in the registry.
    assert node.credentials.get(secret_hint=KEY_A[-4:]).status == CredentialStatus.ACTIVE


def test_a_refused_key_is_disabled_with_an_audit_event(vendor, tenant, start_gateway):
    node = channel(vendor.base_url, "anthropic", "sim-claude", "claude-sim", keys=(KEY_A, KEY_B))
    node.credentials.filter(secret_hint=KEY_A[-4:]).update(weight=1000)
    admin(vendor, "/admin/faults", {"key_faults": {KEY_A: 401}})
    gw = start_gateway()
    client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
    for _ in range(6):
        message = client.messages.create(
            model="sim-claude", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
        assert message.content
    assert keys_used(vendor).count(KEY_A[-4:]) == 1  # never retried in a loop
    refused = Credential.objects.get(node=node, secret_hint=KEY_A[-4:])
    deadline = time.monotonic() + 10
    while refused.status != CredentialStatus.DISABLED and time.monotonic() < deadline:
        time.sleep(0.05)
        refused.refresh_from_db()
    assert refused.status == CredentialStatus.DISABLED
    assert refused.disabled_reason.startswith("401")
    event = AuditEvent.objects.get(action="credential.disable")
    assert KEY_A not in str(event.params) and refused.secret_hint in str(event.params)
    node.refresh_from_db()
    assert node.health != NodeHealth.UNHEALTHY  # another key still serves
    assert len(gw.emitter.wait_for(6)) == 6


def test_a_channel_with_every_key_down_fails_over_to_the_backup_tier(vendor, tenant, start_gateway):
    primary = channel(
        vendor.base_url,
        "anthropic",
        "sim-claude",
        "claude-sim",
        keys=(KEY_A, KEY_B),
        name="claude-primary",
    )
    backup = channel(
        vendor.base_url, "openai", "sim-claude", "gpt-sim", keys=(KEY_C,), name="gpt-backup", tier=1
    )
    gw = start_gateway()
    client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)

    def call():
        return client.messages.create(
            model="sim-claude", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )

    assert call().content  # both tiers up: the primary serves
    admin(vendor, "/admin/faults", {"key_faults": {KEY_A: 429, KEY_B: 429}})
    for _ in range(4):
        assert call().content  # translated to the OpenAI backup
    events = gw.emitter.wait_for(5)
    assert len(events) == 5  # one event per call: nothing billed twice
    assert events[0]["node_id"] == primary.pk
    assert {e["node_id"] for e in events[1:]} == {backup.pk}
    assert {e["status_code"] for e in events} == {200}
    paths = [r["path"] for r in captured(vendor)]
    assert paths[0] == "/v1/messages" and paths[-1] == "/v1/chat/completions"
