"""What ``manage.py up`` waits for before it prints ``Ready.``: the first
call a newcomer makes must succeed.

Why there is anything to wait for: a self-hosted node (the bundled simulator)
takes calls only once it has been probed healthy, and the gateway routes by a
snapshot of the registry that it takes when it starts and then re-reads every
second. Left to Celery beat, the first probe round comes a probe interval
after beat and the worker have booted, and the gateway sees its result a
second later: for the first five to ten seconds after the server answered,
every call on the simulator's models got ``503 no_healthy_node`` and
``GET /v1/models`` listed none of them.

So ``up`` (1) probes the demo upstreams itself, with the registry's own probe
and record code (the same health flips and audit events as a scheduled round),
until each is healthy, **before** it starts the web server, so the gateway's
first snapshot already routes them; then (2) once the server answers, it
checks from the outside, with the demo key when it has the raw key in hand
(a key is issued): ``GET /v1/models`` lists every demo model, then one real
call per model with one output token at most. Those calls are ordinary calls
of the demo organization: they are billed (a few micro-dollars) and show in
its call log (a fraction of a cent), which ``up`` says when it prints them.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inference_node.facade import Node, NodeHealth, probe_nodes

SLOW_SECONDS = 10.0  # past this, say what is being waited for


@dataclass(frozen=True)
class DemoCall:
    """One verification call: a model and the OpenAI endpoint it is called on."""

    model: str
    endpoint: str = "chat.completions"  # or "embeddings"

    def request(self) -> tuple[str, dict]:
        if self.endpoint == "embeddings":
            return "/v1/embeddings", {"model": self.model, "input": "Ready?"}
        return "/v1/chat/completions", {
            "model": self.model,
            "messages": [{"role": "user", "content": "Ready?"}],
            "max_tokens": 1,
        }


class Waiter:
    """A deadline, the supervisor's liveness check (raises when a child died;
    ``False`` when a stop was asked), and one "Waiting for ..." line per new
    reason once the wait has been long enough to be noticed."""

    def __init__(self, *, say: Callable[[str], None], alive: Callable[[], bool], timeout: float):
        self.say = say
        self.alive = alive
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.timeout = timeout
        self._said: set[str] = set()

    def wait(self, reason: str, pause: float = 0.25) -> bool:
        """Note ``reason`` and sleep a little; ``False`` when asked to stop.
        Raises ``TimeoutError`` past the deadline."""
        now = time.monotonic()
        if now > self.deadline:
            raise TimeoutError(f"not ready within {self.timeout:.0f} s: {reason}")
        if now - self.started >= SLOW_SECONDS and reason not in self._said:
            self._said.add(reason)
            self.say(f"Waiting for {reason} ...")
        time.sleep(pause)
        return self.alive()


def wait_for_port(host: str, port: int, what: str, waiter: Waiter) -> bool:
    """Until ``host:port`` accepts a connection (``what`` names it in the
    "Waiting for" line); ``False`` when asked to stop first."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            pass
        if not waiter.wait(f"{what} on {host}:{port}", pause=0.1):
            return False


def probe_until_healthy(names: Sequence[str], waiter: Waiter) -> bool:
    """Probe the shared nodes ``names`` until every one is healthy (a node
    that was unhealthy needs ``NODE_HEALTHY_AFTER`` good probes in a row, as
    always). ``False`` when asked to stop first."""
    while True:
        nodes = list(Node.objects.filter(organization=None, name__in=names).order_by("name"))
        probe_nodes(nodes)
        waiting = [
            n
            for n in Node.objects.filter(pk__in=[n.pk for n in nodes]).order_by("name")
            if n.health != NodeHealth.HEALTHY
        ]
        if not waiting:
            return True
        reason = "; ".join(
            f"{n.name} to be probed healthy ({n.last_error or n.health})" for n in waiting
        )
        if not waiter.wait(reason, pause=0.5):
            return False


def _request(host: str, port: int, key: str, method: str, path: str, body: dict | None):
    """``(status, JSON body)``; a connection that fails is status 0 (waited out
    like a 5xx: the server may be restarting, and a dead one stops ``up``)."""
    try:
        return _exchange(host, port, key, method, path, body)
    except OSError as exc:
        return 0, {"error": {"code": type(exc).__name__}}


def _exchange(host: str, port: int, key: str, method: str, path: str, body: dict | None):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = {}
    return resp.status, payload if isinstance(payload, dict) else {}


def _error(status: int, payload: dict) -> str:
    err = payload.get("error") if isinstance(payload, dict) else None
    code = err.get("code") or err.get("type") if isinstance(err, dict) else None
    if status == 0:
        return f"no answer ({code})"
    return f"{status} {code}" if code else str(status)


def check_demo_key(
    host: str, port: int, key: str, calls: Sequence[DemoCall], waiter: Waiter
) -> bool:
    """Through the gateway with the demo key: ``GET /v1/models`` lists every
    model of ``calls``, then each call answers 200. A 5xx or 429 is waited
    out until the deadline; any other refusal is an error at once. ``False``
    when asked to stop first."""
    wanted = {c.model for c in calls}
    while True:
        status, payload = _request(host, port, key, "GET", "/v1/models", None)
        listed = {m.get("id") for m in payload.get("data", ())} if status == 200 else set()
        missing = sorted(wanted - listed)
        if not missing:
            break
        if 0 < status < 500 and status not in (200, 429):
            raise RuntimeError(f"GET /v1/models with the demo key: {_error(status, payload)}")
        if not waiter.wait(f"the gateway to list {', '.join(missing)}"):
            return False
    for call in calls:
        path, body = call.request()
        while True:
            status, payload = _request(host, port, key, "POST", path, body)
            if status == 200:
                break
            if 0 < status < 500 and status != 429:
                raise RuntimeError(
                    f"a call on {call.model} with the demo key: {_error(status, payload)}"
                )
            if not waiter.wait(f"{call.model} to answer (last: {_error(status, payload)})"):
                return False
    return True
