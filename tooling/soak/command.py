"""``python manage.py soak [--minutes 5]``: the whole product under load and
faults, then proof that nothing was lost, nothing overspent, and every
micro-unit reconciles. Prints one JSON report; exits 1 when a check fails.

Needs PostgreSQL (``DATABASE_URL``) and Redis (``REDIS_URL``) running; it
checks both first. With ``--redis sentinel`` it needs no Redis of the
caller's: it starts its own primary, replica and three sentinels from
``redis-server`` (``tooling.soak.sentinel``, in its work directory) and every
process, itself included, uses ``REDIS_URL=redis+sentinel://...``. It starts,
on loopback: a private Redis as the Celery broker (or, with ``--broker-url
amqp://...``, a relay to that RabbitMQ, which the broker fault stops instead
of the server), three simulator nodes (realistic profile), two gateway
processes (clients alternate between them), two Celery workers and beat.
Traffic comes in steps of concurrent clients (50, 100, 200, 400 by default),
while these faults happen, at fixed shares of the run:

    10 %  node 2 answers every call with a 500 (until 35 %): its circuit opens
    20 %  node 3 is killed (SIGKILL); restarted at 30 %
    40 %  the broker (or the relay) is stopped for 30 s (15 s in runs under 2 minutes)
    45 %  (--redis sentinel) the Redis primary is killed (SIGKILL); the sentinels
          promote the replica and the killed one comes back as its replica. Calls
          meanwhile are refused, 503 limits_unavailable (recorded; not server
          errors, not lost); no admission is counted before a replica holds it
    50 %  the call table's partition maintenance runs under the load: the months
          ahead created (the daily task) and an old month dropped (retention),
          each taking the table's lock (tooling.soak.partitions)
    55 %  worker 1 is killed with SIGKILL (mid-batch under this load); restarted
    60 %  PostgreSQL is restarted (fast mode: every connection cut)
    65 %  gateway 2 is killed with SIGKILL, restarted 2 s later on the same port and
          spool directory (once PostgreSQL is back: a restarted gateway knows no key
          yet): the usage events it held in memory come back from its journal
          (gateway_bridge.journal), so the records check still finds every
          answered call
    75 %  a key in use is revoked; both gateways are probed until they refuse it
    85 %  a burst of 100 concurrent calls against a nearly exhausted cap
    all   5 % of streamed calls hang up after the first event

With ``--hostile``, before those steps, the first step's clients run twice for
``--hostile-minutes`` each: alone, then beside a hostile phase
(``tooling.soak.hostile``: slow clients holding half a request head, oversize
bodies on gateway and console paths, a tenant flooding 3.5 MB invalid bodies,
random keys). The ``hostile`` check holds when the normal tenants' p99 beside
the attack stays within 2x of their p99 alone and each attack got the answer
it should (see ``tooling.soak.checks.hostile``).

Then it waits for the pipeline to drain and checks (see tooling.soak.checks).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections
from kombu import Connection

from console.kernel import config
from console.kernel import redis_url as redis_urls
from tooling.soak import checks
from tooling.soak import partitions as call_partitions
from tooling.soak import scenario as scenarios
from tooling.soak.cluster import Cluster, local_postgres_cluster
from tooling.soak.faults import Faults
from tooling.soak.sentinel import SentinelSet
from tooling.soak.traffic import Traffic


def _checks(scenario: scenarios.Scenario, report: dict, results: list, killed) -> dict:
    """Every check of the run (tooling.soak.checks), by name."""
    faults = report["faults"]
    out = {
        "records": checks.records(scenario, results, killed),
        "money": checks.money(scenario),
        "caps": checks.caps(scenario),
        "server_errors": checks.server_errors(results, excused=faults.get("excused", [])),
        "disconnects": checks.disconnects(scenario, results),
        "burst": checks.burst(scenario, results),
        "revocation": checks.revocation(
            results,
            "a-revoked",
            faults.get("revoked_at"),
            faults.get("revocation_seconds", {}),
        ),
    }
    out["partitions"] = call_partitions.check(scenario, faults.get("partitions"))
    if "hostile" in report:
        out["hostile"] = checks.hostile(report["hostile"])
    return out


class Command(BaseCommand):
    help = "Soak the product under load and faults, then reconcile (JSON report)."

    def add_arguments(self, parser):
        parser.add_argument("--minutes", type=float, default=5.0)
        parser.add_argument("--steps", default="50,100,200,400", help="concurrent clients")
        parser.add_argument("--drain-timeout", type=float, default=240.0)
        parser.add_argument(
            "--no-postgres-restart",
            action="store_true",
            help="skip the PostgreSQL restart (for a database this soak may not restart)",
        )
        parser.add_argument(
            "--broker-url",
            default=None,
            help="a running broker to use instead of the soak's private Redis, e.g. "
            "amqp://guest:guest@127.0.0.1:5672/soak (a vhost of its own): the soak's "
            "processes reach it through a relay, and the broker fault stops the relay",
        )
        parser.add_argument(
            "--redis",
            choices=("single", "sentinel"),
            default="single",
            help="single: the Redis at REDIS_URL; sentinel: the soak's own primary, replica "
            "and three sentinels (redis-server), whose primary is killed mid-run",
        )
        parser.add_argument("--prepaid-balance", type=int, default=None, help="micro-units")
        parser.add_argument("--keep", action="store_true", help="keep the work directory")
        parser.add_argument("--out", help="also write the report to this file")
        parser.add_argument(
            "--hostile",
            action="store_true",
            help="before the faults, run the normal load twice, alone and beside a hostile "
            "phase (slow clients, oversize bodies, a flooding tenant, random keys), and "
            "compare the normal tenants' p99",
        )
        parser.add_argument(
            "--hostile-minutes", type=float, default=1.0, help="length of each of those two phases"
        )
        parser.add_argument(
            "--hostile-clients",
            type=int,
            default=None,
            help="normal clients in those phases (default: the first step)",
        )

    def log(self, message: str) -> None:
        elapsed = time.monotonic() - self.t_start
        print(f"[soak {elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)

    # --- preconditions ---------------------------------------------------------

    def _check_services(self, own_redis: bool) -> tuple[str, str]:
        if connection.vendor != "postgresql":
            raise CommandError("the soak needs PostgreSQL: set DATABASE_URL=postgres://...")
        if not settings.REDIS_URL and not own_redis:
            raise CommandError("the soak needs Redis: set REDIS_URL=redis://...")
        try:
            connection.ensure_connection()
        except Exception as exc:
            raise CommandError(f"PostgreSQL is not reachable: {exc}") from exc

        if not own_redis:
            try:
                redis_urls.sync_client(settings.REDIS_URL, socket_connect_timeout=2).ping()
            except Exception as exc:
                raise CommandError(f"Redis is not reachable at REDIS_URL: {exc}") from exc
        db = settings.DATABASES["default"]
        auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        url = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        return url, settings.REDIS_URL

    @staticmethod
    def _use_redis(url: str) -> None:
        """This process talks to the soak's Redis too: the scenario clears limit
        keys there, a revocation is published there. Called before anything
        was published (the publisher opens its client on first use)."""
        for role in (
            "REDIS_URL",
            "CACHE_REDIS_URL",
            "PUBSUB_REDIS_URL",
            "GATEWAY_LIMITS_REDIS_URL",
            "GATEWAY_RESPONSES_REDIS_URL",
        ):
            setattr(settings, role, url)
        settings.GATEWAY_LIMITS_STORE = "redis"

    @staticmethod
    def _check_broker(url: str) -> None:
        scheme = urlsplit(config.parse_broker_url(url)).scheme
        if scheme in ("filesystem", "memory"):
            raise CommandError("--broker-url needs a broker server (amqp://... or redis://...)")
        try:
            with Connection(url, connect_timeout=3) as conn:
                conn.ensure_connection(max_retries=1, timeout=5)
        except Exception as exc:
            raise CommandError(f"the broker is not reachable at --broker-url: {exc}") from exc

    # --- the run ---------------------------------------------------------------

    def handle(self, *args, **opts):
        self.t_start = time.monotonic()
        steps = [int(s) for s in opts["steps"].split(",") if s.strip()]
        if not steps or min(steps) < 1:
            raise CommandError("--steps needs positive numbers, e.g. 50,100,200,400")
        seconds = max(20.0, opts["minutes"] * 60)
        cluster, pg = self._prepare(opts, steps)
        workdir = cluster.workdir
        self.hostile = None
        if opts["hostile"]:
            self.hostile = {
                "seconds": max(10.0, opts["hostile_minutes"] * 60),
                "clients": opts["hostile_clients"] or steps[0],
            }
        report: dict = {}
        ok = False
        try:
            report = self._run(cluster, opts, steps, seconds, pg)
            ok = report["ok"]
        finally:
            self.log("stopping processes")
            cluster.stop()
            if ok and not opts["keep"]:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                report["workdir"] = str(workdir)
        text = json.dumps(report, indent=2, default=str)
        self.stdout.write(text)
        if opts["out"]:
            Path(opts["out"]).write_text(text + "\n")
        if not ok:
            raise CommandError("the soak found a problem (see the report)")

    def _prepare(self, opts, steps: list[int]) -> tuple[Cluster, tuple[str, str] | None]:
        """Services checked, the database migrated, the soak's own Sentinel set
        started (``--redis sentinel``): the cluster to start, and the local
        PostgreSQL cluster to restart (None: that fault is skipped)."""
        own_redis = opts["redis"] == "sentinel"
        database_url, redis_url = self._check_services(own_redis)
        call_command("migrate", verbosity=0)
        pg = None if opts["no_postgres_restart"] else local_postgres_cluster(database_url)
        workdir = Path(tempfile.mkdtemp(prefix="soak-"))
        broker_url = opts["broker_url"]
        if broker_url:
            self._check_broker(broker_url)
        sentinels = None
        if own_redis:
            sentinels = SentinelSet(workdir)
            self.log(f"starting a Redis primary, replica and 3 sentinels ({sentinels.url})")
            try:
                sentinels.start()
            except Exception:
                sentinels.stop()
                raise
            redis_url = sentinels.url
            self._use_redis(redis_url)
        cluster = Cluster(
            workdir, database_url, redis_url, log=self.log, external_broker_url=broker_url
        )
        cluster.redis = sentinels
        # Every normal client may hold a connection to each gateway, plus the probes.
        cluster.max_connections_per_address = max(600, max(steps) + 200)
        return cluster, pg

    def _run(self, cluster: Cluster, opts, steps: list[int], seconds: float, pg) -> dict:
        """Start the processes, drive the load and the faults, drain, check."""
        self.log(f"starting processes (logs in {cluster.workdir})")
        balance = opts["prepaid_balance"] or int(250 * seconds)
        made = {}

        def make_scenario():
            made["scenario"] = scenarios.create(
                [cluster.node_url(i) for i in range(len(cluster.nodes))],
                prepaid_balance=balance,
            )

        cluster.start(before_gateways=make_scenario)
        scenario = made["scenario"]
        self.partition_plan = call_partitions.prepare()
        self.log(f"scenario {scenario.run}: 3 organizations, {len(scenario.keys)} keys")
        connections.close_all()
        report = asyncio.run(self.drive(cluster, scenario, steps, seconds, pg))
        died = cluster.dead()
        report["processes_died"] = died
        self.log("waiting for the pipeline to drain")
        results = report.pop("_results")
        killed = report["faults"].get("gateway_killed")
        report["drain"] = checks.wait_drained(scenario, results, opts["drain_timeout"], killed)
        report["checks"] = _checks(scenario, report, results, killed)
        report["ok"] = all(c["ok"] for c in report["checks"].values()) and not died
        return report

    async def drive(self, cluster: Cluster, scenario, steps, seconds, pg) -> dict:
        gateways = [cluster.gateway_url(i) for i in range(len(cluster.gateways))]
        traffic = Traffic(gateways, scenario.traffic_keys())
        await traffic.open(connections=max(steps) + 64)
        faults: dict = {"timeline": []}
        hostile = None
        try:
            await self.warm(traffic, scenario)
            if self.hostile is not None:
                hostile = await self.compare(cluster, traffic, scenario, **self.hostile)
            stop = asyncio.Event()
            active = [0]
            clients: list[asyncio.Task] = []
            t0 = time.time()
            fault_task = asyncio.create_task(
                Faults(
                    cluster, traffic, scenario, seconds, pg, faults, t0, self.log,
                    self.partition_plan,
                ).run()
            )  # fmt: skip
            windows = []
            step_seconds = seconds / len(steps)
            for index, n in enumerate(steps, 1):
                traffic.step = index
                active[0] = n
                while len(clients) < n:
                    clients.append(asyncio.create_task(traffic.client(len(clients), active, stop)))
                start = time.time()
                self.log(f"step {index}: {n} clients")
                await asyncio.sleep(step_seconds)
                windows.append((index, n, start, time.time()))
            stop.set()
            await asyncio.gather(*clients)
            await fault_task
        finally:
            await traffic.close()
        report = {
            "seconds": round(seconds, 1),
            "gateways": len(gateways),
            "nodes": len(cluster.nodes),
            "workers": len(cluster.workers),
            "broker": urlsplit(cluster.broker_url).scheme,
            "redis": "sentinel" if cluster.redis is not None else "single",
            "steps": checks.steps(traffic.results, windows),
            "faults": faults,
            "calls": len(traffic.results),
            "_results": traffic.results,
        }
        if hostile is not None:
            report["hostile"] = hostile
        return report

    async def compare(self, cluster: Cluster, traffic: Traffic, scenario, *, seconds, clients):
        """The normal load alone, then the same load beside the hostile phase
        (tooling.soak.hostile, a process of its own); their figures side by side."""
        windows = []
        attack = None
        for step, name in ((-1, "without"), (-2, "with")):
            proc = None
            if name == "with":
                proc = await asyncio.to_thread(self._start_attack, cluster, scenario, seconds + 4)
                await asyncio.sleep(4.0)  # the attack under way (slow clients connected)
            self.log(f"{clients} clients, {name} the hostile phase, {seconds:.0f} s")
            traffic.step = step
            stop = asyncio.Event()
            active = [clients]
            tasks = [asyncio.create_task(traffic.client(i, active, stop)) for i in range(clients)]
            start = time.time()
            await asyncio.sleep(seconds)
            windows.append((step, clients, start, time.time()))
            stop.set()
            await asyncio.gather(*tasks)
            if proc is not None:
                attack = await asyncio.to_thread(self._finish_attack, proc)
        without, with_ = checks.steps(traffic.results, windows)
        return {
            "seconds_per_phase": seconds,
            "clients": clients,
            "header_timeout_seconds": cluster.header_timeout,
            "max_connections_per_address": cluster.max_connections_per_address,
            "console_max_body_bytes": settings.CONSOLE_MAX_BODY_BYTES,
            "without_hostile": without,
            "with_hostile": with_,
            "attack": attack,
        }

    def _start_attack(self, cluster: Cluster, scenario, seconds: float) -> subprocess.Popen:
        args = {
            "gateways": [cluster.gateway_url(i) for i in range(len(cluster.gateways))],
            "seconds": seconds,
            "slow_per_gateway": cluster.max_connections_per_address + 50,
            "console_limit": settings.CONSOLE_MAX_BODY_BYTES,
            "flood_key": scenario.flooder.raw,
            "flood_workers": 20,
            "random_per_second": 50,
        }
        with open(cluster.workdir / "hostile.log", "ab") as log:
            return subprocess.Popen(  # noqa: S603 - our own module, argv built here
                [sys.executable, "-m", "tooling.soak.hostile", json.dumps(args)],
                cwd=settings.BASE_DIR,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    @staticmethod
    def _finish_attack(proc: subprocess.Popen) -> dict:
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            return {"error": "the hostile phase did not finish"}
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"the hostile phase exited {proc.returncode} without a summary"}

    async def warm(self, traffic: Traffic, scenario) -> None:
        """One call per key on each gateway: keys cached, connections open, nodes
        seen (and the first calls wait for the routing snapshot)."""
        deadline = time.monotonic() + 60
        for key in scenario.keys.values():
            for gw in range(len(traffic.gateway_urls)):
                while True:
                    r = await traffic.call(key, "openai", False, gateway=gw)
                    if r.status != 503 or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.5)
