"""``python manage.py bench_gateway``: the gateway's hot path, measured.

One command starts everything: a simulator node (instant profile), the
gateway (uvicorn serving console.asgi, one process) with a real key whose
IP allowlist, spend caps and rate limits are all set (so every rule runs),
and the closed-loop load generator (console.features.capacity.loadgen) in its own
process. For each step of concurrent clients, plain and streamed, the same
load goes to the node directly and through the gateway; the difference is
the gateway's added latency. The same load also goes through the floor
(tooling.bench.floor: a bare uvicorn + aiohttp pass-through to the same node,
started here with the gateway's uvicorn settings), so each step reports the
gateway's requests/s as a share of the floor's, both proxies' added latency
and their CPU time per call (the server process's user + system time over the
measured window, from /proc, divided by the calls answered in it). With
``--repeat N`` each step runs N times, direct, floor and gateway interleaved,
and reports medians with the spread. Then every usage event the gateway
emitted is ingested by a real Celery worker and counted in the database.

Modes ``native-plain`` and ``native-stream`` measure native pass-through: an
Anthropic Messages client through the gateway to an Anthropic-kind channel (a
second simulator in vendor mode, demanding its API key), against the same
simulator called directly with the vendor key and through the floor: the
client's bytes go out with only the model id rewritten and the vendor's
events come back untouched; the stream rows report the TTFT it adds.

The cache-affinity figure runs four simulator nodes (realistic latency
profile, bounded prefix caches) and a workload of many tenants with long
system prompts, routed by prefix affinity and by round robin: prefix-cache
hit rate (from the nodes' own counters) and TTFT p50 for each.

Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.facade import Actor, ApiKey, Membership, Organization, Role, User, api_key_issue
from inference_node.facade import (
    HealthCheck,
    Node,
    NodeHealth,
    NodeKind,
    NodeStatus,
    seed_credential,
    seed_node_model,
)
from tooling.bench.gateway_affinity import AFFINITY_MODEL, RR_MODEL, cache_affinity
from tooling.bench.gateway_figures import against_targets, step_row
from tooling.bench.gateway_procs import (
    NODE_TOKEN,
    free_port,
    http_get,
    http_post,
    metric_total,
    process_tree,
    run_load,
    start_floor,
    start_node,
    uvicorn_argv,
    wait_up,
)
from usage.models import CallRecord, CatalogModel, Price

BENCH_ORG = "bench-gateway"
BENCH_MODEL = "bench-chat"
NATIVE_MODEL = "bench-claude"
VENDOR_KEY = "sk-bench-vendor-key-0000000000"
BIG = 10**15
HELLO = [{"role": "user", "content": "Say hello to the benchmark."}]
# Production's server protocol (deploy/docker/entrypoint.sh), which the gateway runs here.
GATEWAY_HTTP = "console.server:GuardedHttpProtocol"

# What a step loads: (URL, body, headers, the serving process's pid for its CPU time).
Target = tuple[str, dict, dict, int | None]


def _chat_targets(node_url: str, gw: str, auth: dict, gateway_pid: int) -> dict[str, Target]:
    """OpenAI chat, to the node directly and through the gateway (whose key
    cache is warmed by one call)."""
    body = {"model": BENCH_MODEL, "messages": HELLO, "max_tokens": 16}
    direct_body = {**body, "model": "sim-chat-small"}
    node_auth = {"Authorization": f"Bearer {NODE_TOKEN}"}
    http_post(f"{gw}/v1/chat/completions", body, auth)  # the key is now cached
    return {
        "direct": (f"{node_url}/v1/chat/completions", direct_body, node_auth, None),
        "gateway": (f"{gw}/v1/chat/completions", body, auth, gateway_pid),
    }


def _native_targets(vendor_url: str, gw: str, raw: str, gateway_pid: int) -> dict[str, Target]:
    """Anthropic Messages, to the vendor simulator directly (its key) and through
    the gateway's native pass-through (the bench key)."""
    native_body = {"model": NATIVE_MODEL, "max_tokens": 16, "messages": HELLO}
    vendor_body = {**native_body, "model": "claude-sim"}
    version = {"anthropic-version": "2023-06-01"}
    vendor_auth = {"x-api-key": VENDOR_KEY, **version}
    gw_auth = {"x-api-key": raw, **version}
    http_post(f"{gw}/v1/messages", native_body, gw_auth)
    return {
        "direct": (f"{vendor_url}/v1/messages", vendor_body, vendor_auth, None),
        "gateway": (f"{gw}/v1/messages", native_body, gw_auth, gateway_pid),
    }


