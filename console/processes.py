"""A small process supervisor for ``manage.py up``: start children, watch
them, and stop them all together.

Each child runs in its own process group, so a Ctrl-C in the terminal reaches
only the supervisor, which then stops the children in order (SIGTERM, then
SIGKILL to the whole process group after a grace period, so no pool
process is left behind). On Linux a child also gets SIGTERM if the supervisor itself dies."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes  # Linux only, in the child just before exec

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ChildDied(RuntimeError):
    def __init__(self, child: Child):
        self.child = child
        code = child.proc.returncode if child.proc else None
        super().__init__(f"{child.name} exited unexpectedly (exit code {code})")


@dataclass
class Supervisor:
    env: dict[str, str]
    cwd: str
    log: Callable[[str], None] = print
    grace_seconds: float = 10.0
    children: list[Child] = field(default_factory=list)
    stop_requested: int | None = None  # the signal that asked us to stop

    def start(self, name: str, argv: Sequence[str], env_extra: dict | None = None) -> Child:
        """Start a child; ``env_extra`` adds variables to its environment (secrets
        go there rather than on the logged, ``ps``-visible command line)."""
        child = Child(name, list(argv))
        child.proc = subprocess.Popen(  # noqa: S603 - argv is built by us, never a shell
            child.argv,
            env={**self.env, **env_extra} if env_extra else self.env,
            cwd=self.cwd,
            process_group=0,
            preexec_fn=_die_with_parent,  # the supervisor runs no threads
        )
        self.children.append(child)
        self.log(f"Started {name} (pid {child.pid}): {' '.join(child.argv[1:])}")
        return child

    def install_signal_handlers(self) -> None:
        def handler(signum, _frame):
            self.stop_requested = signum

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def check(self) -> None:
        """Raise ``ChildDied`` if any child has exited."""
        for child in self.children:
            if not child.running():
                raise ChildDied(child)

    def alive(self) -> bool:
        """``False`` once a stop was asked; raises ``ChildDied`` if a child exited."""
        self.check()
        return self.stop_requested is None

    def watch(self, interval: float = 0.2) -> None:
        """Block until a stop signal arrives (returns) or a child dies (raises)."""
        while self.stop_requested is None:
            self.check()
            time.sleep(interval)

    def _signal_group(self, child: Child, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)

    def stop(self) -> None:
        """SIGTERM every child (only the leader: a Celery worker stops its own
        pool), wait up to the grace period, then SIGKILL whatever is left of
        each process group. Safe to call more than once."""
        started = [c for c in self.children if c.proc is not None]
        for child in started:
            if child.running():
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        for child in started:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                child.proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self.log(f"{child.name} did not stop in {self.grace_seconds:.0f} s; killing it")
                self._signal_group(child, signal.SIGKILL)
                child.proc.wait()
            # Reap strays left in the group (e.g. pool processes of a killed worker).
            self._signal_group(child, signal.SIGKILL)
