"""A small process supervisor for ``manage.py up``: start children, restart
the ones that exit, and stop them all together.

A child that exits (whatever it is) is restarted after a backoff that doubles
with each exit (``backoff_initial`` up to ``backoff_max``) and starts over once
the child has run for ``stable_seconds``; the others keep running meanwhile.
Only a stop signal, or a crash loop (``crash_limit`` exits of one child within
``crash_window`` seconds, reported with its last lines of output), stops them
all.

Each child runs in its own process group, so a Ctrl-C in the terminal reaches
only the supervisor, which then stops the children in order (SIGTERM, then
SIGKILL to the whole process group after a grace period, so no pool
process is left behind). On Linux a child also gets SIGTERM if the supervisor
itself dies (the parent-death signal follows the thread that started the
child: children are started and restarted only on the thread that calls
``start``, ``alive`` and ``watch``).

A child's stdout and stderr are read on threads, which pass each line on
unchanged to the supervisor's own stdout and stderr and keep the last
``tail_lines`` of them for a crash-loop report."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO


def _load_prctl():
    """libc's ``prctl``, looked up here in the parent: the child only calls it
    (no import, no ``dlopen`` between fork and exec, where the reader threads'
    locks could be held)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # Linux only

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except Exception:  # no parent-death signal then, as on other systems
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1
_SIGTERM = int(signal.SIGTERM)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    if _PRCTL is not None:
        with contextlib.suppress(Exception):
            _PRCTL(_PR_SET_PDEATHSIG, _SIGTERM)


