"""CPU time of a load run: the generator's own (``time.process_time``) and the
servers' it was asked to watch (user + system of all their threads, from
``/proc``), each read as the measured window opens and as it closes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all threads) from /proc; None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


def cpu_of(pids: Iterable[int]) -> dict[int, float | None]:
    """``process_cpu_seconds`` of each of ``pids``."""
    return {pid: process_cpu_seconds(pid) for pid in pids}


@dataclass
class CpuClocks:
    """CPU time read as the measured window opens and as it closes: this process's
    (``time.process_time``) and each watched server process's (``/proc``)."""

    pids: list[int]
    at_start: float | None = None
    at_end: float | None = None
    servers_at_start: dict[int, float | None] = field(default_factory=dict)
    servers_at_end: dict[int, float | None] = field(default_factory=dict)

    def read(self, now: float, window_start: float, deadline: float) -> None:
        """Take the window's start or end reading once ``now`` has reached it."""
        if self.at_start is None and now >= window_start:
            self.at_start = time.process_time()
            self.servers_at_start = cpu_of(self.pids)
        if self.at_end is None and now >= deadline:
            self.at_end = time.process_time()
            self.servers_at_end = cpu_of(self.pids)

    def seconds(self) -> float:
        """This process's CPU time over the window (so far, when it has not closed)."""
        end = self.at_end if self.at_end is not None else time.process_time()
        return end - (self.at_start if self.at_start is not None else end)

    def servers(self) -> dict[str, float | None]:
        """Each watched process's CPU time over the window (``None``: unreadable)."""
        out: dict[str, float | None] = {}
        for pid in self.pids:
            before, after = self.servers_at_start.get(pid), self.servers_at_end.get(pid)
            out[str(pid)] = (
                round(after - before, 3) if before is not None and after is not None else None
            )
        return out
