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
import random
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from django.core.management import call_command
from django.core.management.base import BaseCommand

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
from usage.facade import CallRecord, CatalogModel, Price

BENCH_ORG = "bench-gateway"
BENCH_MODEL = "bench-chat"
NATIVE_MODEL = "bench-claude"
VENDOR_KEY = "sk-bench-vendor-key-0000000000"
AFFINITY_MODEL = "bench-affinity"
RR_MODEL = "bench-round-robin"
NODE_TOKEN = "bench-node-token"  # noqa: S105 - loopback simulator
BIG = 10**15


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_node(*flags: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "tooling.simulator", "--host", "127.0.0.1", "--port", "0",
         "--token", NODE_TOKEN, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None  # stdout=PIPE
    line = proc.stdout.readline()
    match = re.search(r"http://[\d.]+:\d+", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"the simulator node did not start: {line!r}")
    return proc, match.group(0)


def _get(url: str, headers: dict | None = None, timeout: float = 5.0) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - loopback only
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        return resp.read()


def _post(url: str, body: dict, headers: dict | None = None, timeout: float = 10.0) -> bytes:
    data = json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 - loopback only
        url, data=data, headers={"content-type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        return resp.read()


def _uvicorn(app: str, port: int, *extra: str) -> list[str]:
    """The uvicorn command line the gateway and the floor share: one process, httptools,
    uvloop when importable, no access log, no proxy headers."""
    cmd = [
        sys.executable, "-m", "uvicorn", app, *extra, "--host", "127.0.0.1",
        "--port", str(port), "--lifespan", "on", "--no-access-log", "--log-level", "warning",
        "--http", "httptools", "--no-proxy-headers",
    ]  # fmt: skip
    try:
        import uvloop  # noqa: F401

        cmd += ["--loop", "uvloop"]
    except ImportError:
        pass
    return cmd


def _wait_up(proc: subprocess.Popen, url: str, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            _get(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the {what} exited at start") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the {what} did not start")


def start_floor(node_url: str, port: int) -> tuple[subprocess.Popen, str]:
    """The bare pass-through (tooling.bench.floor) to ``node_url``, on 127.0.0.1:``port``."""
    from tooling.bench.floor import UPSTREAM_ENV

    env = {**os.environ, UPSTREAM_ENV: node_url}
    cmd = _uvicorn("tooling.bench.floor:create_app", port, "--factory")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)  # noqa: S603
    url = f"http://127.0.0.1:{port}"
    _wait_up(proc, f"{url}/health", "floor proxy")
    return proc, url


def _load(url: str, *, bodies: list[dict], headers: dict, concurrency: int, seconds: float,
          stream: bool, warmup: float, cpu_pid: int | None = None) -> dict:  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for body in bodies:
            f.write(json.dumps(body) + "\n")
        path = f.name
    cmd = [
        sys.executable, "-m", "console.features.capacity.loadgen",
        "--url", url, "--bodies-file", path,
        "--concurrency", str(concurrency), "--seconds", str(seconds), "--warmup", str(warmup),
    ]  # fmt: skip
    for name, value in headers.items():
        cmd += ["--header", f"{name}: {value}"]
    if stream:
        cmd.append("--stream")
    if cpu_pid is not None:
        cmd += ["--cpu-pid", str(cpu_pid)]
    try:
        out = subprocess.run(  # noqa: S603 - our own interpreter and module
            cmd, capture_output=True, text=True, check=True, timeout=seconds * 4 + 60
        )
    finally:
        os.unlink(path)
    return json.loads(out.stdout)


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


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
        seed_node_model(
            node.pk, BENCH_MODEL, upstream_name="sim-chat-small", context_window=8192
        )
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

    def _start_gateway(self, port: int) -> subprocess.Popen:
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
        cmd = _uvicorn("console.asgi:application", port)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)  # noqa: S603
        _wait_up(proc, f"http://127.0.0.1:{port}/metrics", "gateway")
        return proc

    # --- run ------------------------------------------------------------------

    def handle(self, *args, **opts):
        from django.utils import timezone

        call_command("migrate", verbosity=0)
        run_started = timezone.now()
        seconds, warmup = opts["seconds"], opts["warmup"]
        procs: list[subprocess.Popen] = []
        report: dict = {"machine": {"cpus": os.cpu_count()}, "seconds_per_step": seconds}
        try:
            node, node_url = _start_node("--profile", "instant")
            procs.append(node)
            modes = [m for m in opts["modes"].split(",") if m]
            vendor_url = None
            if any(m.startswith("native") for m in modes):
                vendor, vendor_url = _start_node(
                    "--profile", "instant", "--api-keys", VENDOR_KEY, "--models", "claude-sim"
                )
                procs.append(vendor)
            org, raw = self._setup(node_url, vendor_url)
            port = _free_port()
            gateway = self._start_gateway(port)
            procs.append(gateway)
            gw = f"http://127.0.0.1:{port}"
            auth = {"Authorization": f"Bearer {raw}"}
            body = {
                "model": BENCH_MODEL,
                "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
                "max_tokens": 16,
            }
            direct_body = {**body, "model": "sim-chat-small"}
            node_auth = {"Authorization": f"Bearer {NODE_TOKEN}"}
            _post(f"{gw}/v1/chat/completions", body, auth)  # the key is now cached
            targets = {
                "direct": (f"{node_url}/v1/chat/completions", direct_body, node_auth, None),
                "gateway": (f"{gw}/v1/chat/completions", body, auth, gateway.pid),
            }
            native_targets = {}
            if vendor_url:
                native_body = {
                    "model": NATIVE_MODEL,
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
                }
                vendor_body = {**native_body, "model": "claude-sim"}
                version = {"anthropic-version": "2023-06-01"}
                vendor_auth = {"x-api-key": VENDOR_KEY, **version}
                gw_auth = {"x-api-key": raw, **version}
                _post(f"{gw}/v1/messages", native_body, gw_auth)
                native_targets = {
                    "direct": (f"{vendor_url}/v1/messages", vendor_body, vendor_auth, None),
                    "gateway": (f"{gw}/v1/messages", native_body, gw_auth, gateway.pid),
                }
            if not opts["no_floor"]:
                floor, floor_url = start_floor(node_url, _free_port())
                procs.append(floor)
                _post(f"{floor_url}/v1/chat/completions", direct_body, node_auth)
                targets["floor"] = (
                    f"{floor_url}/v1/chat/completions", direct_body, node_auth, floor.pid
                )  # fmt: skip
                if vendor_url:
                    vfloor, vfloor_url = start_floor(vendor_url, _free_port())
                    procs.append(vfloor)
                    native_targets["floor"] = (
                        f"{vfloor_url}/v1/messages", vendor_body, vendor_auth, vfloor.pid
                    )  # fmt: skip
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
                            run[name] = _load(
                                url, bodies=[b], headers=h, concurrency=clients, seconds=seconds,
                                stream=stream, warmup=warmup, cpu_pid=pid,
                            )  # fmt: skip
                        runs.append(run)
                    row = _row(mode, clients, runs)
                    rows.append(row)
                    self.stderr.write(json.dumps(row))
            report["steps"] = rows
            metrics = _get(f"{gw}/metrics", self.metrics_headers).decode()
            emitted = int(_metric(metrics, "gateway_usage_events_total"))
            report["gateway_errors"] = int(_metric(metrics, "gateway_errors_total"))
            if not opts["no_affinity"]:
                report["cache_affinity"] = self._affinity(org, gw, auth, opts)
                metrics = _get(f"{gw}/metrics", self.metrics_headers).decode()
                emitted = int(_metric(metrics, "gateway_usage_events_total"))
            # Stop the gateway cleanly (it flushes its usage buffer), then ingest.
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(60)
            if not opts["no_ingest"]:
                report["ingest"] = self._ingest(org, emitted, since=run_started)
            report["targets"] = _targets(rows)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self.stdout.write(json.dumps(report, indent=2))

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

    def _affinity(self, org, gw: str, auth: dict, opts) -> dict:

        nodes = []
        procs = []
        try:
            for i in range(4):
                proc, url = _start_node(
                    "--profile", "realistic", "--prefix-cache-blocks", "600", "--seed", str(i),
                    "--jitter", "0",
                )  # fmt: skip
                procs.append(proc)
                node = Node.objects.create(
                    organization=org, name=f"bench-affinity-{i}", base_url=url, token=NODE_TOKEN,
                    status=NodeStatus.ACTIVE, health=NodeHealth.HEALTHY, max_concurrency=256,
                )  # fmt: skip
                for public in (AFFINITY_MODEL, RR_MODEL):
                    seed_node_model(
                        node.pk, public, upstream_name="sim-chat-small", context_window=8192
                    )
                nodes.append((node, url))
            time.sleep(2.5)  # the gateway's node snapshot refreshes every second
            rng = random.Random(7)  # noqa: S311 - benchmark text, not secrets
            words = [f"w{n}" for n in range(5000)]
            tenants = [
                # ~900 tokens each (56 cache blocks): the six tenants a node gets by
                # affinity fit its 600 blocks, all 24 (1,344 blocks) do not
                " ".join(rng.choice(words) for _ in range(500))
                for _ in range(opts["tenants"])
            ]
            # Tenants in a random order: in a fixed cycle whose length the node count
            # divides, round robin would send each tenant to one node, by accident.
            order = [rng.randrange(len(tenants)) for _ in range(opts["tenants"] * 8)]
            bodies_for = {}
            for model in (RR_MODEL, AFFINITY_MODEL):
                bodies = []
                for i, t in enumerate(order):
                    tenant = tenants[t]
                    bodies.append(
                        {
                            "model": model,
                            "messages": [
                                {
                                    "role": "system",
                                    "content": f"You are tenant {t}. {tenant}",
                                },
                                {"role": "user", "content": f"Question {i}: what is {i} + {i}?"},
                            ],
                            "max_tokens": 4,
                            "stream": True,
                        }
                    )
                bodies_for[model] = bodies
            out = {"nodes": 4, "tenants": opts["tenants"], "prefix_cache_blocks_per_node": 600}
            for label, model in (("round_robin", RR_MODEL), ("prefix_affinity", AFFINITY_MODEL)):
                for _, url in nodes:
                    _post(f"{url}/admin/reset", {}, {"Authorization": f"Bearer {NODE_TOKEN}"})
                result = _load(
                    f"{gw}/v1/chat/completions", bodies=bodies_for[model], headers=auth,
                    concurrency=32, seconds=opts["affinity_seconds"], stream=True, warmup=2.0,
                )  # fmt: skip
                queries = hits = 0.0
                for _, url in nodes:
                    text = _get(f"{url}/metrics").decode()
                    queries += _metric(text, "vllm:prefix_cache_queries_total")
                    hits += _metric(text, "vllm:prefix_cache_hits_total")
                out[label] = {
                    "prefix_cache_hit_rate": round(hits / queries, 4) if queries else None,
                    "ttft_p50_ms": result.get("ttft_p50_ms"),
                    "p50_ms": result.get("p50_ms"),
                    "requests_per_second": result.get("requests_per_second"),
                    "errors": result.get("errors"),
                    "error_kinds": result.get("error_kinds"),
                }
            return out
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            Node.objects.filter(pk__in=[n.pk for n, _ in nodes]).delete()


def _summary(r: dict) -> dict:
    keys = ("requests_per_second", "p50_ms", "p90_ms", "p99_ms", "ttft_p50_ms", "errors",
            "cpu_seconds", "cpu_us_per_call")  # fmt: skip
    return {k: r.get(k) for k in keys if r.get(k) is not None}


def _with_server_cpu(r: dict) -> dict:
    """The run's result plus the server's CPU µs per answered call (when measured)."""
    cpus = [v for v in (r.get("server_cpu_seconds") or {}).values() if v is not None]
    if cpus and r.get("requests"):
        r = {**r, "cpu_us_per_call": round(sum(cpus) / r["requests"] * 1e6, 1)}
    return r


def _median_of(results: list[dict]) -> dict:
    """Each numeric figure's median over the repeats (a single run is itself)."""
    if len(results) == 1:
        return results[0]
    out = {}
    for key in results[0]:
        values = [r.get(key) for r in results]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) == len(values):
            out[key] = round(statistics.median(numbers), 3)
    return out


