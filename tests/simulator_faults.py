"""Real calls through the real gateway to the bundled simulator node, and
the simulator's fault controls (``POST /admin/faults``: answer 500s, stall
before the first token). Shared by the tests that inject an outage into
real traffic (alerts, the SLA ledger)."""

from __future__ import annotations

import contextlib
import http.client
import json
from collections.abc import Iterator
from typing import NamedTuple
from urllib.parse import urlsplit

from tests.inference_node.server_helpers import node_process
from usage.ingest import ingest_events

TOKEN = "sim-faults-token"
CHAT = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hello there"}]}


class Reply(NamedTuple):
    status: int
    body: bytes
    request_id: str  # the gateway's ``x-request-id`` ("" without one)


@contextlib.contextmanager
def simulator() -> Iterator:
    """A simulator process of the caller's own (its faults reach no other test)."""
    with node_process("--profile", "instant", "--token", TOKEN, via="module") as node:
        yield node


def request(base_url, method, path, body=None, headers=None) -> Reply:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
    try:
        conn.request(method, path, body=json.dumps(body) if body else None, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, resp.read(), resp.getheader("x-request-id") or "")
    finally:
        conn.close()


def faults(sim, **fields) -> None:
    """Set the simulator's faults (``fault_500_rate``, ``spike_rate``, ``spike_ms`` ...)."""
    reply = request(
        sim.base_url,
        "POST",
        "/admin/faults",
        fields,
        {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert reply.status == 200, reply.body


def drive_replies(gw, raw, n) -> list[Reply]:
    """``n`` chat calls through the gateway with the key ``raw``; the usage
    events the gateway emitted for them are ingested (the real ingest)."""
    before = gw.emitter.emitted
    replies = [
        request(
            gw.url,
            "POST",
            "/v1/chat/completions",
            CHAT,
            {"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
        )
        for _ in range(n)
    ]
    events = gw.emitter.wait_for(before + n)[before:]
    ingest_events(events)
    return replies


def drive(gw, raw, n) -> list[int]:
    """As ``drive_replies``: the statuses the client saw."""
    return [r.status for r in drive_replies(gw, raw, n)]
