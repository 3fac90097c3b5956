"""The usage journal: every finished call's event on disk the moment the
gateway hands it to the emitter (just before the answer's last bytes go to
the connection: ``Gateway._recording``), so events still waiting in the
emitter's memory (batched for up to ``GATEWAY_EMIT_MAX_DELAY``) survive a
SIGKILL of the gateway process, even one right after the answer.

``Journal.write`` copies one JSON line (the event's wire form) into the
current file, mapped shared (``mmap``): no system call, no fsync, and the GIL
kept (an ``os.write`` per call releases it, and under load the event loop
then waits for the emitter's thread: +6 ms p50 in ``bench_gateway``). The
pages are the kernel's page cache once the copy is done, so the line survives
the process's death (a crash, SIGKILL, the OOM killer); it does not survive
the machine's (power loss, a kernel panic): that would need an fsync per
call. Each file is ``FILE_BYTES`` long, zero-filled past its last line; a
full one is replaced on the spot.

Files: ``<spool dir>/usage-<slot>.journal.<pid>.<n>`` next to the slot's spool
(``usage-<slot>.spool``), owned by the process holding the slot's lock. The
emitter's thread ``rotate``s to a new file after it delivers a batch (sent,
or written to the durable spool) and ``retire``s a file once every event
queued before its rotation is delivered: deleted, its mapping closed a few
seconds later (an ``emit`` that read the old file just before the rotation
may still write to it; its event was delivered already).

Recovery (``adopt``): the next process to take the slot's lock (a restarted
gateway), or any gateway starting while a slot's lock is free, moves the
lines of a dead owner's journal files into its own spool (durably) and
deletes them; the spool's replay then sends them. Ingest is idempotent on
``request_id``, so an event both delivered and still journaled (a crash
between the delivery and the file's retirement) is stored once."""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from gateway_bridge.spool import Spool

logger = logging.getLogger(__name__)

CLOSE_AFTER_S = 5.0  # a retired file's mapping is closed this long after
FILE_BYTES = 4 * 1024 * 1024  # sparse: only the pages written take space


class _File:
    __slots__ = ("mm", "path", "pos", "until")

    def __init__(self, path: Path):
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, FILE_BYTES)
            self.mm = mmap.mmap(fd, FILE_BYTES, mmap.MAP_SHARED, mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping stays
        self.pos = 0
        self.until = 0  # events queued before its rotation (set then)

    def close(self) -> None:
        self.mm.close()


class Journal:
    """The journal of one spool slot (``prefix``: ``<dir>/usage-<slot>``).
    ``write`` on any thread; ``rotate`` / ``retire`` / ``close`` on the
    emitter's thread only."""

    def __init__(self, prefix: Path):
        self.prefix = prefix
        self._n = itertools.count(1)
        self._lock = threading.Lock()  # uncontended with one emitting thread
        self._old: deque[_File] = deque()  # rotated, not yet delivered
        self._closing: deque[tuple[float, _File]] = deque()  # retired, to unmap
        self.current = self._new()
        self.write_errors = 0

    def _new(self) -> _File:
        return _File(Path(f"{self.prefix}.journal.{os.getpid()}.{next(self._n)}"))

    def write(self, event: Any) -> None:
        """One event as one line, copied into the mapped file (the hot path)."""
        line = orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE)
        with self._lock:
            f = self.current
            end = f.pos + len(line)
            try:
                if end > FILE_BYTES:  # full: a new file now, the full one kept
                    self._swap(self._new(), -1)
                    f = self.current
                    end = len(line)
                f.mm[f.pos : end] = line
                f.pos = end
            except (OSError, ValueError):  # a full disk, a line over FILE_BYTES
                self.write_errors += 1  # the event still goes out from memory

    def _swap(self, new: _File, queued: int) -> None:
        old, self.current = self.current, new
        old.until = queued
        self._old.append(old)

    def rotate(self, queued: int) -> None:
        """Start a new file; the current one holds events numbered below
        ``queued`` (the emitter's count of events queued so far)."""
        new = self._new()  # the system calls outside the writer's lock
        with self._lock:
            self._swap(new, queued)
            # A file the writer filled up waits for this rotation's count.
            for f in self._old:
                if f.until < 0:
                    f.until = queued

    def retire(self, delivered: int) -> None:
        """Delete the files whose events are all delivered (``delivered``:
        events sent or spooled so far, in queue order)."""
        now = time.monotonic()
        while self._old and self._old[0].until <= delivered:
            if self._old[0].until < 0:
                break  # filled by the writer: its count comes with the next rotation
            f = self._old.popleft()
            f.path.unlink(missing_ok=True)
            self._closing.append((now + CLOSE_AFTER_S, f))
        while self._closing and self._closing[0][0] <= now:
            self._closing.popleft()[1].close()

    @property
    def files(self) -> int:
        return 1 + len(self._old)

    def close(self) -> None:
        """Every event delivered (the emitter flushed on shutdown): no file left."""
        for f in (*self._old, self.current):
            f.path.unlink(missing_ok=True)
            f.close()
        for _, f in self._closing:
            f.close()
        self._old.clear()
        self._closing.clear()


def leftovers(prefix: Path) -> list[Path]:
    """A slot's journal files (a dead owner's), oldest first."""

    def order(p: Path) -> tuple[int, int]:
        pid, _, n = p.name.rpartition(".journal.")[2].partition(".")
        return (int(pid) if pid.isdigit() else 0, int(n) if n.isdigit() else 0)

    return sorted(prefix.parent.glob(f"{prefix.name}.journal.*"), key=order)


def read(path: Path) -> list[dict[str, Any]]:
    """The events of one journal file (its lines up to the zero fill); a line
    cut short (the process died in the middle of the copy) or unreadable is
    skipped."""
    out = []
    data = path.read_bytes().partition(b"\0")[0]
    for line in data.split(b"\n")[:-1]:  # the last piece: empty, or cut short
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            logger.error("usage journal: skipping an unreadable line in %s", path)
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def adopt(prefix: Path, spool: Spool, max_batch: int = 500) -> int:
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