def _diff(a: dict, b: dict, key: str):
    if a.get(key) is None or b.get(key) is None:
        return None
    return round(a[key] - b[key], 3)


def _ratio(a: dict, b: dict, key: str = "requests_per_second"):
    if not a.get(key) or not b.get(key):
        return None
    return round(a[key] / b[key], 3)


def _row(mode: str, clients: int, runs: list[dict]) -> dict:
    """One step's figures: medians over its repeats, and each repeat's within-run ratios."""
    runs = [{name: _with_server_cpu(r) for name, r in run.items()} for run in runs]
    via = _median_of([run["gateway"] for run in runs])
    direct = _median_of([run["direct"] for run in runs])
    row = {
        "mode": mode,
        "clients": clients,
        "gateway": _summary(via),
        "direct": _summary(direct),
        "added_p50_ms": _diff(via, direct, "p50_ms"),
        "added_p90_ms": _diff(via, direct, "p90_ms"),
        "added_p99_ms": _diff(via, direct, "p99_ms"),
    }
    if mode.endswith("stream"):
        row["added_ttft_p50_ms"] = _diff(via, direct, "ttft_p50_ms")
        row["added_ttft_p90_ms"] = _diff(via, direct, "ttft_p90_ms")
    if "floor" not in runs[0]:
        return row
    floor = _median_of([run["floor"] for run in runs])
    row["floor"] = _summary(floor)
    row["floor_added_p50_ms"] = _diff(floor, direct, "p50_ms")
    row["floor_added_p99_ms"] = _diff(floor, direct, "p99_ms")
    if mode.endswith("stream"):
        row["floor_added_ttft_p50_ms"] = _diff(floor, direct, "ttft_p50_ms")
    # Within-run comparisons, each repeat on its own, then their median: a repeat's
    # three runs saw the same machine, the repeats may not have.
    each = [
        {
            "gateway_over_floor_rps": _ratio(run["gateway"], run["floor"]),
            "added_p50_over_floor_ms": _diff(run["gateway"], run["floor"], "p50_ms"),
            # CPU per call, gateway over floor: the steadiest figure on a busy machine
            # (contention inflates both processes' CPU per call alike).
            "gateway_over_floor_cpu": _ratio(run["gateway"], run["floor"], "cpu_us_per_call"),
            "rps": {name: r.get("requests_per_second") for name, r in run.items()},
        }
        for run in runs
    ]
    for key in ("gateway_over_floor_rps", "added_p50_over_floor_ms", "gateway_over_floor_cpu"):
        values = [e[key] for e in each if e[key] is not None]
        row[key] = round(statistics.median(values), 3) if values else None
        if len(values) > 1:
            row[key + "_spread"] = [min(values), max(values)]
    row["cpu_us_per_call"] = {
        "gateway": via.get("cpu_us_per_call"),
        "floor": floor.get("cpu_us_per_call"),
    }
    if len(runs) > 1:
        row["repeats"] = each
    return row


