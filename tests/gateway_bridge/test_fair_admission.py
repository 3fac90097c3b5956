"""Fair admission (issue 19, gateway_bridge.pipeline.fair): one tenant's flood
of large bodies that fail validation does not stall another organization's
calls, and a tenant holds at most its slots of large bodies at once."""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import subprocess
import sys
import textwrap
import time

import orjson
import pytest

from accounts.actors import Actor
from accounts.models import Role
from tests.factories import MembershipFactory, OrganizationFactory, issue_key

pytestmark = pytest.mark.django_db(transaction=True)

#: What the red team sent: ~100,000 messages in 3.5 MB, refused with 400 (a bad role).
FLOOD_SCRIPT = textwrap.dedent(
    """
    import http.client, os, sys, threading, time, orjson
    os.nice(19)  # the attacker's CPU is not the server's: this machine stands in for both
    port, key, seconds, workers = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    msgs = [{"role": "user", "content": "hi " * 3} for _ in range(100_000)]
    msgs.append({"role": "villain", "content": "x"})
    body = orjson.dumps({"model": "sim-chat-small", "messages": msgs, "max_tokens": 4})
    assert len(body) < 4 * 1024 * 1024
    statuses = {}
    lock = threading.Lock()
    print("ready", flush=True)
    end = time.monotonic() + seconds
    def run():
        conn = None
        while time.monotonic() < end:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("POST", "/v1/chat/completions", body,
                             {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
                status = conn.getresponse().status
            except OSError:
                status = 0
            finally:
                conn.close()
            with lock:
                statuses[str(status)] = statuses.get(str(status), 0) + 1
    threads = [threading.Thread(target=run) for _ in range(workers)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(orjson.dumps(statuses).decode(), flush=True)
    """
)


def other_org_key() -> str:
    org = OrganizationFactory(name="Bystander", slug="bystander")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    _, raw = issue_key(Actor(owner, "127.0.0.1"))
    return raw


def models_latencies(port: int, key: str, seconds: float) -> list[float]:
    """A tiny call (the model list) again and again, on one kept-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        out.append(time.perf_counter() - t0)
        time.sleep(0.005)
    conn.close()
    return out


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def test_a_flood_of_large_invalid_bodies_does_not_stall_another_orgs_calls(
    tenant, start_gateway, settings
):
    settings.GATEWAY_PARSE_WORKERS = 1
    gw = start_gateway()
    bystander = other_org_key()
    models_latencies(gw.port, bystander, 0.5)  # warm: key cached, connection open
    calm = models_latencies(gw.port, bystander, 2.0)
    flood = subprocess.Popen(  # our own script, in another process (its own GIL)
        [sys.executable, "-c", FLOOD_SCRIPT, str(gw.port), tenant.raw, "6", "40"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert flood.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # the flood under way
        during = models_latencies(gw.port, bystander, 4.0)
        statuses = json.loads(flood.stdout.readline())
    finally:
        flood.kill()
        flood.wait()
    # Every flooding call was refused: 400 from the parse worker, 429 for want of a
    # slot (answered before the body is read, then the connection is closed: a
    # sender still writing may see only the reset, 0 here).
    assert set(statuses) <= {"400", "429", "0"}, statuses
    assert statuses.get("400", 0) >= 2
    assert statuses.get("429", 0) + statuses.get("0", 0) > statuses.get("400", 0)
    # Before: each of those bodies held the loop ~0.1 s, and the bystander's calls
    # queued behind 40 of them for seconds (p99 4 to 6 s on the test machine). The
    # margin is for a shared, busy test machine; the soak measures it properly.
    assert p99(during) < 2 * p99(calm) + 0.5, (p99(calm), p99(during), max(during))


def test_a_tenant_holds_at_most_its_large_body_slots_and_others_are_unaffected(
    tenant, start_gateway, settings
):
    settings.GATEWAY_LARGE_BODY_BYTES = 16 * 1024
    settings.GATEWAY_LARGE_BODY_CONCURRENCY = 1
    gw = start_gateway()
    bystander = other_org_key()
    headers = "Content-Type: application/json\r\nContent-Length: 1000000\r\n"
    # One large body being sent slowly holds the tenant's only slot...
    slow = socket.create_connection(("127.0.0.1", gw.port))
    slow.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tenant.raw}\r\n"
        f"{headers}\r\n".encode()
        + b'{"model": "sim-chat-small", "messages": ['
    )
    time.sleep(0.3)
    big = orjson.dumps(
        {"model": "sim-chat-small", "messages": [{"role": "user", "content": "a" * 20_000}]}
    )

    def post(key: str, body: bytes):
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
        conn.request(
            "POST",
            "/v1/chat/completions",
            body,
            {"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, response.getheader("retry-after"), data

    # ... so its next large one is refused at once, before its body is read,
    status, retry_after, data = post(tenant.raw, big)
    assert status == 429
    assert retry_after == "1"
    assert json.loads(data)["error"]["code"] == "large_requests_in_flight"
    # while its small calls and another organization's large ones are served.
    small = orjson.dumps(
        {
            "model": "sim-chat-small",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
        }
    )
    assert post(tenant.raw, small)[0] == 200
    status, _, _ = post(bystander, big[:-1] + b', "max_tokens": 4}')
    assert status == 200
    slow.close()
    # The slot is free again once the slow request is gone.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        status, _, _ = post(tenant.raw, big[:-1] + b', "max_tokens": 4}')
        if status == 200:
            break
        time.sleep(0.1)
    assert status == 200


def test_a_large_invalid_body_is_refused_with_the_same_error_as_on_the_loop(
    tenant, start_gateway, settings
):
    settings.GATEWAY_LARGE_BODY_BYTES = 64 * 1024
    gw = start_gateway()
    bad = orjson.dumps(
        {"model": "sim-chat-small", "messages": [{"role": "villain", "content": "a" * 100_000}]}
    )
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request(
        "POST",
        "/v1/chat/completions",
        bad,
        {"Authorization": f"Bearer {tenant.raw}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    error = json.loads(response.read())["error"]
    assert response.status == 400
    assert "'villain'" in error["message"]


def count_tokens(port: int, key: str, body: bytes):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "POST",
        "/v1/messages/count_tokens",
        body,
        {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"},
    )
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_a_large_token_count_is_counted_off_the_loop_with_the_same_answer(
    tenant, start_gateway, settings
):
    text = " ".join(f"word{i}" for i in range(6000))
    body = orjson.dumps(
        {"model": "sim-chat-small", "messages": [{"role": "user", "content": text}]}
    )
    settings.GATEWAY_LARGE_BODY_BYTES = 1 << 30  # counted on the loop
    with_loop = start_gateway()
    on_loop = count_tokens(with_loop.port, tenant.raw, body)
    settings.GATEWAY_LARGE_BODY_BYTES = 16 * 1024  # counted in a parse worker
    worker_gw = start_gateway()
    in_worker = count_tokens(worker_gw.port, tenant.raw, body)
    assert on_loop[0] == in_worker[0] == 200
    assert in_worker[1] == on_loop[1]
    assert in_worker[1]["input_tokens"] > 6000
    # A malformed large body is refused from the worker, as on the loop.
    status, answer = count_tokens(worker_gw.port, tenant.raw, b"{" + b" " * 20_000 + b"[")
    assert status == 400
    assert answer["error"]["type"] == "invalid_request_error"
