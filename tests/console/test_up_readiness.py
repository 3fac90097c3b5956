"""What ``manage.py up`` waits for before ``Ready.``: its demo upstreams
probed healthy (with the registry's own probe), and what it says while it
waits; and the demo key's check through a real gateway. The whole start-up is
in test_up."""

from __future__ import annotations

import socket
import time

import pytest

from console.management import readiness
from console.management.readiness import DemoCall, Waiter, check_demo_key, probe_until_healthy
from inference_node.models import NodeHealth
from tests.inference_node.factories import NodeFactory
from tests.inference_node.server_helpers import inprocess_node

pytestmark = pytest.mark.django_db


def _waiter(said: list[str], timeout: float = 30.0) -> Waiter:
    return Waiter(say=said.append, alive=lambda: True, timeout=timeout)


def test_an_unhealthy_demo_node_is_probed_until_healthy_before_the_server_starts():
    # Given the simulator node as a previous run left it: down (and so not routed).
    with inprocess_node() as node:
        sim = NodeFactory(
            name="simulator-1",
            base_url=node.base_url,
            token=node.token,
            health=NodeHealth.UNHEALTHY,
        )
        said: list[str] = []
        # When up probes it.
        assert probe_until_healthy(["simulator-1"], _waiter(said))
    # Then it is healthy (two good probes in a row, as NODE_HEALTHY_AFTER asks), quietly.
    sim.refresh_from_db()
    assert sim.health == NodeHealth.HEALTHY and sim.consecutive_successes >= 2
    assert said == []


def test_a_node_that_never_answers_is_named_while_up_waits_and_then_stops_it(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    NodeFactory(name="simulator-1", base_url=f"http://127.0.0.1:{port}", health=NodeHealth.UNKNOWN)
    monkeypatch.setattr(readiness, "SLOW_SECONDS", 0.0)
    said: list[str] = []
    with pytest.raises(TimeoutError, match=r"not ready within 2 s: simulator-1 to be probed"):
        probe_until_healthy(["simulator-1"], _waiter(said, timeout=2.0))
    assert said and said[0].startswith("Waiting for simulator-1 to be probed healthy (")
    assert len(said) <= 2, said  # one line per new reason, not one per probe


def test_a_stop_request_ends_the_wait():
    NodeFactory(name="simulator-1", base_url="http://127.0.0.1:9", health=NodeHealth.UNKNOWN)
    waiter = Waiter(say=lambda line: None, alive=lambda: False, timeout=30.0)
    assert probe_until_healthy(["simulator-1"], waiter) is False


# --- the demo key's calls, through a real gateway ---------------------------------------


def test_the_demo_key_check_lists_and_calls_every_model_with_one_output_token(gw, tenant):
    calls = [DemoCall("sim-chat-small"), DemoCall("sim-embed", "embeddings")]
    said: list[str] = []
    assert check_demo_key(gw.host, gw.port, tenant.raw, calls, _waiter(said))
    events = gw.emitter.wait_for(2)
    assert [(e["model"], e["status_code"]) for e in events] == [
        ("sim-chat-small", 200),
        ("sim-embed", 200),
    ]
    # Ordinary calls of the key's organization, as little as a call can be.
    assert {e["organization_id"] for e in events} == {tenant.org.pk}
    assert events[0]["output_tokens"] == 1
    assert said == []


def test_a_refused_demo_key_stops_up_at_once_with_the_gateways_reason(gw, tenant):
    waiter = _waiter([], timeout=30.0)
    with pytest.raises(RuntimeError, match=r"GET /v1/models with the demo key: 401 "):
        check_demo_key(gw.host, gw.port, "sk-not-a-key", [DemoCall("sim-chat-small")], waiter)
    assert time.monotonic() - waiter.started < 5  # not waited out


def test_a_model_the_gateway_does_not_route_is_named_while_up_waits(gw, tenant, monkeypatch):
    monkeypatch.setattr(readiness, "SLOW_SECONDS", 0.0)
    said: list[str] = []
    calls = [DemoCall("sim-chat-small"), DemoCall("sim-gpt")]  # no channel serves sim-gpt here
    with pytest.raises(TimeoutError, match="the gateway to list sim-gpt"):
        check_demo_key(gw.host, gw.port, tenant.raw, calls, _waiter(said, timeout=1.5))
    assert said == ["Waiting for the gateway to list sim-gpt ..."]
    assert gw.emitter.events == []  # no call made before every model is listed
