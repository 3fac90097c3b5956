"""This process's usage spool and journal: the first free slot of
``GATEWAY_SPOOL_DIR`` (a lock file per slot, held while the process lives)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gateway_bridge import journal
from gateway_bridge.spool import Spool


def _lock_slot(directory: Path, slot: int) -> int | None:
    fd = os.open(directory / f"usage-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def open_spool(directory: Path, with_journal: bool) -> tuple[Spool, int, journal.Journal | None]:
    """This process's spool and usage journal: the first free slot of
    ``directory`` (a lock file per slot), so a restarted process takes
    over (and replays) the spool a dead one left. With the journal on, the
    journal files a dead process left, on this slot or on any other slot
    whose lock is free, are moved into this spool first."""
    directory.mkdir(parents=True, exist_ok=True)
    for slot in range(1024):
        fd = _lock_slot(directory, slot)
        if fd is None:
            continue
        spool = Spool(directory / f"usage-{slot}.spool")
        if not with_journal:
            return spool, fd, None
        journal.adopt(directory / f"usage-{slot}", spool)
        for lock in sorted(directory.glob("usage-*.lock")):
            other = lock.name[len("usage-") : -len(".lock")]
            if not other.isdigit() or int(other) == slot:
                continue
            other_fd = _lock_slot(directory, int(other))
            if other_fd is not None:  # no live owner: its journal is orphaned
                try:
                    journal.adopt(directory / f"usage-{other}", spool)
                finally:
                    os.close(other_fd)
        return spool, fd, journal.Journal(directory / f"usage-{slot}")
    raise RuntimeError(f"no free spool slot in {directory}")
