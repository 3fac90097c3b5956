"""A simulator node with a saturation point behind the real gateway, and an
organization whose owner runs load tests against it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest

from accounts.actors import Actor
from accounts.models import Role
from tests.factories import MembershipFactory, OrganizationFactory
from tests.gateway_bridge.conftest import NODE_TOKEN, _flush_gateway_redis, register_node
from tests.gateway_bridge.harness import running_gateway
from tests.inference_node.server_helpers import node_process
from usage.seed import seed_catalog

SATURATION = 6  # the node runs at most this many sequences at once; the rest queue


@pytest.fixture(scope="module")
def saturating_sim():
    """Every call takes ~100 ms of model time (20 ms to the first token, then 8
    tokens 10 ms apart), whatever the load, and at most SATURATION run at once."""
    flags = ("--profile", "custom", "--ttft-ms", "20", "--itl-ms", "10", "--prefill-us-per-token",
             "0", "--load-factor", "0", "--jitter", "0", "--max-running", str(SATURATION))  # fmt: skip
    with node_process(*flags, "--token", NODE_TOKEN, via="module") as node:
        yield node


@dataclass
class Lab:
    org: object
    owner: object
    actor: Actor
    gateway: object


@pytest.fixture
def lab(transactional_db, saturating_sim, settings, tmp_path):
    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_QUEUE_TIMEOUT = 10.0
    _flush_gateway_redis()
    seed_catalog()
    org = OrganizationFactory(name="Lab", slug="lab")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    register_node(saturating_sim.base_url, name="sim-saturating")
    with contextlib.ExitStack() as stack:
        gw = stack.enter_context(running_gateway())
        settings.CAPACITY_GATEWAY_URL = gw.url
        yield Lab(org, owner, Actor(owner, "127.0.0.1"), gw)
