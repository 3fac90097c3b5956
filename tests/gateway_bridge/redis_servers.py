"""Real Redis Cluster and Sentinel sets for the tests, started from the
``redis-server`` binary in a temporary directory and torn down afterwards
(SIGKILL-able one process at a time, to see a failover).

Ports: the first free ones from 7100 (data nodes; a cluster node's bus port
is its port + 10000) and from 26400 (sentinels)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.services import require

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")


def require_redis_binaries() -> None:
    require(
        REDIS_SERVER is not None and REDIS_CLI is not None,
        "redis-server / redis-cli are not installed (apt-get install redis-server)",
    )


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(start: int, count: int, *, bus: bool = False) -> list[int]:
    out, port = [], start
    while len(out) < count:
        if port > start + 99:
            raise RuntimeError(f"no {count} free ports from {start}")
        if _free(port) and (not bus or _free(port + 10000)):
            out.append(port)
        port += 1
    return out


def cli(port: int, *args: str, timeout: float = 5.0) -> str:
    done = subprocess.run(
        [REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.stdout.strip()


def wait_for(what: str, check, timeout: float = 20.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except (OSError, subprocess.SubprocessError, AssertionError):
            got = None  # not there yet (a node down, no primary for a slot yet)
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


class Servers:
    """Processes started in ``root``; ``kill(port)`` SIGKILLs one,
    ``restart(port)`` starts it again with the same arguments."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: dict[int, subprocess.Popen] = {}
        self.args: dict[int, list[str]] = {}

    def start(self, port: int, *args: str) -> None:
        work = self.root / str(port)
        work.mkdir(exist_ok=True)
        argv = [
            REDIS_SERVER,
            *args,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(work),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.args[port] = argv
        log = open(work / "log", "ab")  # noqa: SIM115 - the process keeps it
        self.procs[port] = subprocess.Popen(argv, stdout=log, stderr=log, cwd=work)
        wait_for(f"redis on {port}", lambda: cli(port, "PING") == "PONG")

    def kill(self, port: int) -> None:
        proc = self.procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def restart(self, port: int) -> None:
        argv = self.args[port]
        log = open(self.root / str(port) / "log", "ab")  # noqa: SIM115
        self.procs[port] = subprocess.Popen(argv, stdout=log, stderr=log, cwd=self.root / str(port))
        wait_for(f"redis on {port} again", lambda: cli(port, "PING") == "PONG")

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_cluster(root: Path, *, primaries: int = 3, replicas: int = 1):
    """A Redis Cluster of ``primaries`` primaries with ``replicas`` each, fast
    failover (node timeout 1 s). Yields ``(servers, ports)``."""
    require_redis_binaries()
    ports = free_ports(7100, primaries * (1 + replicas), bus=True)
    servers = Servers(root)
    try:
        for port in ports:
            servers.start(
                port,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{port}.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-replica-validity-factor",
                "0",
                "--cluster-require-full-coverage",
                "no",
            )
        subprocess.run(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=30,
            check=True,
        )
        for port in ports:
            wait_for(f"cluster_state:ok on {port}", lambda p=port: ok(p))
        wait_for("every replica in sync", lambda: replicas_synced(ports))
        yield servers, ports
    finally:
        servers.stop()


def ok(port: int) -> bool:
    info = cli(port, "CLUSTER", "INFO")
    return "cluster_state:ok" in info and "cluster_slots_ok:16384" in info


def replicas_synced(ports) -> bool:
    for port in ports:
        info = cli(port, "INFO", "replication")
        if "role:slave" in info and "master_link_status:up" not in info:
            return False
    return True


def primary_for(port: int, key: str) -> int:
    """The port of the primary serving ``key``'s slot, as node ``port`` sees it."""
    slot = int(cli(port, "CLUSTER", "KEYSLOT", key))
    for line in cli(port, "CLUSTER", "NODES").splitlines():
        fields = line.split()
        if "master" not in fields[2] or "fail" in fields[2] or len(fields) < 9:
            continue
        for span in fields[8:]:
            if span.startswith("["):
                continue
            lo, _, hi = span.partition("-")
            if int(lo) <= slot <= int(hi or lo):
                return int(fields[1].split(":")[1].split("@")[0])
    raise AssertionError(f"no primary serves slot {slot}")


SERVICE = "limits"


@contextlib.contextmanager
def redis_sentinel(root: Path):
    """One primary, one replica and three sentinels (quorum 2, down after
    500 ms). Yields ``(servers, primary port, replica port, sentinel ports)``."""
    require_redis_binaries()
    primary, replica = free_ports(7100, 2)
    sentinels = free_ports(26400, 3)
    servers = Servers(root)
    try:
        servers.start(primary)
        servers.start(replica, "--replicaof", "127.0.0.1", str(primary))
        for port in sentinels:
            conf = root / f"sentinel-{port}.conf"
            conf.write_text(
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 500\n"
                f"sentinel failover-timeout {SERVICE} 3000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            servers.start(port, str(conf), "--sentinel")
        wait_for(
            "the replica in sync",
            lambda: "master_link_status:up" in cli(replica, "INFO", "replication"),
        )
        wait_for(
            "every sentinel sees the replica and the others",
            lambda: all(_sentinel_ready(p) for p in sentinels),
        )
        yield servers, primary, replica, sentinels
    finally:
        servers.stop()


def _sentinel_ready(port: int) -> bool:
    info = cli(port, "SENTINEL", "MASTER", SERVICE).splitlines()
    fields = dict(zip(info[::2], info[1::2], strict=False))
    return fields.get("num-slaves") == "1" and fields.get("num-other-sentinels") == "2"


def sentinel_primary(sentinel_port: int) -> int:
    out = cli(sentinel_port, "SENTINEL", "get-master-addr-by-name", SERVICE).splitlines()
    return int(out[1])


# --- spending through a failover ------------------------------------------------


async def spend_through_failover(
    url: str, cap, worst: int, *, kill, failed_over, recover, callers: int = 8
) -> dict:
    """``callers`` concurrent calls admit ``worst`` on ``cap`` and settle it
    in full, through the limits store on ``url``, while ``kill()`` SIGKILLs a
    primary; once ``failed_over()`` holds, ``recover()`` restarts the killed
    node as a replica. Runs until the cap refuses after the recovery. What
    happened: admitted amounts, errors (the gateway answers each with 503
    ``limits_unavailable``), refusals, admissions after the recovery and the
    bucket's final (used, reserved)."""
    from gateway_bridge.limits import RedisLimitStore
    from gateway_bridge.protocols.base import GatewayError

    store = RedisLimitStore.from_url(url, timeout=2.0)
    out = {"admitted": [], "errors": [], "refused": 0, "after": 0, "after_refused": 0}
    state = {"recovered": False, "done": False}
    await store.seed(cap.key, 0, 3600)

    async def caller(i: int) -> None:
        n = 0
        while not state["done"]:
            rid, n = f"c{i}-{n}", n + 1
            recovered = state["recovered"]
            try:
                await store.admit(rid, worst, [cap], [], 0, hold_seconds=30)
            except GatewayError:
                out["refused"] += 1
                if recovered:
                    out["after_refused"] += 1
                    state["done"] = True
                await asyncio.sleep(0.02)
                continue
            except Exception as exc:  # the store is unavailable: a 503 for the caller
                out["errors"].append(exc)
                await asyncio.sleep(0.05)
                continue
            out["admitted"].append(worst)
            if recovered:
                out["after"] += 1
            await asyncio.sleep(0.01)
            try:
                await store.settle(rid, worst, 0)
            except Exception as exc:
                out["errors"].append(exc)
            await asyncio.sleep(0.01)

    async def conductor() -> None:
        await asyncio.sleep(0.5)
        await asyncio.to_thread(kill)
        await asyncio.to_thread(wait_for, "the failover", failed_over, 30.0)
        await asyncio.to_thread(recover)
        state["recovered"] = True

    try:
        tasks = [asyncio.create_task(caller(i)) for i in range(callers)]
        await conductor()
        await asyncio.wait_for(asyncio.gather(*tasks), 30.0)
        out["final"] = await store.snapshot(cap.key)
    finally:
        state["done"] = True
        await store.close()
    return out


class Heard:
    """The messages ``notify.listen`` hands over, on its own thread."""

    def __init__(self):
        import threading

        from gateway_bridge import notify

        self.messages: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=notify.listen, args=(self.stop, self.messages.append), daemon=True
        )
        self.thread.start()

    def published(self, message: str, within: float = 10.0) -> bool:
        """Publish ``message`` (again every 0.2 s) until the listener hears it."""
        from gateway_bridge import notify

        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            notify.publish(message)
            end = time.monotonic() + 0.2
            while time.monotonic() < end:
                if message in self.messages:
                    return True
                time.sleep(0.01)
        return False

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
