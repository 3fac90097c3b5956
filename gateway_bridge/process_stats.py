"""This process's own figures for ``/metrics`` (resident memory, open files,
start time, CPU), from /proc and ``resource``; each reader yields
``(labels, value)`` as a metrics reader does."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator

# What a reader yields: (label values, value).
Samples = Iterator[tuple[tuple[str, ...], float]]


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return 100


def _process_start_time() -> float:
    """When this process started (POSIX seconds), from /proc; the import time
    where there is no /proc."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        # Field 22 of stat is the start time in clock ticks after boot; the
        # split above starts at field 3.
        return boot + int(fields[19]) / _clock_ticks()
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


_START_TIME = _process_start_time()
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        # ru_maxrss (KiB on Linux): the peak, the best there is without /proc.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def rss() -> Samples:
    yield (), _resident_bytes()


def fds() -> Samples:
    yield (), _open_fds()


def start() -> Samples:
    yield (), _START_TIME


def one() -> Samples:
    yield (), 1


def cpu() -> Samples:
    yield (), round(_cpu_seconds(), 6)
