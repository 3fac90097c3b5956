"""A durable local spool of usage batches the broker would not take.

The file holds one JSON line per batch, ``{"seq":N,"crc":C,"batch":[...]}``,
where ``C`` is the CRC-32 of the ``batch`` text exactly as written. Progress
of a replay lives next to it in ``<path>.offset`` (the byte offset and
sequence number of the last batch sent), replaced atomically after every
batch, so a crash mid-replay re-sends at most the batch in flight; ingest is
idempotent on ``request_id``, so that re-send is harmless. A line cut short
by a crash mid-append is truncated away; a complete line whose checksum does
not match is skipped and logged, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

_LINE = re.compile(rb'\{"seq":(\d+),"crc":(\d+),"batch":(.*)\}\n', re.DOTALL)


class Pending(NamedTuple):
    batches: int
    bytes: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _decode(line: bytes) -> tuple[int, list[dict[str, Any]]] | None:
    """``(seq, batch)`` of a complete spool line, or ``None`` if it is corrupt."""
    m = _LINE.fullmatch(line)
    if m is None:
        return None
    payload = m.group(3)
    if zlib.crc32(payload) != int(m.group(2)):
        return None
    try:
        batch = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(batch, list):
        return None
    return int(m.group(1)), batch


class Spool:
    """An append-only file of batches, replayed in order. Thread-safe: every
    operation holds one lock, including ``replay`` while it sends (the
    emitter's single thread is the only caller in practice)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._offset_path = self.path.with_name(self.path.name + ".offset")
        self._lock = threading.RLock()
        self.corrupt_batches = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._recover()

    # --- state ---------------------------------------------------------

    def _read_offset(self) -> tuple[int, int]:
        try:
            state = json.loads(self._offset_path.read_bytes())
            return int(state["offset"]), int(state["seq"])
        except FileNotFoundError:
            return 0, 0
        except (ValueError, KeyError, TypeError):
            # Written atomically, so this is damage from outside: start over;
            # re-sending is safe, skipping is not.
            logger.warning(
                "usage spool: unreadable %s, replaying from the start", self._offset_path
            )
            return 0, 0

    def _write_offset(self, offset: int, seq: int) -> None:
        tmp = self._offset_path.with_name(self._offset_path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps({"offset": offset, "seq": seq}).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._offset_path)
        _fsync_dir(self.path.parent)

    def _recover(self) -> None:
        """Drop a torn last line, and count what is left to replay."""
        size = self.path.stat().st_size if self.path.exists() else 0
        self._offset, self._done_seq = self._read_offset()
        if self._offset > size:  # the data file went first in a compaction
            self._offset, self._done_seq = 0, 0
            self._offset_path.unlink(missing_ok=True)
        self._next_seq = self._done_seq + 1
        self._pending_batches = 0
        self._size = size
        if not size:
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            pos = self._offset
            for line in f:
                if not line.endswith(b"\n"):
                    self._truncate(pos)
                    break
                pos += len(line)
                decoded = _decode(line)
                if decoded is not None:
                    self._next_seq = max(self._next_seq, decoded[0] + 1)
                self._pending_batches += 1

    def _truncate(self, at: int) -> None:
        logger.warning("usage spool: truncating a torn last batch in %s at byte %d", self.path, at)
        with open(self.path, "r+b") as f:
            f.truncate(at)
            f.flush()
            os.fsync(f.fileno())
        self._size = at

    # --- public --------------------------------------------------------

    def append(self, batch: list[dict[str, Any]]) -> None:
        """Write one batch durably (flushed and fsynced before returning)."""
        payload = json.dumps(batch, separators=(",", ":")).encode()
        with self._lock:
            seq = self._next_seq
            line = b'{"seq":%d,"crc":%d,"batch":%s}\n' % (seq, zlib.crc32(payload), payload)
            created = not self.path.exists()
            with open(self.path, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            if created:
                _fsync_dir(self.path.parent)
            self._next_seq = seq + 1
            self._pending_batches += 1
            self._size += len(line)

    @property
    def pending_batches(self) -> int:
        """Batches not yet replayed, read without the lock (a replay holds it
        while it sends): for the metrics the event loop reads every second."""
        return self._pending_batches

    def pending(self) -> Pending:
        """Batches and bytes not yet replayed."""
        with self._lock:
            return Pending(self._pending_batches, self._size - self._offset)

    def replay(self, send: Callable[[list[dict[str, Any]]], object]) -> int:
        """Send every pending batch in order, recording progress after each;
        return how many were sent. An exception from ``send`` propagates,
        with the batches before it recorded as done. A fully replayed spool
        is removed."""
        sent = 0
        with self._lock:
            if self._pending_batches == 0 and self._size == self._offset:
                return 0
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                pos = self._offset
                for line in f:
                    if not line.endswith(b"\n"):
                        self._truncate(pos)
                        break
                    pos += len(line)
                    decoded = _decode(line)
                    if decoded is None:
                        self.corrupt_batches += 1
                        logger.error("usage spool: skipping a corrupt batch in %s", self.path)
                        seq = self._done_seq
                    else:
                        seq, batch = decoded
                        if seq > self._done_seq:
                            send(batch)
                            sent += 1
                    self._write_offset(pos, max(seq, self._done_seq))
                    self._offset, self._done_seq = pos, max(seq, self._done_seq)
                    self._pending_batches -= 1
            if self._offset >= self._size:
                self._compact()
        return sent

    def _compact(self) -> None:
        # Data first: a crash between the two leaves an offset past the end
        # of a missing file, which _recover reads as "nothing pending".
        self.path.unlink(missing_ok=True)
        self._offset_path.unlink(missing_ok=True)
        _fsync_dir(self.path.parent)
        self._offset = self._size = self._pending_batches = 0
        # Sequence numbers restart with the file; _done_seq must follow.
        self._done_seq, self._next_seq = 0, 1
