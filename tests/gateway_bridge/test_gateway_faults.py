"""Nodes that fail, die, hang, answer garbage or are left mid-stream by the
client: the gateway retries before the first byte, opens circuits, bills a
broken stream for what was generated, and never leaves a reservation."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from datetime import UTC, datetime

import openai
import pytest

from accounts.keys import authenticated_view
from gateway_bridge.limits import plan
from tests.gateway_bridge.conftest import NODE_TOKEN, register_node
from tests.inference_node.server_helpers import node_process

CHAT = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hello"}]}


def client(gw, raw):
    return openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def failing_node():
    with node_process(
        "--profile", "instant", "--token", NODE_TOKEN, "--fault-500-rate", "1", via="module"
    ) as node:
        yield node


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@contextlib.contextmanager
def garbage_server(reply: bytes, hang: float = 0.0):
    """A loopback server answering every request with ``reply`` (after ``hang`` s)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                time.sleep(hang)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        sock.close()


def reserved_on(gw, key) -> int:
    """What the key's caps hold in reservations right now (0 when all settled)."""
    caps, _ = plan(authenticated_view(key), datetime.now(UTC))
    store = gw.gateway.limits.store
    return sum(gw.call(lambda c=c: store.snapshot(c.key))[1] for c in caps)


def test_failing_node_is_retried_elsewhere_and_its_circuit_opens(
    tenant, start_gateway, failing_node, settings
):
    settings.GATEWAY_BREAKER_MIN_CALLS = 10
    settings.GATEWAY_RETRIES = 2
    # Round robin: with prefix affinity every call (the same prompt) would go to
    # whichever node its hash ranks first, which depends on the node ids.
    settings.GATEWAY_ROUTING_POLICY = "round_robin"
    register_node(failing_node.base_url, name="bad", weight=5)
    gw = start_gateway()
    c = client(gw, tenant.raw)
    for _ in range(40):
        assert c.chat.completions.create(**CHAT, max_tokens=4).choices
    stats = gw.gateway.router.stats()["nodes"]
    assert stats["bad"]["state"] == "open"
    assert stats["bad"]["openings"] == 1
    failures = gw.gateway.metrics.node_outcomes[("bad", "failure")]
    assert 10 <= failures < 40  # once open, the bad node gets no more calls
    events = gw.emitter.wait_for(40)
    assert all(e["status_code"] == 200 and e["node_id"] == tenant.node.id for e in events)
    # The opening was reported (for the Errors page), with what the window held.
    sent = gw.gateway.circuits.send
    deadline = time.monotonic() + 5
    while not sent.transitions and time.monotonic() < deadline:
        time.sleep(0.02)
    (opened,) = sent.transitions
    assert (opened["node"], opened["state"], opened["reason"]) == ("bad", "open", "error_rate")
    assert opened["calls"] >= 10 and opened["errors"] >= 0.15 * opened["calls"]


def test_a_dead_node_is_retried_and_a_lone_dead_node_is_a_clear_502(
    tenant, start_gateway, settings
):
    dead = register_node(dead_url(), name="dead", weight=10)
    gw = start_gateway()
    c = client(gw, tenant.raw)
    assert c.chat.completions.create(**CHAT, max_tokens=4).choices  # went to sim-a
    tenant.node.delete()
    gw.gateway.state._nodes_dirty = True
    time.sleep(0.5)
    with pytest.raises(openai.APIStatusError) as failed:
        c.chat.completions.create(**CHAT, max_tokens=4)
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == "upstream_unreachable"
    events = gw.emitter.wait_for(2)
    assert events[1]["status_code"] == 502 and events[1]["node_id"] == dead.id
    assert events[1]["input_tokens"] == events[1]["output_tokens"] == 0


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\ncontent-type: application/json\r\n\r\nnot json!",
         "upstream_invalid_response"),
        (b"\x00\x01garbage that is not HTTP\r\n\r\n", "upstream_protocol"),
    ],
)  # fmt: skip
def test_garbage_from_the_node(tenant, start_gateway, settings, reply, code):
    settings.GATEWAY_RETRIES = 0
    tenant.node.delete()
    with garbage_server(reply) as url:
        register_node(url, name="garbage")
        gw = start_gateway()
        with pytest.raises(openai.APIStatusError) as failed:
            client(gw, tenant.raw).chat.completions.create(**CHAT)
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == code


def test_a_hanging_node_times_out(tenant, start_gateway, settings):
    settings.GATEWAY_RETRIES = 0
    settings.GATEWAY_FIRST_BYTE_TIMEOUT = 0.3
    tenant.node.delete()
    with garbage_server(b"", hang=2.0) as url:
        register_node(url, name="hang")
        gw = start_gateway()
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as failed:
            client(gw, tenant.raw).chat.completions.create(**CHAT)
        assert time.monotonic() - started < 1.5
    assert failed.value.status_code == 504
    assert failed.value.body["code"] == "upstream_first_byte_timeout"


@pytest.fixture(scope="module")
def slow_node():
    with node_process(
        "--profile", "custom", "--ttft-ms", "5", "--itl-ms", "20", "--jitter", "0",
        "--token", NODE_TOKEN, via="module",
    ) as node:  # fmt: skip
        yield node


def test_client_disconnect_bills_what_was_streamed(tenant, start_gateway, slow_node):
    tenant.node.delete()
    register_node(slow_node.base_url, name="slow")
    key, raw = tenant.new_key(spend_cap_daily=10**12)
    gw = start_gateway()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    body = {**CHAT, "max_tokens": 400, "stream": True}
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    assert resp.status == 200
    seen = 0
    while seen < 10:
        line = resp.fp.readline()
        if line.startswith(b"data: {"):
            seen += 1
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    [event] = gw.emitter.wait_for(1, timeout=15)
    assert event["status_code"] == 499 and event["error_type"] == "client_disconnected"
    # Billed for what was generated: not zero, not the 400-token budget.
    assert 5 <= event["output_tokens"] < 100
    assert event["input_tokens"] > 0
    assert reserved_on(gw, key) == 0
    assert gw.gateway.metrics.disconnects == 1


