"""The soak's processes on loopback, and the faults done to them.

Every child runs in its own process group, dies with the soak (Linux
``PR_SET_PDEATHSIG``), and writes its output to a log file in the work
directory (kept when a check fails, for the post-mortem). Ports are chosen up
front so a killed node or broker comes back on the same address."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings

from console.server import server_args
from tooling.soak.procs import Proc, free_port

if TYPE_CHECKING:
    from tooling.soak.sentinel import SentinelSet

NODE_TOKEN = "soak-node-token"  # noqa: S105 - loopback simulator's admin token
NODE_MODELS = "sim-chat-small,sim-chat-large"


@dataclass
class Cluster:
    workdir: Path
    database_url: str
    redis_url: str
    log: Callable[..., None] = print
    nodes: list[Proc] = field(default_factory=list)
    gateways: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    beat: Proc | None = None
    broker: Proc | None = None
    # ``--redis sentinel``: the soak's own Sentinel set (tooling.soak.sentinel),
    # whose URL is ``redis_url``; None: the single Redis the caller gave.
    redis: SentinelSet | None = None
    # A broker the soak shares (RabbitMQ: amqp://...) instead of its private
    # Redis: the processes reach it through a relay (tooling.soak.relay), and
    # the broker fault stops the relay, never the server.
    external_broker_url: str | None = None
    # The gateways' /metrics token (closed without one): set in their env, sent by metrics().
    metrics_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    # The gateways' connection guard (console.server): the cap must admit the
    # normal clients' connections from 127.0.0.1; the hostile phase exceeds it
    # from another address.
    max_connections_per_address: int = 600
    header_timeout: float = 5.0

    # --- set-up ----------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "CELERY_BROKER_URL": self.broker_url,
            # A SIGKILLed worker's batch comes back to the queue this soon.
            "CELERY_VISIBILITY_TIMEOUT_SECONDS": "20",
            "CONSOLE_VAR_DIR": str(self.workdir / "var"),
            "API_KEY_PEPPER": settings.API_KEY_PEPPER,
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            # The children share the soak's database: they must open the node
            # tokens it sealed (their own var/ would hold a different key).
            "CONSOLE_SECRET_KEYS": ",".join(settings.CONSOLE_SECRET_KEYS),
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            # /metrics is closed without a token: the soak reads it with this one.
            "GATEWAY_METRICS_TOKEN": self.metrics_token,
            "CONSOLE_MAX_CONNECTIONS_PER_ADDRESS": str(self.max_connections_per_address),
            "CONSOLE_HEADER_TIMEOUT_SECONDS": str(self.header_timeout),
        }
        env.pop("CI", None)
        env.update(extra)
        return env

    @property
    def started_broker(self) -> Proc:
        """The broker (or the relay to the shared one) that ``start`` started."""
        if self.broker is None:
            raise RuntimeError("the cluster is not started")
        return self.broker

    @property
    def broker_url(self) -> str:
        port = self.started_broker.port
        if self.external_broker_url:
            parts = urlsplit(self.external_broker_url)
            auth, at, _ = parts.netloc.rpartition("@")
            netloc = f"{auth}{at}127.0.0.1:{port}"
            return parts._replace(netloc=netloc).geturl()
        return f"redis://127.0.0.1:{port}/0"

    def _broker_proc(self) -> Proc:
        broker_port = free_port()
        if self.external_broker_url:
            parts = urlsplit(self.external_broker_url)
            default_port = 5671 if parts.scheme == "amqps" else 5672
            target = f"{parts.hostname or '127.0.0.1'}:{parts.port or default_port}"
            return Proc(
                "broker",
                [sys.executable, "-m", "tooling.soak.relay", "--port", str(broker_port),
                 "--to", target],
                os.environ.copy(),
                self.workdir / "broker.log",
                port=broker_port,
            )  # fmt: skip
        redis_server = shutil.which("redis-server")
        if redis_server is None:
            raise RuntimeError("redis-server is needed for the soak's private broker")
        (self.workdir / "broker").mkdir(exist_ok=True)
        return Proc(
            "broker",
            [redis_server, "--bind", "127.0.0.1", "--port", str(broker_port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "always",
             "--dir", str(self.workdir / "broker")],
            os.environ.copy(),
            self.workdir / "broker.log",
            port=broker_port,
        )  # fmt: skip

    def _node_proc(self, i: int, env: dict[str, str]) -> Proc:
        port = free_port()
        return Proc(
            f"node-{i + 1}",
            [sys.executable, "-m", "tooling.simulator", "--host", "127.0.0.1",
             "--port", str(port), "--profile", "realistic", "--token", NODE_TOKEN,
             "--models", NODE_MODELS, "--max-running", "256", "--seed", str(i)],
            env, self.workdir / f"node-{i + 1}.log", port=port,
        )  # fmt: skip

    def _gateway_proc(self, i: int, env: dict[str, str]) -> Proc:
        port = free_port()
        spool = self.workdir / f"spool-{i + 1}"
        # Each gateway is its own scrape target (the soak compares them):
        # its own metrics directory, not the var dir's shared one.
        metrics_dir = self.workdir / f"metrics-{i + 1}"
        argv = [
            sys.executable, "-m", "uvicorn", "console.asgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on",
            "--no-access-log", "--log-level", "warning", "--no-proxy-headers",
            "--timeout-graceful-shutdown", "10", *server_args(),
        ]  # fmt: skip
        with contextlib.suppress(ImportError):
            import uvloop  # noqa: F401 - optional: the gateways use it when installed

            argv += ["--loop", "uvloop"]
        return Proc(
            f"gateway-{i + 1}",
            argv,
            {**env, "GATEWAY_SPOOL_DIR": str(spool), "GATEWAY_METRICS_DIR": str(metrics_dir)},
            self.workdir / f"gateway-{i + 1}.log",
            port=port,
        )

    def _worker_proc(self, i: int, env: dict[str, str]) -> Proc:
        return Proc(
            f"worker-{i + 1}",
            [sys.executable, "-m", "celery", "-A", "console", "worker", "-l", "warning",
             "--pool", "solo", "-n", f"soak{i + 1}@%h", "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            env, self.workdir / f"worker-{i + 1}.log",
        )  # fmt: skip

    def _beat_proc(self, env: dict[str, str]) -> Proc:
        return Proc(
            "beat",
            [sys.executable, "-m", "celery", "-A", "console", "beat", "-l", "warning",
             "-s", str(self.workdir / "beat-schedule")],
            env, self.workdir / "beat.log",
        )  # fmt: skip

    def start(
        self,
        *,
        gateways: int = 2,
        nodes: int = 3,
        workers: int = 2,
        before_gateways: Callable[[], object] | None = None,
    ) -> None:
        """Broker and nodes, then ``before_gateways()`` (register the nodes: the
        gateways' first routing snapshot must already have them), then the
        gateways, workers and beat."""
        (self.workdir / "var").mkdir(parents=True, exist_ok=True)
        self.broker = self._broker_proc()
        self.broker.start()
        self.broker.wait_port()
        base = self.env()
        for i in range(nodes):
            node = self._node_proc(i, base)
            node.start()
            self.nodes.append(node)
        for node in self.nodes:
            node.wait_port()
        if before_gateways is not None:
            before_gateways()
        for i in range(gateways):
            gw = self._gateway_proc(i, base)
            gw.start()
            self.gateways.append(gw)
        for i in range(workers):
            worker = self._worker_proc(i, base)
            worker.start()
            self.workers.append(worker)
        self.beat = self._beat_proc(base)
        self.beat.start()
        for proc in self.gateways:
            proc.wait_port()

    def node_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.nodes[i].port}"

    def gateway_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.gateways[i].port}"

    def stop(self) -> None:
        # Gateways first (they flush their usage buffers on shutdown), then the rest.
        for proc in (*self.gateways, self.beat, *self.workers, *self.nodes, self.broker):
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop()
        if self.redis is not None:
            self.redis.stop()

    def dead(self) -> list[str]:
        """Children that died on their own (a fault's victims are restarted)."""
        procs = (*self.gateways, *self.workers, *self.nodes, self.beat, self.broker)
        if self.redis is not None:
            procs += tuple(self.redis.running())
        return [p.name for p in procs if p is not None and not p.running()]

    # --- faults ----------------------------------------------------------------

    def node_faults(self, i: int, **fields: float) -> dict:
        data = json.dumps(fields).encode()
        req = urllib.request.Request(  # noqa: S310 - loopback node
            f"{self.node_url(i)}/admin/faults",
            data=data,
            headers={"authorization": f"Bearer {NODE_TOKEN}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
            return json.loads(resp.read())

    def kill_node(self, i: int) -> None:
        self.nodes[i].kill()

    def restart_node(self, i: int) -> None:
        self.nodes[i].start()
        self.nodes[i].wait_port()

    def stop_broker(self) -> None:
        self.started_broker.stop()

    def start_broker(self) -> None:
        self.started_broker.start()
        self.started_broker.wait_port()

    def kill_worker(self, i: int) -> None:
        self.workers[i].kill()

    def restart_worker(self, i: int) -> None:
        self.workers[i].start()

    def kill_gateway(self, i: int) -> None:
        """SIGKILL a gateway process: no shutdown, its in-memory state lost."""
        self.gateways[i].kill()

    def restart_gateway(self, i: int) -> None:
        """The same process again (same port, same spool directory)."""
        self.gateways[i].start()
        self.gateways[i].wait_port()

    def kill_redis_primary(self) -> dict:
        if self.redis is None:
            raise RuntimeError("the soak runs no Sentinel set of its own (--redis sentinel)")
        return self.redis.kill_primary()

    def metrics(self, i: int) -> str:
        request = urllib.request.Request(  # noqa: S310 - our own gateway on loopback
            f"{self.gateway_url(i)}/metrics",
            headers={"Authorization": f"Bearer {self.metrics_token}"},
        )
        with urllib.request.urlopen(request, timeout=5) as resp:  # noqa: S310
            return resp.read().decode()

    def series(self, i: int, *names: str) -> dict[str, float] | None:
        """The named series of gateway ``i``'s ``/metrics``, each summed over its
        labels; ``None`` when the gateway does not answer."""
        try:
            text = self.metrics(i)
        except OSError:
            return None
        sums = dict.fromkeys(names, 0.0)
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in sums:
                sums[name] += float(line.rsplit(" ", 1)[1])
        return sums

    def key_invalidation(self, i: int) -> tuple[float, float]:
        """Gateway ``i``'s key changes heard, and when it heard the last (its clock)."""
        got = self.series(
            i, "gateway_key_invalidations_total", "gateway_last_key_invalidation_timestamp_seconds"
        )
        if got is None:
            return (0.0, 0.0)
        heard, last = got.values()
        return heard, last

    def circuit_openings(self) -> dict[str, int | None]:
        """Circuit openings per gateway (``None``: it did not answer)."""
        name = "gateway_circuit_openings_total"
        out = {}
        for i in range(len(self.gateways)):
            got = self.series(i, name)
            out[f"gateway-{i + 1}"] = None if got is None else int(got[name])
        return out

    def spooled_batches(self) -> int:
        """Usage batches waiting in the gateways' spools, all gateways together."""
        name = "gateway_spool_batches"
        found = (self.series(i, name) for i in range(len(self.gateways)))
        return int(sum(got[name] for got in found if got is not None))


def local_postgres_cluster(database_url: str) -> tuple[str, str] | None:
    """(version, name) of the Debian PostgreSQL cluster serving ``database_url``
    on this machine, or None (another host, no pg_lsclusters)."""

    parts = urlsplit(database_url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1") or not shutil.which("pg_lsclusters"):
        return None
    port = parts.port or 5432
    out = subprocess.run(
        ["pg_lsclusters", "-h"],  # noqa: S607 - Debian's tool, found on PATH
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[2] == str(port) and cols[3] == "online":
            return cols[0], cols[1]
    return None


def restart_postgres(cluster: tuple[str, str]) -> float:
    """Restart PostgreSQL (fast mode: every connection is cut); seconds it took."""
    t0 = time.monotonic()
    subprocess.run(  # noqa: S603
        ["pg_ctlcluster", "--skip-systemctl-redirect", cluster[0], cluster[1], "restart",  # noqa: S607
         "-m", "fast"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return time.monotonic() - t0
