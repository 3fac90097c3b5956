"""The prober against a real simulator node process (``manage.py run_node``):
healthy with its models and metrics read back, unhealthy once the process is
gone, healthy again after it restarts on the same port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from accounts.models import AuditEvent
from inference_node import health
from inference_node.models import Node, NodeHealth
from inference_node.selectors import invalidate_routing_snapshot, routing_snapshot
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
NODE_TOKEN = "process-test-token-4242"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NodeProcess:
    def __init__(self, port: int):
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    def start(self, timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "run_node",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--profile",
                "instant",
                "--models",
                "sim-chat:8192",
                "--token",
                NODE_TOKEN,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.output.append(line)
                if "Node listening on http://" in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("run_node did not become ready:\n" + "".join(self.output))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def node_process():
    process = NodeProcess(_free_port())
    yield process
    process.stop()


def _probe(node: Node) -> Node:
    health.probe_nodes([Node.objects.get(pk=node.pk)])
    node.refresh_from_db()
    return node


def test_probes_follow_a_real_node_process_down_and_up(org, node_process, settings):
    settings.NODE_PROBE_TIMEOUT_SECONDS = 2
    node_process.start()
    node = NodeFactory(
        organization=None,  # a shared platform node: its /metrics is read
        base_url=f"http://127.0.0.1:{node_process.port}",
        token=NODE_TOKEN,
        health=NodeHealth.UNKNOWN,
        serves=[("chat", "sim-chat", None)],
    )

    # Up: healthy, its models discovered, its vLLM-style metrics parsed.
    node = _probe(node)
    assert node.health == NodeHealth.HEALTHY, node.last_error
    assert {"id": "sim-chat", "max_model_len": 8192} in node.discovered_models
    assert node.metrics_available
    assert node.running == 0 and node.waiting == 0
    assert node.kv_cache_usage is not None and 0.0 <= node.kv_cache_usage <= 1.0
    invalidate_routing_snapshot()
    (routable,) = routing_snapshot().for_model("chat", org.pk)
    assert routable.upstream_model == "sim-chat" and routable.context_window == 8192

    # Down: NODE_UNHEALTHY_AFTER failed probes mark it unhealthy.
    node_process.stop()
    for _ in range(settings.NODE_UNHEALTHY_AFTER):
        node = _probe(node)
    assert node.health == NodeHealth.UNHEALTHY
    assert node.last_error == "cannot connect (connection refused)"
    invalidate_routing_snapshot()
    assert routing_snapshot().for_model("chat", org.pk) == ()

    # Restarted on the same port: NODE_HEALTHY_AFTER successes bring it back.
    node_process.start()
    for _ in range(settings.NODE_HEALTHY_AFTER):
        node = _probe(node)
    assert node.health == NodeHealth.HEALTHY and node.last_error == ""
    actions = list(
        AuditEvent.objects.filter(target_id=str(node.pk))
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["node.healthy", "node.unhealthy", "node.healthy"]


def test_a_wrong_token_is_reported_by_the_real_node(org, node_process):
    node_process.start()
    node = NodeFactory(
        organization=org, base_url=f"http://127.0.0.1:{node_process.port}", token="wrong-token-xyz1"
    )
    node = _probe(node)
    assert "HTTP 401" in node.last_error and node.consecutive_failures == 1
