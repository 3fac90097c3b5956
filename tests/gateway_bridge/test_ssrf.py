"""Server-side request forgery through the gateway: a tenant's node whose
name now resolves inside this deployment (DNS rebinding after it was saved)
gets no request from the gateway, which checks the addresses on every
connect; the platform's own node at the same address is reached as before.
DNS is mocked (``socket.getaddrinfo``); the only node is on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.gateway_bridge.conftest import register_node
from tests.gateway_bridge.test_gateway_openai import CHAT, auth, raw_request

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "sim-chat-small",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


@pytest.fixture
def counting_node():
    """An OpenAI-compatible node on 127.0.0.1 that counts the requests it gets."""
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            paths.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(ANSWER).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    server.paths = paths
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def rebinding_dns(monkeypatch):
    """``rebind.example`` resolves to 127.0.0.1 (a name that was public when saved)."""
    real = socket.getaddrinfo

    def fake_getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host == "rebind.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port or 0)))]
        return real(host, port, family, type, proto, flags)

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)


def _chat(gw, raw):
    return raw_request(gw, "POST", "/v1/chat/completions", CHAT, headers=auth(raw))


def test_a_tenants_node_rebound_to_loopback_gets_no_request(
    tenant, start_gateway, settings, counting_node, rebinding_dns
):
    # Given the default rule (tenants' nodes at public addresses only), and the
    # tenant's own node under a name that now resolves to 127.0.0.1
    settings.NODE_ALLOW_PRIVATE_URLS = False
    tenant.node.delete()
    url = f"http://rebind.example:{counting_node.server_address[1]}"
    register_node(url, organization=tenant.org, name="own")
    gw = start_gateway()
    # When the tenant calls a model only that node serves
    status, _, data = _chat(gw, tenant.raw)
    # Then the gateway refuses to connect: no request reached the address
    assert status == 502, data
    error = json.loads(data)["error"]
    assert error["code"] == "upstream_unreachable"
    assert "127.0.0.1" not in data.decode() and "rebind" not in data.decode()
    assert counting_node.paths == []


def test_a_shared_node_at_the_same_address_is_reached(
    tenant, start_gateway, settings, counting_node, rebinding_dns
):
    settings.NODE_ALLOW_PRIVATE_URLS = False
    tenant.node.delete()
    register_node(f"http://rebind.example:{counting_node.server_address[1]}", name="platform")
    gw = start_gateway()
    deadline = time.monotonic() + 5
    status, _, data = _chat(gw, tenant.raw)
    while status != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
        status, _, data = _chat(gw, tenant.raw)
    assert status == 200, data
    assert counting_node.paths == ["/v1/chat/completions"]
