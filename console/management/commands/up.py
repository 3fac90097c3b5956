"""``python manage.py up``: everything the console needs, in one command.

Migrates the database, collects the static files (when they changed), makes
sure a demo organization with a login and an API key exists (unless
``--no-demo``), then runs the ASGI server, a Celery worker and Celery beat as
child processes until Ctrl-C or SIGTERM.

Two bundled simulators stand in for the upstreams: a self-hosted
OpenAI-compatible node (``simulator-1``: sim-chat-small, sim-chat-large,
sim-embed) and a vendor simulator that speaks the OpenAI, Anthropic and
Gemini APIs and demands vendor API keys like the real ones. The latter backs
one demo channel of each kind (``sim-openai``, ``sim-anthropic``,
``sim-gemini``: the models sim-gpt, sim-claude and sim-gemini), each with a
key pool of one credential and a cost price, so the demo key calls all three
vendor paths in the first minute.

``Ready.`` means the first call works: ``up`` probes the demo upstreams healthy
before it starts the web server, and checks the demo key on every demo model
through its own gateway before it says so (``console.management.readiness``).

Both simulators get an admin secret derived from ``SECRET_KEY`` (in the
environment, off the process list): their ``/admin`` endpoint then answers
loopback clients with that secret only, never a gateway key, and
``manage.py simulator_faults`` derives it again to inject faults."""

from __future__ import annotations

import os
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from console.management.demo import (
    DEMO_EMAIL,
    SIMULATOR_EMBEDDING_MODELS,
    SIMULATOR_MODELS,
    SIMULATOR_NODE_NAME,
    VENDOR_CHANNELS,
    ensure_demo,
    ensure_simulator_node,
    ensure_vendor_channels,
    vendor_key,
)
from console.management.readiness import (
    DemoCall,
    Waiter,
    check_demo_key,
    probe_until_healthy,
    wait_for_port,
)
from console.processes import ChildDied, CrashLoop, Supervisor
from console.server import server_args
from console.staticassets import collect_static
from tooling.simulator.admin import ADMIN_SECRET_ENV, derive_admin_secret

# How long up waits for the upstreams, the server and the demo key's first calls.
READY_TIMEOUT_SECONDS = 90.0


