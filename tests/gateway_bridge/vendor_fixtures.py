"""Vendor channels for the gateway tests: one simulator process in vendor mode
(the OpenAI, Anthropic and Gemini APIs, demanding vendor API keys) and
helpers that register shared channels of each kind with a key pool."""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlsplit

import pytest

from inference_node.models import Credential, HealthCheck, Node, NodeModel
from inference_node.selectors import invalidate_routing_snapshot
from tests.inference_node.server_helpers import node_process

VENDOR_ADMIN = "vendor-sim-admin-token"
KEY_A = "sk-vendor-key-aaaaaaaaaaaa-1111"
KEY_B = "sk-vendor-key-bbbbbbbbbbbb-2222"
KEY_C = "sk-vendor-key-cccccccccccc-3333"
VENDOR_MODELS = "gpt-sim:128000,claude-sim:200000,gemini-sim:1000000"
# A 1x1 PNG.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()
# Micro-USD per million tokens: input, cache read, cache write, output.
COST = (2_000_000, 200_000, 2_500_000, 10_000_000)


@pytest.fixture(scope="session")
def vendor_sim():
    """The simulator in vendor mode, every key valid (faults set per test)."""
    with node_process(
        "--profile",
        "instant",
        "--token",
        VENDOR_ADMIN,
        "--api-keys",
        f"{KEY_A},{KEY_B},{KEY_C}",
        "--models",
        VENDOR_MODELS,
        "--cache-min-tokens",
        "8",
        via="module",
    ) as node:
        yield node


def admin(sim, path: str, body: dict | None = None) -> dict:
    status, answer = post(
        sim.base_url,
        path,
        None if body is None else json.dumps(body).encode(),
        {"Authorization": f"Bearer {VENDOR_ADMIN}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    assert status == 200, answer
    return json.loads(answer)


def post(base_url: str, path: str, body: bytes | None, headers: dict, method="POST"):
    """(status, body bytes) of one request to a loopback server."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.fixture
def vendor(vendor_sim):
    """The vendor simulator, its key faults and request capture cleared."""
    admin(vendor_sim, "/admin/faults", {"key_faults": {}})
    admin(vendor_sim, "/admin/reset", {})
    yield vendor_sim
    admin(vendor_sim, "/admin/faults", {"key_faults": {}})


def captured(sim) -> list[dict]:
    return admin(sim, "/admin/requests")["requests"]


def channel(
    base_url: str,
    kind: str,
    public: str,
    upstream: str,
    *,
    keys=(KEY_A,),
    name: str | None = None,
    tier: int = 0,
    organization=None,
    cost=COST,
) -> Node:
    """A channel judged by traffic, serving ``public`` as ``upstream``, with a key pool."""
    node = Node.objects.create(
        organization=organization,
        name=name or f"{kind}-{public}-{tier}",
        kind=kind,
        base_url=base_url,
        health_check=HealthCheck.TRAFFIC,
        max_concurrency=64,
    )
    for i, key in enumerate(keys):
        Credential.objects.create(node=node, label=f"key {i}", secret=key, secret_hint=key[-4:])
    inp, read, write, out = cost
    NodeModel.objects.create(
        node=node,
        public_name=public,
        upstream_name=upstream,
        context_window=100_000,
        tier=tier,
        cost_currency="USD",
        cost_input_per_mtok=inp,
        cost_cache_read_per_mtok=read,
        cost_cache_write_per_mtok=write,
        cost_output_per_mtok=out,
    )
    invalidate_routing_snapshot()
    return node


def demo_channels(base_url: str) -> dict[str, Node]:
    """One channel of each vendor kind, as ``manage.py up`` registers them."""
    return {
        "openai": channel(base_url, "openai", "sim-gpt", "gpt-sim"),
        "anthropic": channel(base_url, "anthropic", "sim-claude", "claude-sim"),
        "gemini": channel(base_url, "gemini", "sim-gemini", "gemini-sim"),
    }
