"""The soak's own Redis Sentinel set (``manage.py soak --redis sentinel``):
a primary, a replica and three sentinels (quorum 2), started from the
``redis-server`` binary in the work directory, on the first free loopback
ports from ``DATA_PORTS`` and ``SENTINEL_PORTS``.

The fault (``kill_primary``): SIGKILL the current primary, wait until the
sentinels promote the replica, then start the killed server again at once,
``--replicaof`` the new primary: the limits store counts an admission only
once a replica holds it, so until the set has a replica again every call is
refused (503 ``limits_unavailable``), never admitted unreplicated."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
from pathlib import Path

import redis

from tooling.soak.procs import Proc

SERVICE = "soak"
DATA_PORTS = 7300  # the first two free ports from here: primary and replica
SENTINEL_PORTS = 26600  # the first three free ports from here: the sentinels
DOWN_AFTER_MS = 1000


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(start: int, count: int) -> list[int]:
    out = [p for p in range(start, start + 100) if _free(p)][:count]
    if len(out) < count:
        raise RuntimeError(f"no {count} free loopback ports from {start}")
    return out


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)


def _ask(port: int, *args: str):
    client = _client(port)
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def wait_for(what: str, check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass  # not there yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class SentinelSet:
    def __init__(self, workdir: Path, db: int = 0):
        self.root = workdir / "redis"
        self.db = db
        self.servers: dict[int, Proc] = {}
        self.primary, self.replica = free_ports(DATA_PORTS, 2)
        self.sentinels = free_ports(SENTINEL_PORTS, 3)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/{self.db}"

    def _proc(self, port: int, *args: str) -> Proc:
        redis_server = shutil.which("redis-server")
        if redis_server is None:
            raise RuntimeError("--redis sentinel needs redis-server (apt-get install redis-server)")
        work = self.root / str(port)
        work.mkdir(parents=True, exist_ok=True)
        argv = [redis_server, *args, "--port", str(port), "--bind", "127.0.0.1",
                "--dir", str(work), "--save", "", "--appendonly", "no"]  # fmt: skip
        return Proc(f"redis-{port}", argv, os.environ.copy(), work / "log", port=port)

    def _start(self, port: int, *args: str) -> None:
        proc = self.servers[port] = self._proc(port, *args)
        proc.start()
        proc.wait_port(30)

    def start(self) -> None:
        self._start(self.primary)
        self._start(self.replica, "--replicaof", "127.0.0.1", str(self.primary))
        for port in self.sentinels:
            conf = self.root / f"sentinel-{port}.conf"  # rewritten by the sentinel
            conf.write_text(
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            self._start(port, str(conf), "--sentinel")
        wait_for("the replica in sync", lambda: self.replica_linked(self.replica))
        wait_for("every sentinel sees the replica and the others", self._sentinels_ready)

    def replica_linked(self, port: int) -> bool:
        info = _client(port).info("replication")
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def _sentinels_ready(self) -> bool:
        for port in self.sentinels:
            fields = _ask(port, "SENTINEL", "MASTER", SERVICE)  # a dict of bytes (redis-py)
            if fields.get(b"num-slaves") != b"1" or fields.get(b"num-other-sentinels") != b"2":
                return False
        return True

    def current_primary(self) -> int | None:
        for port in self.sentinels:
            try:
                addr = _ask(port, "SENTINEL", "get-master-addr-by-name", SERVICE)
            except (redis.RedisError, OSError):
                continue
            if addr:
                return int(addr[1])
        return None

    def kill_primary(self) -> dict:
        """SIGKILL the primary; back as a replica once the sentinels promoted
        the other. Seconds to the promotion and to the replica's sync."""
        old = self.current_primary() or self.primary
        other = self.replica if old == self.primary else self.primary
        t0 = time.monotonic()
        self.servers[old].kill()
        wait_for("the sentinels to promote the replica", lambda: self.current_primary() == other)
        promoted = time.monotonic() - t0
        # Back as the new primary's replica from its first second (what its
        # configuration would say after a failover; the sentinels agree).
        self._start(old, "--replicaof", "127.0.0.1", str(other))
        # Whole again: one of the two replicating from the other, the sentinels'
        # primary. Under load the sentinels may fail over once more (the new
        # primary busy with the full resync misses their pings) and promote the
        # old one back: that is a whole set too.
        roles: list[tuple[int, int]] = []

        def whole() -> bool:
            primary = self.current_primary()
            for replica in (old, other):
                if replica != primary and primary in (old, other) and self.replica_linked(replica):
                    roles[:] = [(primary, replica)]
                    return True
            return False

        wait_for("the old primary back in the set as a replica", whole, 60)
        self.primary, self.replica = roles[0]
        return {
            "killed_port": old,
            "failover_seconds": round(promoted, 2),
            "replica_back_seconds": round(time.monotonic() - t0, 2),
        }

    def running(self) -> list[Proc]:
        return list(self.servers.values())

    def stop(self) -> None:
        for proc in self.servers.values():
            with contextlib.suppress(Exception):  # best effort at teardown
                proc.stop(grace=5)
