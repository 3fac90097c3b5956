"""``manage.py simulator_faults``: faults injected into a running demo simulator,
started as ``manage.py up`` starts it, named by its registered node; and the
admin endpoint's guard (the secret, loopback peers only)."""

from __future__ import annotations

import io
import json
import time
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from accounts.actors import Actor
from console.management.commands.up import _simulator
from console.management.demo import (
    SIMULATOR_MODELS,
    SIMULATOR_NODE_NAME,
    ensure_simulator_node,
)
from inference_node.models import Node, NodeHealth
from inference_node.selectors import invalidate_routing_snapshot
from tests.factories import issue_key
from tests.gateway_bridge.harness import running_gateway
from tests.inference_node.server_helpers import _start_process, inprocess_node, stop_process
from tests.simulator_faults import request
from tests.usage.conftest import catalog  # noqa: F401 - the seeded catalogue
from tooling.simulator.admin import (
    ADMIN_SECRET_ENV,
    ADMIN_SECRET_HEADER,
    FaultControl,
    FaultControlError,
    check_admin_secret,
    derive_admin_secret,
    is_loopback_peer,
)
from tooling.simulator.app import NodeApp
from tooling.simulator.config import FaultSettings
from tooling.simulator.errors import ApiError
from tooling.simulator.faults import FaultInjector

from .server_helpers import node_config

CHAT = "/v1/chat/completions"
BODY = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def demo_sim():
    """The demo's own simulator, with the argv and the admin secret ``up`` gives it."""
    models = ",".join(f"{name}:{context}" for name, context in SIMULATOR_MODELS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ADMIN_SECRET_ENV, derive_admin_secret(settings.SECRET_KEY))
        node = _start_process(_simulator(0, models), "")
    try:
        yield node
    finally:
        stop_process(node.process)


@pytest.fixture
def registered(db, demo_sim):
    ensure_simulator_node(demo_sim.port)
    yield demo_sim
    call_command("simulator_faults", node=SIMULATOR_NODE_NAME, clear=True, stdout=io.StringIO())


def faults(*args: str) -> str:
    out = io.StringIO()
    call_command("simulator_faults", *args, stdout=out)
    return out.getvalue()


def test_an_error_rate_of_one_fails_every_call_until_cleared(registered):
    assert registered.post(CHAT, BODY)[0] == 200
    said = faults("--node", SIMULATOR_NODE_NAME, "--error-rate", "1.0", "--status", "503")
    assert "503: 1" in said
    status, _, body = registered.post(CHAT, BODY)
    assert status == 503
    assert body["error"]["code"] == "overloaded"
    assert "no injected errors" in faults("--node", SIMULATOR_NODE_NAME, "--clear")
    assert registered.post(CHAT, BODY)[0] == 200


def test_injected_latency_delays_each_call(registered):
    faults("--node", SIMULATOR_NODE_NAME, "--latency-ms", "400")
    started = time.perf_counter()
    assert registered.post(CHAT, BODY)[0] == 200
    assert time.perf_counter() - started >= 0.4


def test_faults_set_for_a_while_are_undone_after_it(registered):
    said = faults("--node", SIMULATOR_NODE_NAME, "--error-rate", "1", "--for", "0.5s")
    assert "undone in" in said
    assert registered.post(CHAT, BODY)[0] == 500
    time.sleep(0.7)
    assert registered.post(CHAT, BODY)[0] == 200


def test_list_shows_the_demo_simulator_and_its_faults(registered):
    faults("--node", SIMULATOR_NODE_NAME, "--error-rate", "0.25")
    listed = faults("--list")
    assert SIMULATOR_NODE_NAME in listed
    assert f"127.0.0.1:{registered.port}" in listed
    assert "500: 0.25" in listed


def test_an_unknown_node_or_a_bad_duration_is_refused(registered):
    with pytest.raises(CommandError, match="no shared node"):
        faults("--node", "nope", "--error-rate", "1")
    with pytest.raises(CommandError, match="duration"):
        faults("--node", SIMULATOR_NODE_NAME, "--error-rate", "1", "--for", "soon")
    assert registered.post(CHAT, BODY)[0] == 200


def test_the_admin_endpoint_wants_the_secret_not_a_gateway_key(demo_sim):
    for headers in ({}, {"authorization": "Bearer anything"}, {ADMIN_SECRET_HEADER: "wrong"}):
        status, _, body = demo_sim.request("GET", "/admin/faults", headers=headers)
        assert status == 401, headers
        assert body["error"]["code"] == "invalid_admin_secret"
    secret = derive_admin_secret(settings.SECRET_KEY)
    status, _, _ = demo_sim.request("GET", "/admin/faults", headers={ADMIN_SECRET_HEADER: secret})
    assert status == 200


