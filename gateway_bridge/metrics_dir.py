"""The directory the gateway processes of one host share their metrics
through (``GATEWAY_METRICS_DIR``), so that any one of them answers a scrape
for all.

Each process holds an exclusive ``flock`` on ``gw-<pid>-<token>.lock`` for
its lifetime (the random token: a reused pid never takes a dead process's
name) and replaces ``gw-<pid>-<token>.json``, its latest snapshot, atomically
(a temporary file renamed over it) every second and before it answers a
scrape. A lock nobody holds marks a dead process: the scrape that finds it
adds its counters to ``archive.json`` and removes its files, under an
exclusive lock on ``archive.lock`` that every scrape takes, so no scrape
counts a dead process twice or not at all.

Nothing here runs on the hot path: the writes and the scrape's reads run in
a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway_bridge.metrics import fold

logger = logging.getLogger(__name__)

ARCHIVE = "archive.json"
ARCHIVE_LOCK = "archive.lock"
PREFIX = "gw-"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class MetricsDirectory:
    """This process's place in the shared metrics directory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.stem = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        self._lock_fd: int | None = None
        self._write_lock = threading.Lock()
        self._written_seq = -1

    @property
    def snapshot_path(self) -> Path:
        return self.path / f"{self.stem}.json"

    def open(self) -> None:
        """Claim this process's name (its lock, held until ``close``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        lock = self.path / f"{self.stem}.lock"
        # A scrape may sweep the new file between its creation and the lock
        # (it looks like the lock of a process that died before its first
        # snapshot): then lock a fresh one. The name is this process's alone,
        # so nobody else holds it for long.
        for _ in range(100):
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                    self._lock_fd = fd
                    return
            except (FileNotFoundError, BlockingIOError):
                pass
            except OSError:
                os.close(fd)
                raise
            os.close(fd)
            time.sleep(0.01)
        raise OSError(f"cannot lock {lock}")

    def close(self, snapshot: dict[str, Any] | None = None) -> None:
        """Write the last snapshot and let go: the next scrape archives it."""
        with self._write_lock:
            if self._lock_fd is None:
                return
            try:
                if snapshot is not None:
                    self._write(snapshot)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    def write(self, snapshot: dict[str, Any]) -> None:
        """Replace this process's snapshot file with ``snapshot`` unless a
        newer one (a higher ``seq``) is already there."""
        with self._write_lock:
            if self._lock_fd is not None:
                self._write(snapshot)

    def _write(self, snapshot: dict[str, Any]) -> None:
        seq = snapshot.get("seq", 0)
        if seq < self._written_seq:
            return
        data = json.dumps(snapshot, separators=(",", ":")).encode()
        _write_atomically(self.snapshot_path, data)
        self._written_seq = seq

    def collect(self, own: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The snapshots of the host's live processes (``own`` for this one,
        written first) and the archive of the dead, after archiving those
        that died since the last scrape."""
        self.write(own)
        # By name, so that every scrape adds the same floats in the same order.
        live: list[tuple[str, dict[str, Any]]] = [(self.stem, own)]
        with self._archive_locked():
            archive = _read_json(self.path / ARCHIVE)
            dead: list[tuple[Path, int]] = []
            stems = set()
            for path in self.path.glob(f"{PREFIX}*.json"):
                stem = path.stem
                stems.add(stem)
                if stem == self.stem:
                    continue
                fd = self._claim_if_dead(stem)
                if fd is None:
                    snap = _read_json(path)
                    if snap is not None:
                        live.append((stem, snap))
                    continue
                dead.append((path, fd))
            if dead:
                try:
                    for path, _ in dead:
                        snap = _read_json(path)
                        if snap is not None:
                            archive = fold(archive, snap)
                    _write_atomically(
                        self.path / ARCHIVE, json.dumps(archive, separators=(",", ":")).encode()
                    )
                    for path, _ in dead:
                        with contextlib.suppress(OSError):
                            path.unlink()
                        with contextlib.suppress(OSError):
                            path.with_suffix(".lock").unlink()
                finally:
                    for _, fd in dead:
                        os.close(fd)
            self._sweep_locks(stems)
        live.sort(key=lambda item: item[0])
        return [snap for _, snap in live], archive

    @contextlib.contextmanager
    def _archive_locked(self) -> Iterator[None]:
        fd = os.open(self.path / ARCHIVE_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _claim_if_dead(self, stem: str) -> int | None:
        """The locked fd of ``stem``'s lock file when its process is gone
        (nobody holds it, or it is missing); None while the process lives."""
        lock = self.path / f"{stem}.lock"
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            # No lock at all: the process is gone (and its lock swept).
            return os.open(self.path / ARCHIVE_LOCK, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def _sweep_locks(self, stems: set[str]) -> None:
        """Lock files of processes that died before their first snapshot."""
        for lock in self.path.glob(f"{PREFIX}*.lock"):
            if lock.stem in stems or lock.stem == self.stem:
                continue
            fd = self._claim_if_dead(lock.stem)
            if fd is None:
                continue
            try:
                if not lock.with_suffix(".json").exists():
                    with contextlib.suppress(OSError):
                        lock.unlink()
            finally:
                os.close(fd)
