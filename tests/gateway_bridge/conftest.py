"""Fixtures for the gateway tests: a simulator node process, a tenant with a
key, and the real gateway serving them on a loopback port."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest
from django.conf import settings as django_settings

from accounts.actors import Actor
from accounts.models import Role
from inference_node.models import Node
from tests.factories import MembershipFactory, OrganizationFactory, issue_key
from tests.gateway_bridge.harness import running_gateway
from tests.gateway_bridge.vendor_fixtures import vendor, vendor_sim  # noqa: F401 - fixtures
from tests.inference_node.factories import NodeFactory
from tests.inference_node.server_helpers import node_process
from usage.seed import seed_catalog

NODE_TOKEN = "gateway-test-node-token"
SIM_MODELS = [
    ("sim-chat-small", "sim-chat-small", 8192),
    ("sim-chat-large", "sim-chat-large", 32768),
    ("sim-embed", "sim-embed", 8192),
]


@pytest.fixture(scope="session")
def sim():
    """One instant simulator node process for the whole session."""
    with node_process("--profile", "instant", "--token", NODE_TOKEN, via="module") as node:
        yield node


@dataclass
class Tenant:
    org: object
    owner: object
    actor: Actor
    key: object
    raw: str
    node: Node

    def new_key(self, **fields):
        return issue_key(self.actor, **fields)


def register_node(base_url: str, *, organization=None, name=None, **fields) -> Node:
    extra = {"name": name} if name else {}
    return NodeFactory(
        organization=organization,
        base_url=base_url,
        token=NODE_TOKEN,
        serves=SIM_MODELS,
        **extra,
        **fields,
    )


@pytest.fixture
def tenant(transactional_db, sim):
    seed_catalog()
    org = OrganizationFactory(name="Acme", slug="acme")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    actor = Actor(owner, "127.0.0.1")
    node = register_node(sim.base_url, name="sim-a")
    key, raw = issue_key(actor)
    return Tenant(org, owner, actor, key, raw, node)


def _flush_gateway_redis() -> None:
    if not django_settings.REDIS_URL:
        return
    import redis

    client = redis.Redis.from_url(django_settings.REDIS_URL)
    try:
        patterns = ("*gateway:rc:*", "*gateway:resp:*", "cap:*", "bal:*", "rl:*", "lim:*", "{k:*")
        for pattern in patterns:
            for name in client.scan_iter(pattern, count=1000):
                client.delete(name)
    finally:
        client.close()


@pytest.fixture
def gateway_settings(settings, tmp_path):
    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_RETRY_BACKOFF_SECONDS = 0.001
    settings.GATEWAY_QUEUE_TIMEOUT = 2.0
    _flush_gateway_redis()
    return settings


@pytest.fixture
def start_gateway(gateway_settings):
    """``with start_gateway(**kwargs) as gw:`` — a gateway on a free port."""
    stack = contextlib.ExitStack()

    def start(**kwargs):
        return stack.enter_context(running_gateway(**kwargs))

    with stack:
        yield start


@pytest.fixture
def gw(tenant, start_gateway):
    return start_gateway()
