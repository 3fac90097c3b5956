"""The soak's child processes: one started program (``Proc``: its command line,
environment, log and port; started in its own process group, stopped or killed
with it) and the loopback port helpers. Apart from the cluster so that the
Sentinel set, which the cluster holds, can start its Redis servers with it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from console.processes import _die_with_parent

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int | None = None
    proc: subprocess.Popen | None = None
    starts: int = 0

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        # PR_SET_PDEATHSIG fires when the *thread* that started the child ends, so
        # only children started on the main thread get it; the ones a fault
        # restarts from a helper thread are stopped by Cluster.stop.
        main = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(  # noqa: S603 - argv built by us
            self.argv,
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=_die_with_parent if main else None,
        )
        log.close()
        self.starts += 1

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, no goodbye: what a crash or the OOM killer does."""
        self.signal_group(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, grace: float = 15.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:  # not running
            self.signal_group(signal.SIGKILL)
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            proc.wait(timeout=10)
        self.signal_group(signal.SIGKILL)  # strays in the group

    def wait_port(self, timeout: float = 60.0) -> None:
        if self.port is None:
            raise RuntimeError(f"{self.name} listens on no port")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"{self.name} exited (see {self.log_path})")
            if port_open(self.port):
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} did not listen on {self.port} in {timeout:.0f} s")
