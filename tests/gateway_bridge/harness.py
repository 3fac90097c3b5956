"""Run the real gateway in tests: uvicorn serving console.asgi's router on a
free loopback port in a background thread, with simulator nodes registered
in the test database. Usage events are collected in a list (or sent through
a real broker when a test asks for it) so tests can ingest them and compare
call records with what the SDKs saw."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import uvicorn

from gateway_bridge.app import Router
from usage.facade import to_wire

# The /metrics token of the gateway processes the tests start (/metrics is closed without one).
METRICS_TOKEN = "test-metrics-token"


class ListEmitter:
    """Collects usage events (the emitter's interface, without a broker), as
    the worker would receive them: wire dicts, through the contract's encoding."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self._cond = threading.Condition()

    def emit(self, event) -> None:
        wire = to_wire(event)
        with self._cond:
            self.events.append(wire)
            self._cond.notify_all()

    @property
    def emitted(self) -> int:
        return len(self.events)

    @property
    def spool_pending(self) -> int:
        return 0

    def close(self, timeout: float | None = None) -> bool:
        return True

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.events) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} usage events, got {len(self.events)}")
                self._cond.wait(left)
            return list(self.events)

    def by_id(self) -> dict[str, dict]:
        return {e["request_id"]: e for e in self.events}


class ListSend:
    """Collects the batches a ``CircuitReporter`` would publish (no broker)."""

    def __init__(self) -> None:
        self.batches: list[list[dict]] = []

    def __call__(self, batch: list[dict]) -> None:
        self.batches.append(batch)

    @property
    def transitions(self) -> list[dict]:
        return [t for batch in self.batches for t in batch]


@dataclass
class RunningGateway:
    host: str
    port: int
    gateway: object
    emitter: object
    server: uvicorn.Server = field(repr=False)
    thread: threading.Thread = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def call(self, coro_factory, timeout: float = 10.0):
        """Run ``coro_factory()`` on the gateway's event loop (to read its state)."""
        loop = self.server_loop
        return asyncio.run_coroutine_threadsafe(coro_factory(), loop).result(timeout)

    server_loop: asyncio.AbstractEventLoop | None = None


@contextlib.contextmanager
def running_gateway(emitter=None, **gateway_kwargs) -> Iterator[RunningGateway]:
    """The gateway (and Django, behind the router) on a free port."""
    from django.core.asgi import get_asgi_application

    from gateway_bridge.circuits import CircuitReporter
    from gateway_bridge.gateway import Gateway

    emitter = emitter if emitter is not None else ListEmitter()
    gateway_kwargs.setdefault("circuits", CircuitReporter(ListSend(), gateway="test-gateway"))
    # Its own metrics directory: a scrape counts this gateway's calls, not
    # those of the gateways earlier tests of this process started.
    metrics_dir = tempfile.mkdtemp(prefix="test-gateway-metrics-")
    gateway_kwargs.setdefault("metrics_dir", metrics_dir)
    gateway = Gateway(emitter=emitter, **gateway_kwargs)
    app = Router(get_asgi_application(), gateway_factory=lambda: gateway)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        loop="asyncio",
        http="httptools",
        # The gateway decides whom to believe (GATEWAY_TRUSTED_PROXIES), not uvicorn.
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    holder: dict = {}

    def target() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        holder["loop"] = loop
        loop.run_until_complete(server.serve(sockets=[sock]))
        # As asyncio.run does: no worker thread (a limit seeding cut short) may
        # still be reading the database when the test's teardown flushes it.
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()

    thread = threading.Thread(target=target, name="test-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test gateway did not start")
        time.sleep(0.01)
    running = RunningGateway("127.0.0.1", port, gateway, emitter, server, thread)
    running.server_loop = holder["loop"]
    try:
        yield running
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


@dataclass
class GatewayProcess:
    port: int
    process: object

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def gateway_process(var_dir, *, workers: int = 1, **env: str) -> Iterator[GatewayProcess]:
    """A separate gateway process (uvicorn serving console.asgi) on the test
    database, with the test's pepper, and its own var dir and broker folder
    (its usage batches stay there); ``workers`` > 1: ``uvicorn --workers``."""
    import os
    import subprocess
    import sys
    import urllib.request

    from django.conf import settings

    from tests.services import database_url_for_children

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child_env = {
        **os.environ,
        "DATABASE_URL": database_url_for_children(),
        "API_KEY_PEPPER": settings.API_KEY_PEPPER,
        # The same database holds secrets sealed by this process: open them alike.
        "CONSOLE_SECRET_KEYS": ",".join(settings.CONSOLE_SECRET_KEYS),
        "CONSOLE_VAR_DIR": str(var_dir),
        "CELERY_BROKER_URL": "filesystem://",
        "CONSOLE_FAST_PASSWORD_HASHER": "1",
        "GATEWAY_METRICS_TOKEN": METRICS_TOKEN,
        **env,
    }
    if settings.REDIS_URL and "REDIS_URL" not in env:
        child_env["REDIS_URL"] = settings.REDIS_URL
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "console.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--lifespan", "on", "--no-access-log", "--log-level", "warning",
         "--no-proxy-headers", *(["--workers", str(workers)] if workers > 1 else [])],
        env=child_env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/metrics",
                    headers={"Authorization": f"Bearer {child_env['GATEWAY_METRICS_TOKEN']}"},
                )
                urllib.request.urlopen(request, timeout=1).read()  # noqa: S310 - loopback
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the gateway process did not start") from None
                time.sleep(0.1)
        yield GatewayProcess(port, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