def _targets(rows: list[dict]) -> dict:
    def find(mode, clients):
        return next((r for r in rows if r["mode"] == mode and r["clients"] == clients), None)

    out = {}
    r = find("plain", 4)
    if r:
        out["added_p50_ms_at_4_clients"] = {"value": r["added_p50_ms"], "target": "<= 1"}
        if "floor" in r:
            out["added_p50_over_floor_ms_at_4_clients"] = {
                "value": r["added_p50_over_floor_ms"],
                "target": "<= 0.3",
            }
    for clients in (4, 50):
        r = find("plain", clients)
        if r and "floor" in r:
            out[f"gateway_over_floor_rps_at_{clients}_clients"] = {
                "value": r["gateway_over_floor_rps"],
                "target": ">= 0.75",
            }
            out[f"cpu_us_per_call_at_{clients}_clients"] = {
                **r["cpu_us_per_call"],
                "gateway_over_floor": r["gateway_over_floor_cpu"],
            }
    r = find("plain", 50)
    if r:
        out["plain_rps_at_50_clients"] = {
            "value": r["gateway"].get("requests_per_second"),
            "target": ">= 3000",
        }
    r = find("native-stream", 4)
    if r:
        out["native_stream_added_ttft_p50_ms_at_4_clients"] = {
            "value": r.get("added_ttft_p50_ms"),
            "floor": r.get("floor_added_ttft_p50_ms"),
        }
    r = find("plain", 200)
    if r:
        out["added_p99_ms_at_200_clients"] = {"value": r["added_p99_ms"], "target": "< 10"}
    return out
