"""The usage journal: every finished call's event on disk the moment the
gateway hands it to the emitter, so events still waiting in the emitter's
memory (batched for up to ``GATEWAY_EMIT_MAX_DELAY``) survive a SIGKILL of
the gateway process.

``Journal.write`` appends one JSON line (the event's wire form) with a single
unbuffered ``os.write`` on an ``O_APPEND`` descriptor: no lock, no fsync. The
line is in the kernel once the call returns, so it survives the process's
death (a crash, SIGKILL, the OOM killer); it does not survive the machine's
(power loss, a kernel panic): that would need an fsync per call.

Files: ``<spool dir>/<slot>.journal.<pid>.<n>`` next to the slot's spool
(``usage-<slot>.spool``), owned by the process holding the slot's lock. The
emitter's thread ``rotate``s to a new file after it delivers a batch (sent,
or written to the durable spool) and ``retire``s a file once every event
queued before its rotation is delivered: deleted, its descriptor closed a
few seconds later (an ``emit`` that read the old file just before the
rotation may still write to it; its event was delivered already).

Recovery (``adopt``): the next process to take the slot's lock (a restarted
gateway), or any gateway starting while a slot's lock is free, moves the
lines of a dead owner's journal files into its own spool (durably) and
deletes them; the spool's replay then sends them. Ingest is idempotent on
``request_id``, so an event both delivered and still journaled (a crash
between the delivery and the file's retirement) is stored once."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from pathlib import Path

import orjson

logger = logging.getLogger(__name__)

CLOSE_AFTER_S = 5.0  # a retired file's descriptor is closed this long after


class _File:
    __slots__ = ("fd", "path", "until")

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.until = 0  # events queued before its rotation (set then)


class Journal:
    """The journal of one spool slot (``prefix``: ``<dir>/usage-<slot>``).
    ``write`` on any thread; ``rotate`` / ``retire`` / ``close`` on the
    emitter's thread only."""

    def __init__(self, prefix: Path):
        self.prefix = prefix
        self._n = 0
        self._old: deque[_File] = deque()  # rotated, not yet delivered
        self._closing: deque[tuple[float, int]] = deque()  # (when, fd) to close
        self.current = self._new()
        self.write_errors = 0

    def _new(self) -> _File:
        self._n += 1
        return _File(Path(f"{self.prefix}.journal.{os.getpid()}.{self._n}"))

    def write(self, event) -> None:
        """One event as one line, one ``os.write`` (the hot path)."""
        try:
            os.write(self.current.fd, orjson.dumps(event) + b"\n")
        except OSError:  # a full disk: the event still goes out from memory
            self.write_errors += 1

    def rotate(self, queued: int) -> None:
        """Start a new file; the current one holds events numbered below
        ``queued`` (the emitter's count of events queued so far)."""
        old, self.current = self.current, self._new()
        old.until = queued
        self._old.append(old)

    def retire(self, delivered: int) -> None:
        """Delete the files whose events are all delivered (``delivered``:
        events sent or spooled so far, in queue order)."""
        now = time.monotonic()
        while self._old and self._old[0].until <= delivered:
            f = self._old.popleft()
            f.path.unlink(missing_ok=True)
            self._closing.append((now + CLOSE_AFTER_S, f.fd))
        while self._closing and self._closing[0][0] <= now:
            os.close(self._closing.popleft()[1])

    @property
    def files(self) -> int:
        return 1 + len(self._old)

    def close(self) -> None:
        """Every event delivered (the emitter flushed on shutdown): no file left."""
        for f in (*self._old, self.current):
            f.path.unlink(missing_ok=True)
            os.close(f.fd)
        for _, fd in self._closing:
            os.close(fd)
        self._old.clear()
        self._closing.clear()


def leftovers(prefix: Path) -> list[Path]:
    """A slot's journal files (a dead owner's), oldest first."""

    def order(p: Path) -> tuple[int, int]:
        pid, _, n = p.name.rpartition(".journal.")[2].partition(".")
        return (int(pid) if pid.isdigit() else 0, int(n) if n.isdigit() else 0)

    return sorted(prefix.parent.glob(f"{prefix.name}.journal.*"), key=order)


def read(path: Path) -> list[dict]:
    """The events of one journal file; a line cut short (the process died in
    the middle of the write) or unreadable is skipped."""
    out = []
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                logger.error("usage journal: skipping an unreadable line in %s", path)
                continue
            if isinstance(event, dict):
                out.append(event)
    return out


def adopt(prefix: Path, spool, max_batch: int = 500) -> int:
    """Move the events of ``prefix``'s journal files (left by a dead process:
    the caller holds the slot's lock) into ``spool``; delete the files.
    Returns how many events were recovered."""
    total = 0
    for path in leftovers(prefix):
        events = read(path)
        for i in range(0, len(events), max_batch):
            spool.append(events[i : i + max_batch])  # durable before the file goes
        total += len(events)
        path.unlink(missing_ok=True)
    if total:
        logger.warning("usage journal: recovered %d events a stopped process left", total)
    return total
