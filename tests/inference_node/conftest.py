"""Fixtures of the node registry tests: a real HTTP server on 127.0.0.1 that
plays an inference node and can be made to fail, hang or go away."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from inference_node.selectors import invalidate_routing_snapshot

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="llama"} {queries}
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="llama"} {hits}
"""


class FakeNode:
    """A tiny threaded HTTP server speaking the parts of the OpenAI-compatible
    protocol the prober reads. Mutate its attributes to change its answers."""

    def __init__(self, port: int = 0):
        self.health_status = 200
        self.delay = 0.0
        self.models = [{"id": "llama", "object": "model", "max_model_len": 8192}]
        self.metrics: str | None = VLLM_METRICS.replace("{queries}", "100").replace("{hits}", "40")
        self.required_token: str | None = None
        self.seen_auth: list[str | None] = []
        self.paths: list[str] = []  # every path asked, in order
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = port
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake.seen_auth.append(self.headers.get("Authorization"))
                fake.paths.append(self.path)
                if fake.delay:
                    time.sleep(fake.delay)
                if fake.required_token and (
                    self.headers.get("Authorization") != f"Bearer {fake.required_token}"
                ):
                    return self._send(401, b'{"error": "unauthorized"}')
                if self.path == "/health":
                    return self._send(fake.health_status, b"")
                if self.path == "/v1/models":
                    body = json.dumps({"object": "list", "data": fake.models}).encode()
                    return self._send(200, body, "application/json")
                if self.path == "/metrics" and fake.metrics is not None:
                    return self._send(200, fake.metrics.encode(), "text/plain; version=0.0.4")
                return self._send(404, b"not found")

            def _send(self, status, body, content_type="text/plain"):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_counters(self, queries: float, hits: float) -> None:
        self.metrics = VLLM_METRICS.replace("{queries}", str(queries)).replace("{hits}", str(hits))


@pytest.fixture
def fake_node():
    node = FakeNode()
    yield node
    node.stop()


@pytest.fixture(autouse=True)
def _fresh_routing_snapshot():
    invalidate_routing_snapshot()
    yield
    invalidate_routing_snapshot()


@pytest.fixture(autouse=True)
def _probe_settings(settings):
    settings.NODE_PROBE_TIMEOUT_SECONDS = 1
    settings.NODE_UNHEALTHY_AFTER = 3
    settings.NODE_HEALTHY_AFTER = 2