def describe_exit(returncode: int | None) -> str:
    """``exit code 3`` or ``signal SIGKILL`` (Popen's negative return codes)."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


@dataclass
class Child:
    name: str
    argv: list[str]
    env_extra: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = 0.0  # the next restart's delay (0: the initial one)
    restart_at: float | None = None  # when an exited child is due to start again
    last_exit: str = ""
    exits: deque = field(default_factory=deque)  # monotonic times of recent exits
    tail: deque = field(default_factory=lambda: deque(maxlen=20))  # last output lines
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def spawned(self) -> subprocess.Popen:
        """Its process, once it was started (a supervisor's code past ``_spawn``)."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.proc


class ChildDied(RuntimeError):
    def __init__(self, child: Child):
        self.child = child
        code = child.proc.returncode if child.proc else None
        super().__init__(f"{child.name} exited unexpectedly (exit code {code})")


class CrashLoop(ChildDied):
    """One child exited ``count`` times within ``window`` seconds: everything stops."""

    def __init__(self, child: Child, count: int, window: float):
        self.child = child
        self.tail = list(child.tail)
        RuntimeError.__init__(
            self,
            f"{child.name} is crash-looping: it exited {count} times within {window:g} s "
            f"(last: {child.last_exit})",
        )

    def report(self) -> str:
        """The message and the child's last lines of output, one per line."""
        lines = [f"{self}; stopping everything."]
        if self.tail:
            lines.append(f"Last {len(self.tail)} lines of {self.child.name}'s output:")
            lines += [f"  {self.child.name} | {line}" for line in self.tail]
        else:
            lines.append(f"{self.child.name} wrote no output.")
        return "\n".join(lines)


@dataclass
class Supervisor:
    env: dict[str, str]
    cwd: str
    log: Callable[[str], None] = print
    grace_seconds: float = 10.0
    children: list[Child] = field(default_factory=list)
    stop_requested: int | None = None  # the signal that asked us to stop
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    stable_seconds: float = 60.0  # a run this long resets the backoff
    crash_limit: int = 5  # this many exits of one child ...
    crash_window: float = 60.0  # ... within this many seconds stop everything
    tail_lines: int = 20
    out: IO[bytes] | None = None  # where children's stdout goes (default: ours)
    err: IO[bytes] | None = None  # and their stderr
    _echo_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, name: str, argv: Sequence[str], env_extra: dict | None = None) -> Child:
        """Start a child; ``env_extra`` adds variables to its environment (secrets
        go there rather than on the logged, ``ps``-visible command line)."""
        child = Child(name, list(argv), env_extra=env_extra)
        child.tail = deque(maxlen=self.tail_lines)
        self._spawn(child)
        self.children.append(child)
        self.log(f"Started {name} (pid {child.pid}): {' '.join(child.argv[1:])}")
        return child

    def _spawn(self, child: Child) -> None:
        # Children write to pipes now, not to a terminal: unbuffered, so their
        # lines come through as they are written.
        env = {"PYTHONUNBUFFERED": "1", **self.env, **(child.env_extra or {})}
        child.proc = subprocess.Popen(  # noqa: S603 - argv is built by us, never a shell
            child.argv,
            env=env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
            preexec_fn=_die_with_parent,  # touches no lock the reader threads may hold
        )
        child.started_at = time.monotonic()
        child.readers = [
            threading.Thread(
                target=self._pump,
                args=(child, pipe, which),
                name=f"{child.name}-{which}",
                daemon=True,
            )
            for pipe, which in ((child.proc.stdout, "out"), (child.proc.stderr, "err"))
        ]
        for reader in child.readers:
            reader.start()

    def _pump(self, child: Child, pipe: IO[bytes], which: str) -> None:
        """Pass a child's lines on, unchanged, and keep the last ones."""
        try:
            for raw in iter(pipe.readline, b""):
                child.tail.append(raw.decode(errors="replace").rstrip("\r\n"))
                self._echo(raw, which)
        except (OSError, ValueError):  # pragma: no cover - the pipe went away
            pass
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    def _echo(self, raw: bytes, which: str) -> None:
        target = self.out if which == "out" else self.err
        with self._echo_lock:
            try:
                if target is None:
                    stream = sys.stdout if which == "out" else sys.stderr
                    buffer = getattr(stream, "buffer", None)
                    if buffer is None:  # e.g. a StringIO
                        stream.write(raw.decode(errors="replace"))
                        stream.flush()
                        return
                    stream.flush()  # what was written as text goes first
                    target = buffer
                target.write(raw)
                target.flush()
            except (OSError, ValueError):  # our own output is closed: keep reading
                pass

    def install_signal_handlers(self) -> None:
        def handler(signum, _frame):
            self.stop_requested = signum

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def poll(self) -> None:
        """Notice children that exited (log it, schedule their restart) and
        restart those whose backoff has passed. Raises ``CrashLoop`` when a
        child exited ``crash_limit`` times within ``crash_window`` seconds.
        Does nothing once a stop was asked."""
        for child in self.children:
            if self.stop_requested is not None:
                return
            now = time.monotonic()
            if (
                child.restart_at is None
                and child.proc is not None
                and child.proc.poll() is not None
            ):
                self._exited(child, now)
            if child.restart_at is not None and now >= child.restart_at:
                self._restart(child)

    def _exited(self, child: Child, now: float) -> None:
        ran = now - child.started_at
        self._signal_group(child, signal.SIGKILL)  # strays, e.g. a killed worker's pool
        child.last_exit = describe_exit(child.spawned.returncode)
        child.exits.append(now)
        while child.exits and now - child.exits[0] > self.crash_window:
            child.exits.popleft()
        if ran >= self.stable_seconds:
            child.backoff = 0.0
        if len(child.exits) >= self.crash_limit:
            for reader in child.readers:  # its last lines, read to the end
                reader.join(timeout=1.0)
            raise CrashLoop(child, len(child.exits), self.crash_window)
        delay = child.backoff or self.backoff_initial
        child.backoff = min(delay * 2, self.backoff_max)
        child.restart_at = now + delay
        self.log(
            f"{child.name} (pid {child.pid}) exited ({child.last_exit}) after {ran:.1f} s; "
            f"restarting it in {delay:g} s. The others keep running."
        )

    def _restart(self, child: Child) -> None:
        child.restart_at = None
        child.restarts += 1
        self._spawn(child)
        self.log(
            f"Restarted {child.name} (pid {child.pid}) after it exited ({child.last_exit}); "
            f"restart {child.restarts}."
        )

    def check(self) -> None:
        """Restart what exited; raise ``CrashLoop`` on a crash loop."""
        self.poll()

    def alive(self) -> bool:
        """``False`` once a stop was asked; restarts children that exited on the
        way (raises ``CrashLoop`` on a crash loop)."""
        self.poll()
        return self.stop_requested is None

    def watch(self, interval: float = 0.2) -> None:
        """Block, restarting children that exit, until a stop signal arrives
        (returns) or a child crash-loops (raises ``CrashLoop``)."""
        while self.stop_requested is None:
            self.poll()
            time.sleep(interval)

    def _signal_group(self, child: Child, sig: int) -> None:
        if child.pid is None:  # never started: no process group
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)

    def stop(self) -> None:
        """SIGTERM every child (only the leader: a Celery worker stops its own
        pool), wait up to the grace period, then SIGKILL whatever is left of
        each process group. Safe to call more than once."""
        started = [c for c in self.children if c.proc is not None]
        for child in started:
            if child.running():
                child.spawned.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        for child in started:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                child.spawned.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self.log(f"{child.name} did not stop in {self.grace_seconds:.0f} s; killing it")
                self._signal_group(child, signal.SIGKILL)
                child.spawned.wait()
            # Reap strays left in the group (e.g. pool processes of a killed worker).
            self._signal_group(child, signal.SIGKILL)
        # Their last lines, before whatever the caller says next.
        reader_deadline = time.monotonic() + 2.0
        for child in started:
            for reader in child.readers:
                reader.join(timeout=max(0.0, reader_deadline - time.monotonic()))
