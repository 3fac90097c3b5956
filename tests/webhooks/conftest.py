"""A real HTTP receiver on 127.0.0.1 (``http.server`` in a thread) that
verifies each signed delivery with the documented ``signing.verify``, and
deliveries run inline instead of through a broker."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from console.features.webhooks import delivery as delivery_module
from console.features.webhooks import signing

# The real hand-over to Celery, before ``inline_deliveries`` replaces it.
REAL_ENQUEUE = delivery_module._enqueue


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """Answers each POST by ``mode``: "ok" (200), "500", "slow" (sleeps past
    the sender's timeout), "redirect" (302), or a (status, body) pair."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.mode: object = "ok"
        self.secret = ""
        self.requests: list[dict] = []
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/inbound?token=abc"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = dict(self.headers.items())
                verified = None
                if receiver.secret:
                    try:
                        verified = signing.verify(receiver.secret, headers, body)
                    except signing.SignatureError:
                        verified = False
                receiver.requests.append(
                    {
                        "headers": headers,
                        "body": body,
                        "json": json.loads(body),
                        "verified": verified,
                    }
                )
                mode = receiver.mode
                if mode == "slow":
                    time.sleep(1.5)
                    status, answer = 200, b"late"
                elif mode == "500":
                    status, answer = 500, b"boom"
                elif mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                elif isinstance(mode, tuple):
                    status, answer = mode
                else:
                    status, answer = 200, b"ok"
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def other_receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture(autouse=True)
def _fast_webhooks(settings):
    settings.WEBHOOK_TIMEOUT_SECONDS = 0.6
    settings.WEBHOOK_CONNECT_TIMEOUT_SECONDS = 0.5
    settings.WEBHOOK_FAILING_AFTER = 3


@pytest.fixture(autouse=True)
def inline_deliveries(monkeypatch):
    """What a worker would do with each enqueued delivery, done at once; the
    ids enqueued are kept."""
    enqueued: list[int] = []

    def run(ids):
        for delivery_id in ids:
            enqueued.append(delivery_id)
            delivery_module.delivery_attempt(delivery_id=delivery_id)

    monkeypatch.setattr(delivery_module, "_enqueue", run)
    return enqueued