def test_response_cache_answers_deterministic_requests(tenant, start_gateway, sim):
    _, raw = tenant.new_key()
    gw = start_gateway()
    c = openai.OpenAI(
        api_key=raw,
        base_url=f"{gw.url}/v1",
        max_retries=0,
        default_headers={"x-gateway-cache": "on"},
    )
    body = {**CHAT, "temperature": 0, "max_tokens": 12}
    first = c.chat.completions.with_raw_response.create(**body)
    second = c.chat.completions.with_raw_response.create(**body)
    assert first.headers["x-gateway-cache"] == "miss"
    assert second.headers["x-gateway-cache"] == "hit"
    assert first.parse().choices[0].message.content == second.parse().choices[0].message.content
    streamed = list(c.chat.completions.create(**body, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices)
    assert text == first.parse().choices[0].message.content
    events = gw.emitter.wait_for(3)
    assert [e["cache_status"] for e in events][1:] == ["response_hit", "response_hit"]
    hit = events[1]
    assert hit["node_id"] is None and hit["input_tokens"] == 0
    assert hit["cache_read_tokens"] == events[0]["input_tokens"] + events[0]["cache_read_tokens"]
    # Not deterministic: never from the cache.
    c.chat.completions.create(**{**body, "temperature": 0.7})
    assert gw.emitter.wait_for(4)[3]["cache_status"] != "response_hit"


def _scrape(gw, headers=None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=5)
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


METRICS_AUTH = {"Authorization": "Bearer metrics-secret"}


@pytest.fixture
def metrics_token(settings):
    settings.GATEWAY_METRICS_TOKEN = "metrics-secret"


def test_metrics_are_closed_by_default(tenant, start_gateway, settings):
    # Given the default settings: no token, not opened
    settings.GATEWAY_METRICS_TOKEN = ""
    settings.GATEWAY_METRICS_PUBLIC = False
    gw = start_gateway()
    client(gw, tenant.raw).chat.completions.create(**CHAT, max_tokens=3)
    # Then an anonymous scrape learns nothing (no node names, no counters)
    status, text = _scrape(gw)
    assert status == 401 and "gateway_requests_total" not in text
    assert tenant.node.name not in text
    # and a gateway started with them opened on purpose serves them to anyone
    settings.GATEWAY_METRICS_PUBLIC = True
    opened = start_gateway()
    client(opened, tenant.raw).chat.completions.create(**CHAT, max_tokens=3)
    status, text = _scrape(opened)
    assert status == 200 and "gateway_requests_total" in text


def test_metrics_need_the_token_when_one_is_set(metrics_token, tenant, start_gateway, settings):
    settings.GATEWAY_METRICS_PUBLIC = True  # a token, once set, is always required
    gw = start_gateway()
    assert _scrape(gw)[0] == 401
    assert _scrape(gw, {"Authorization": "Bearer wrong"})[0] == 401
    assert _scrape(gw, {"Authorization": "metrics-secret"})[0] == 401
    status, text = _scrape(gw, METRICS_AUTH)
    assert status == 200 and "gateway_requests_total" in text


def test_metrics_endpoint(metrics_token, gw, tenant):
    client(gw, tenant.raw).chat.completions.create(**CHAT, max_tokens=3)
    status, text = _scrape(gw, METRICS_AUTH)
    assert status == 200
    assert (
        'gateway_requests_total{protocol="openai",endpoint="chat.completions",'
        'model="sim-chat-small",status="200"} 1' in text
    )
    assert "gateway_request_duration_seconds_bucket" in text
    assert "gateway_node_in_flight" in text and "gateway_spool_batches" in text


def test_priority_queue_when_nodes_are_full(tenant, start_gateway, slow_node, settings):
    settings.GATEWAY_QUEUE_TIMEOUT = 0.3
    tenant.node.delete()
    register_node(slow_node.base_url, name="slow", max_concurrency=1)
    gw = start_gateway()

    async def run():
        c = openai.AsyncOpenAI(api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0)
        try:

            async def one():
                try:
                    return await c.chat.completions.create(**CHAT, max_tokens=30)
                except openai.APIStatusError as exc:
                    return exc

            return await asyncio.gather(*(one() for _ in range(3)))
        finally:
            await c.close()

    results = asyncio.run(run())
    refused = [r for r in results if isinstance(r, openai.APIStatusError)]
    assert refused and all(r.status_code == 503 for r in refused)
    assert {r.body["code"] for r in refused} == {"queue_timeout"}
    assert any(not isinstance(r, Exception) for r in results)


def test_metrics_show_when_a_key_change_was_heard(metrics_token, gw, tenant):
    from accounts.services import api_key_revoke

    def metric(name: str) -> float:
        _, text = _scrape(gw, METRICS_AUTH)
        line = next(x for x in text.splitlines() if x.startswith(name + " "))
        return float(line.rsplit(" ", 1)[1])

    before = metric("gateway_key_invalidations_total")
    t0 = time.time()
    api_key_revoke(actor=tenant.actor, key_id=tenant.key.id)
    deadline = time.monotonic() + 5
    while metric("gateway_key_invalidations_total") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    # heard at least once (in process, and again over Redis pub/sub when configured)
    assert metric("gateway_key_invalidations_total") >= before + 1
    heard = metric("gateway_last_key_invalidation_timestamp_seconds")
    assert t0 <= heard <= time.time()