def test_the_node_token_no_longer_opens_the_admin_endpoint_with_a_secret():
    with inprocess_node("--token", "node-token", "--admin-secret", "s3cret") as node:
        assert node.request("GET", "/admin/faults")[0] == 401
        headers = {ADMIN_SECRET_HEADER: "s3cret"}
        assert node.request("GET", "/admin/faults", headers=headers)[0] == 200


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        (("127.0.0.1", 5000), True),
        (("127.8.9.10", 5000), True),
        (("::1", 5000, 0, 0), True),
        (("::ffff:127.0.0.1", 5000, 0, 0), True),
        (("10.0.0.5", 5000), False),
        (("192.168.1.2", 5000), False),
        (("::ffff:10.0.0.5", 5000, 0, 0), False),
        (("2001:db8::1", 5000, 0, 0), False),
        (None, False),
        ("/tmp/sock", False),
    ],
)
def test_only_loopback_peers_count_as_loopback(peer, loopback):
    assert is_loopback_peer(peer) is loopback


def test_a_non_loopback_peer_is_refused_even_with_the_secret():
    with pytest.raises(ApiError) as refused:
        check_admin_secret("s3cret", b"s3cret", ("10.1.2.3", 4444))
    assert refused.value.status == 403
    check_admin_secret("s3cret", b"s3cret", ("127.0.0.1", 4444))  # allowed

    app = NodeApp(node_config("--admin-secret", "s3cret"))
    request = SimpleNamespace(headers={ADMIN_SECRET_HEADER: "s3cret"})
    remote = SimpleNamespace(wire=SimpleNamespace(get_extra_info=lambda name: ("10.1.2.3", 1)))
    with pytest.raises(ApiError) as refused:
        app._check_admin(request, remote)
    assert refused.value.code == "admin_not_loopback"


def test_a_timed_change_is_undone_when_it_runs_out():
    now = [100.0]
    injector = FaultInjector(FaultSettings(spike_ms=20.0), clock=lambda: now[0])
    injector.update({"fault_500_rate": 1.0}, for_seconds=600)
    assert injector.decide().status == 500
    assert injector.expires_in() == 600
    now[0] += 599
    assert injector.decide().status == 500
    now[0] += 2
    assert injector.decide().status == 0
    assert injector.settings == FaultSettings(spike_ms=20.0)
    assert injector.expires_in() is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("catalog")
def test_a_call_through_the_gateway_fails_with_the_injected_status(
    demo_sim, owner, settings, tmp_path
):
    """The simulator's injected 503 reaches the caller as the gateway's 502
    ``upstream_error``; cleared, the same call succeeds again."""
    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_RETRY_BACKOFF_SECONDS = 0.001
    ensure_simulator_node(demo_sim.port)
    Node.objects.filter(name=SIMULATOR_NODE_NAME).update(health=NodeHealth.HEALTHY)
    invalidate_routing_snapshot()
    _key, raw = issue_key(Actor(owner, "127.0.0.1"))
    headers = {"Authorization": f"Bearer {raw}", "Content-Type": "application/json"}

    def call(gw) -> tuple[int, bytes]:
        reply = request(gw.url, "POST", CHAT, BODY, headers)
        return reply.status, reply.body

    try:
        with running_gateway() as gw:
            assert call(gw)[0] == 200
            faults("--node", SIMULATOR_NODE_NAME, "--error-rate", "1.0", "--status", "503")
            status, body = call(gw)
            assert status == 502
            assert json.loads(body)["error"]["code"] == "upstream_error"
            faults("--node", SIMULATOR_NODE_NAME, "--clear")
            assert call(gw)[0] == 200
    finally:
        faults("--node", SIMULATOR_NODE_NAME, "--clear")


def test_the_admin_client_sets_times_and_clears_faults():
    with inprocess_node("--admin-secret", "s3cret", "--fault-429-rate", "0.5") as node:
        control = FaultControl(node.base_url, "s3cret")
        state = control.set({"fault_500_rate": 1.0}, for_seconds=600)
        assert state.settings["fault_500_rate"] == 1.0
        assert 590 < (control.get().expires_in or 0) <= 600
        state = control.clear()
        assert state.settings["fault_500_rate"] == 0.0
        assert state.settings["fault_429_rate"] == 0.5  # what it started with
        assert state.expires_in is None
        headers = {ADMIN_SECRET_HEADER: "s3cret"}
        status, _, body = node.post(
            "/admin/faults?for_seconds=-1", {"fault_500_rate": 1.0}, headers=headers
        )
        assert status == 400 and body["error"]["param"] == "for_seconds"
        with pytest.raises(FaultControlError, match="401"):
            FaultControl(node.base_url, "wrong").get()
    with pytest.raises(FaultControlError, match="not a loopback"):
        FaultControl("http://10.0.0.5:9001", "s3cret")