def _add_floor(
    targets: dict[str, Target], upstream: str, path: str, procs: list[subprocess.Popen]
) -> str:
    """The floor in front of ``upstream`` as one more target, loaded with the
    direct target's body and headers; returns its URL."""
    floor, floor_url = start_floor(upstream, free_port())
    procs.append(floor)
    _, body, headers, _ = targets["direct"]
    targets["floor"] = (f"{floor_url}{path}", body, headers, floor.pid)
    return floor_url


def _stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def configuration(opts: dict) -> dict:
    """Every switch of the measured gateway, as its process reads them (it inherits
    this environment). ``production`` is true when nothing a deployment runs is off:
    then, and only then, the figures are the headline; otherwise they are a diagnosis."""
    switches = {
        "access_log": settings.ACCESS_LOG,
        "log_format": settings.LOG_FORMAT,
        "usage_journal": settings.GATEWAY_USAGE_JOURNAL,
        "routing_policy": settings.GATEWAY_ROUTING_POLICY,
        "limits_store": settings.GATEWAY_LIMITS_STORE,
        "key_rules": "model and IP allowlists, daily/monthly/lifetime caps, RPM and TPM",
        "http_protocol": GATEWAY_HTTP,
        "processes": opts["processes"],
        "tracing_exporter": os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
        "profiler": bool(opts.get("profile")),
        # No switch turns these off: every call's usage event goes to the emitter
        # (and the broker), every call is counted in /metrics.
        "always_on": ["usage events", "metrics"],
    }
    switches["production"] = bool(
        settings.ACCESS_LOG
        and settings.GATEWAY_USAGE_JOURNAL
        and settings.GATEWAY_ROUTING_POLICY == "prefix_affinity"
        and not opts.get("profile")
    )
    return switches