class Command(BaseCommand):
    help = "Migrate, create the demo organization, and run the web server, worker and beat."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--node-port",
            type=int,
            default=9001,
            help="Port of the bundled simulator inference node (0: do not start one).",
        )
        parser.add_argument(
            "--vendor-port",
            type=int,
            default=9002,
            help="Port of the vendor simulator behind the demo channels (0: none).",
        )
        parser.add_argument("--no-demo", action="store_true", help="Do not create the demo data.")
        parser.add_argument(
            "--new-demo-key",
            action="store_true",
            help="Revoke the demo API key and issue a fresh one (printed once).",
        )

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def handle(
        self,
        *args,
        host: str,
        port: int,
        node_port: int,
        vendor_port: int,
        no_demo: bool,
        new_demo_key: bool,
        **options,
    ):
        if not 0 < port < 65536:
            raise CommandError(f"--port {port} is not a TCP port")
        if not 0 <= node_port < 65536 or node_port == port:
            raise CommandError(f"--node-port {node_port} is not a free TCP port")
        if not 0 <= vendor_port < 65536 or (vendor_port and vendor_port in (port, node_port)):
            raise CommandError(f"--vendor-port {vendor_port} is not a free TCP port")
        call_command("migrate", interactive=False, verbosity=0)
        collect_static()  # hashed, compressed static files; only when a source changed
        display_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104
        if ":" in display_host:
            display_host = f"[{display_host}]"
        self.say(f"Console: http://{display_host}:{port}/")
        raw_key = None
        if not no_demo:
            password, key_line, raw_key = ensure_demo(new_key=new_demo_key)
            self.say(f"Login: {DEMO_EMAIL} / {password}")
            self.say(f"Demo API key: {key_line}")
        if node_port:
            ensure_simulator_node(node_port)
            self.say(f"Simulator node: http://127.0.0.1:{node_port}/v1")
        if vendor_port:
            ensure_vendor_channels(vendor_port)
            self.say(
                f"Vendor simulator: http://127.0.0.1:{vendor_port} "
                "(channels sim-openai, sim-anthropic, sim-gemini)"
            )
        connections.close_all()  # the children open their own
        sys.exit(self.run_children(host, port, node_port, vendor_port, raw_key))

    def demo_calls(self, node_port: int, vendor_port: int) -> list[DemoCall]:
        calls = []
        if node_port:
            calls += [
                DemoCall(
                    name, "embeddings" if name in SIMULATOR_EMBEDDING_MODELS else "chat.completions"
                )
                for name, _ in SIMULATOR_MODELS
            ]
        if vendor_port:
            calls += [DemoCall(public) for _, _, public, *_ in VENDOR_CHANNELS]
        return calls

    def wait_until_ready(
        self,
        sup: Supervisor,
        waiter: Waiter,
        *,
        host: str,
        port: int,
        node_port: int,
        vendor_port: int,
        raw_key: str | None,
    ) -> bool:
        """Start the web server (then the worker and beat) once the demo
        upstreams are probed healthy (its gateway's first routing snapshot then
        routes them), wait for it, and check the demo key on every demo model.
        ``False`` if asked to stop."""
        upstreams = []
        if node_port:
            upstreams.append(SIMULATOR_NODE_NAME)
            if not wait_for_port("127.0.0.1", node_port, "the simulator node", waiter):
                return False
        if vendor_port:
            upstreams += [name for name, *_ in VENDOR_CHANNELS]
            if not wait_for_port("127.0.0.1", vendor_port, "the vendor simulator", waiter):
                return False
        if upstreams and not probe_until_healthy(upstreams, waiter):
            return False
        connections.close_all()  # the probes' connection: not held while we serve
        self.start_web(sup, host, port)
        wait_host = "127.0.0.1" if host in ("0.0.0.0", "") else host  # noqa: S104
        wait_host = "::1" if wait_host == "::" else wait_host
        self.start_celery(sup, gateway_url=f"http://{_url_host(wait_host)}:{port}")
        if not wait_for_port(wait_host, port, "the web server", waiter):
            return False
        calls = self.demo_calls(node_port, vendor_port)
        if raw_key is None or not calls:
            return True
        if not check_demo_key(wait_host, port, raw_key, calls, waiter):
            return False
        self.say(
            f"Checked the demo key on {', '.join(c.model for c in calls)}: one call each, "
            "at most 1 output token, billed to the demo organization and in its call log."
        )
        return True

    def start_celery(self, sup: Supervisor, *, gateway_url: str) -> None:
        """The workers and beat, started right after the web server: nothing on
        the way to ``Ready.`` needs them, and started earlier their own start-up
        slowed the simulators' and the probe's. The load-test worker takes only
        ``CAPACITY_QUEUE`` (a test holds its process for minutes) and sends its
        calls to this web server."""
        sup.start("worker", _celery_worker(settings.CELERY_TASK_DEFAULT_QUEUE, 2))
        sup.start(
            "loadtests",
            _celery_worker(settings.CAPACITY_QUEUE, 1, "-n", "loadtests@%h"),
            env_extra={"CAPACITY_GATEWAY_URL": gateway_url},
        )
        sup.start(
            "beat", _celery("beat", "-l", "info", "-s", settings.CELERY_BEAT_SCHEDULE_FILENAME)
        )

    def start_web(self, sup: Supervisor, host: str, port: int) -> None:
        sup.start(
            "web",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "console.asgi:application",
                "--host",
                host,
                "--port",
                str(port),
                "--lifespan",
                "on",
                "--no-access-log",
                # uvicorn would otherwise believe X-Forwarded-For from 127.0.0.1;
                # the gateway's GATEWAY_TRUSTED_PROXIES decides that.
                "--no-proxy-headers",
                # Header, body and keep-alive timeouts; connections per address.
                *server_args(),
            ],
        )

    def start_simulators(self, sup: Supervisor, node_port: int, vendor_port: int) -> None:
        """The inference-node simulator (the demo's own node) and the vendor simulator
        (the demo's vendor channels), each when its port is set, each with the
        admin secret ``simulator_faults`` uses."""
        admin = {ADMIN_SECRET_ENV: derive_admin_secret(settings.SECRET_KEY)}
        if node_port:
            models = ",".join(f"{name}:{context}" for name, context in SIMULATOR_MODELS)
            sup.start("node", _simulator(node_port, models), env_extra=admin)
        if vendor_port:
            models = ",".join(f"{up}:{ctx}" for _, _, _, up, ctx, _ in VENDOR_CHANNELS)
            sup.start(
                "vendor-sim",
                _simulator(vendor_port, models),
                env_extra={"SIM_API_KEYS": vendor_key(), **admin},
            )

    def run_children(
        self, host: str, port: int, node_port: int, vendor_port: int, raw_key: str | None
    ) -> int:
        env = os.environ.copy()
        env.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
        sup = Supervisor(env=env, cwd=str(settings.BASE_DIR), log=self.say)
        sup.install_signal_handlers()
        code = 0
        try:
            self.start_simulators(sup, node_port, vendor_port)
            waiter = Waiter(say=self.say, alive=sup.alive, timeout=READY_TIMEOUT_SECONDS)
            if self.wait_until_ready(
                sup,
                waiter,
                host=host,
                port=port,
                node_port=node_port,
                vendor_port=vendor_port,
                raw_key=raw_key,
            ):
                self.say("Ready.")
                sup.watch()
            stop = sup.stop_requested
            name = _SIGNAL_NAMES.get(stop, stop) if stop is not None else stop
            self.say(f"Got {name}; stopping.")
        except CrashLoop as exc:
            self.stderr.write(f"up: {exc.report()}")
            code = 1
        except (ChildDied, TimeoutError, RuntimeError, OSError) as exc:
            self.stderr.write(f"up: {exc}; stopping the others.")
            code = 1
        finally:
            sup.stop()
        self.say("Stopped.")
        return code


_SIGNAL_NAMES = {2: "SIGINT", 15: "SIGTERM"}


def _celery(*args: str) -> list[str]:
    """``python -m celery -A console`` and ``args``."""
    return [sys.executable, "-m", "celery", "-A", "console", *args]


def _celery_worker(queue: str, concurrency: int, *more: str) -> list[str]:
    """A prefork worker of ``concurrency`` processes that takes ``queue`` only."""
    return _celery(
        "worker",
        "-l",
        "info",
        "--concurrency",
        str(concurrency),
        "--pool",
        "prefork",
        "-Q",
        queue,
        *more,
        # The filesystem broker has no broadcast; these need it.
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    )


def _simulator(port: int, models: str) -> list[str]:
    """``python -m tooling.simulator`` on loopback ``port``, realistic, serving ``models``."""
    return [
        sys.executable,
        "-m",
        "tooling.simulator",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--profile",
        "realistic",
        "--models",
        models,
    ]


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