class Command(BaseCommand):
    help = "Benchmark the gateway against a direct node (JSON on stdout)."
    # The token the bench's gateway process is started with, to read its /metrics.
    metrics_token = secrets.token_urlsafe(24)

    @property
    def metrics_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.metrics_token}"}

    def add_arguments(self, parser):
        parser.add_argument("--seconds", type=float, default=5.0, help="per step and target")
        parser.add_argument("--warmup", type=float, default=1.0)
        parser.add_argument("--steps", default="4,50,100,200,400")
        parser.add_argument("--modes", default="plain,stream")
        parser.add_argument("--no-ingest", action="store_true", help="skip the ingest check")
        parser.add_argument("--no-affinity", action="store_true", help="skip the affinity figure")
        parser.add_argument("--affinity-seconds", type=float, default=10.0)
        parser.add_argument("--tenants", type=int, default=24)
        parser.add_argument(
            "--repeat", type=int, default=1, help="runs per step (medians and spread reported)"
        )
        parser.add_argument("--no-floor", action="store_true", help="skip the pass-through floor")
        parser.add_argument(
            "--processes", type=int, default=1,
            help="gateway worker processes (uvicorn --workers, as WEB_CONCURRENCY sets it)",
        )  # fmt: skip
        parser.add_argument(
            "--profile", metavar="FILE",
            help="diagnosis: run the gateway under cProfile and write its stats to FILE "
            "(its figures are then not the headline: the profiler slows every call)",
        )  # fmt: skip

    # --- setup --------------------------------------------------------------

    def _setup(self, node_url: str, vendor_url: str | None = None) -> tuple[object, str]:

        org, _ = Organization.objects.get_or_create(
            slug=BENCH_ORG,
            defaults={"name": "Gateway benchmark", "rpm_limit": 10**8, "tpm_limit": 10**9},
        )
        Organization.objects.filter(pk=org.pk).update(rpm_limit=10**8, tpm_limit=10**9)
        user, _ = User.objects.get_or_create(email="bench-gateway@localhost")
        membership, _ = Membership.objects.get_or_create(
            user=user, organization=org, defaults={"role": Role.OWNER}
        )
        for name, display in ((BENCH_MODEL, "Bench chat"), (AFFINITY_MODEL, "Bench affinity"),
                              (RR_MODEL, "Bench round robin"),
                              (NATIVE_MODEL, "Bench Claude (native)")):  # fmt: skip
            model, _ = CatalogModel.objects.get_or_create(
                name=name, defaults={"display_name": display, "context_window": 32768}
            )
            if not Price.objects.filter(model=model, organization=None).exists():
                Price.objects.create(
                    model=model,
                    currency=org.currency,
                    input_per_mtok=1_000_000,
                    cache_read_per_mtok=100_000,
                    cache_write_per_mtok=1_250_000,
                    output_per_mtok=4_000_000,
                    effective_from="2000-01-01T00:00:00Z",
                )
        Node.objects.filter(organization=org).delete()
        node = Node.objects.create(
            organization=org, name="bench-node", base_url=node_url, token=NODE_TOKEN,
            status=NodeStatus.ACTIVE, health=NodeHealth.HEALTHY, max_concurrency=4096,
        )  # fmt: skip
        seed_node_model(node.pk, BENCH_MODEL, upstream_name="sim-chat-small", context_window=8192)
        if vendor_url:
            channel = Node.objects.create(
                organization=org, name="bench-anthropic", kind=NodeKind.ANTHROPIC,
                base_url=vendor_url, health_check=HealthCheck.TRAFFIC,
                status=NodeStatus.ACTIVE, max_concurrency=4096,
            )  # fmt: skip
            seed_credential(channel.pk, secret=VENDOR_KEY)
            seed_node_model(
                channel.pk, NATIVE_MODEL, upstream_name="claude-sim", context_window=8192
            )
        ApiKey.objects.filter(organization=org).update(status="revoked")
        actor = Actor(membership, "127.0.0.1")
        _, raw = api_key_issue(
            actor=actor,
            name=f"bench-{int(time.time())}",
            allowed_models=[BENCH_MODEL, AFFINITY_MODEL, RR_MODEL, NATIVE_MODEL],
            ip_allowlist=["127.0.0.1/32", "::1/128"],
            spend_cap_daily=BIG,
            spend_cap_monthly=BIG,
            spend_cap_lifetime=BIG,
            rpm_limit=10_000_000,
            tpm_limit=10_000_000,
        )
        return org, raw

    def _start_gateway(self, port: int, processes: int, profile: str | None) -> subprocess.Popen:
        env = {
            **os.environ,
            "GATEWAY_ROUTING_OVERRIDES": f"{AFFINITY_MODEL}=prefix_affinity,{RR_MODEL}=round_robin",
            # /metrics is closed without a token: the bench reads it with this one.
            "GATEWAY_METRICS_TOKEN": self.metrics_token,
            # The bench organization's nodes are simulators on loopback: allowed here.
            "NODE_ALLOW_PRIVATE_URLS": "true",
            # Its own metrics directory: the usage events it counts are this run's
            # alone, not a console's sharing the var dir (nor earlier runs').
            "GATEWAY_METRICS_DIR": tempfile.mkdtemp(prefix="bench-gateway-metrics-"),
        }
        workers = ["--workers", str(processes)] if processes > 1 else []
        cmd = uvicorn_argv("console.asgi:application", port, *workers, http=GATEWAY_HTTP)
        if profile:  # uvicorn under cProfile, the stats written when it stops
            cmd[1:3] = ["-m", "tooling.bench.profiled", profile]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)  # noqa: S603
        wait_up(proc, f"http://127.0.0.1:{port}/metrics", "gateway")
        if processes > 1:
            deadline = time.monotonic() + 60
            while len(process_tree(proc.pid)) <= processes and time.monotonic() < deadline:
                time.sleep(0.2)  # every worker up (the supervisor is one more)
        return proc

    # --- run ------------------------------------------------------------------

    def handle(self, *args, **opts):
        if opts["profile"] and opts["processes"] > 1:
            raise CommandError("--profile profiles one gateway process: leave --processes at 1")
        call_command("migrate", verbosity=0)
        run_started = timezone.now()
        procs: list[subprocess.Popen] = []
        report: dict = {
            "machine": {"cpus": os.cpu_count()},
            "seconds_per_step": opts["seconds"],
            "configuration": configuration(opts),
        }
        try:
            self._run(opts, procs, report, run_started)
        finally:
            _stop_all(procs)
        self.stdout.write(json.dumps(report, indent=2))

    def _run(self, opts, procs: list[subprocess.Popen], report: dict, run_started) -> None:
        node, node_url = start_node("--profile", "instant")
        procs.append(node)
        modes = [m for m in opts["modes"].split(",") if m]
        vendor_url = None
        if any(m.startswith("native") for m in modes):
            vendor, vendor_url = start_node(
                "--profile", "instant", "--api-keys", VENDOR_KEY, "--models", "claude-sim"
            )
            procs.append(vendor)
        org, raw = self._setup(node_url, vendor_url)
        port = free_port()
        gateway = self._start_gateway(port, opts["processes"], opts["profile"])
        procs.append(gateway)
        gw = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {raw}"}
        targets = _chat_targets(node_url, gw, auth, gateway.pid)
        native_targets = _native_targets(vendor_url, gw, raw, gateway.pid) if vendor_url else {}
        if not opts["no_floor"]:
            floor_url = _add_floor(targets, node_url, "/v1/chat/completions", procs)
            _, direct_body, node_auth, _ = targets["direct"]
            http_post(f"{floor_url}/v1/chat/completions", direct_body, node_auth)
            if vendor_url:
                _add_floor(native_targets, vendor_url, "/v1/messages", procs)
        rows = self._steps(modes, targets, native_targets, opts)
        report["steps"] = rows
        metrics = http_get(f"{gw}/metrics", self.metrics_headers).decode()
        emitted = int(metric_total(metrics, "gateway_usage_events_total"))
        report["gateway_errors"] = int(metric_total(metrics, "gateway_errors_total"))
        if not opts["no_affinity"]:
            report["cache_affinity"] = cache_affinity(
                org, gw, auth, tenants=opts["tenants"], seconds=opts["affinity_seconds"]
            )
            metrics = http_get(f"{gw}/metrics", self.metrics_headers).decode()
            emitted = int(metric_total(metrics, "gateway_usage_events_total"))
        # Stop the gateway cleanly (it flushes its usage buffer), then ingest.
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(60)
        if not opts["no_ingest"]:
            report["ingest"] = self._ingest(org, emitted, since=run_started)
        report["targets"] = against_targets(rows)

    def _steps(
        self, modes: list[str], targets: dict[str, Target], native_targets: dict[str, Target], opts
    ) -> list[dict]:
        """Every mode at every step of clients, each target loaded in turn."""
        seconds, warmup = opts["seconds"], opts["warmup"]
        steps = [int(s) for s in opts["steps"].split(",") if s]
        rows = []
        for mode in modes:
            stream = mode.endswith("stream")
            mode_targets = native_targets if mode.startswith("native") else targets
            for clients in steps:
                runs = []
                for _ in range(max(1, opts["repeat"])):
                    # direct, floor, gateway back to back: one repeat sees one machine state
                    run = {}
                    for name, (url, b, h, pid) in mode_targets.items():
                        run[name] = run_load(
                            url, bodies=[b], headers=h, concurrency=clients, seconds=seconds,
                            stream=stream, warmup=warmup, cpu_pid=pid,
                        )  # fmt: skip
                    runs.append(run)
                row = step_row(mode, clients, runs)
                rows.append(row)
                self.stderr.write(json.dumps(row))
        return rows

    def _ingest(self, org, emitted: int, since) -> dict:
        """A real Celery worker ingests what this run's gateway emitted; only this
        run's calls are counted (the organization keeps earlier runs' calls)."""

        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "console", "worker", "--loglevel", "warning",
             "--concurrency", "2", "--without-heartbeat", "--without-mingle", "--without-gossip"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        started = time.monotonic()
        stored = 0
        try:
            while time.monotonic() - started < 600:
                stored = CallRecord.objects.filter(
                    organization_id=org.pk, started_at__gte=since
                ).count()
                if stored >= emitted:
                    break
                time.sleep(1.0)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        return {
            "events_emitted": emitted,
            "call_records_stored": stored,
            "all_ingested": stored == emitted,
            "seconds_to_ingest": round(time.monotonic() - started, 1),
        }
