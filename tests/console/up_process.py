"""A real ``manage.py up`` for tests: a subprocess with its own var dir, its
output read on a thread, started and stopped the way a user would."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
LINE_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def up_env_for(var_dir: Path) -> dict:
    """This process's environment for a ``manage.py up`` of its own: embedded
    services (SQLite, filesystem broker) and generated secrets under ``var_dir``."""
    env = os.environ.copy()
    for name in (
        "DATABASE_URL",
        "REDIS_URL",
        "CELERY_BROKER_URL",
        "DJANGO_SECRET_KEY",
        "API_KEY_PEPPER",
        "CONSOLE_PRODUCTION",
    ):
        env.pop(name, None)
    env["CONSOLE_VAR_DIR"] = str(var_dir)
    # The suite's collected static files (tests/conftest.py): up finds them current.
    env["CONSOLE_STATIC_ROOT"] = str(settings.STATIC_ROOT)
    env["DJANGO_SETTINGS_MODULE"] = "console.settings"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Up:
    """A running ``manage.py up`` whose merged output is read on a thread."""

    def __init__(self, env: dict, *args: str):
        self.port = free_port()
        self.node_port = free_port()
        self.vendor_port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "up",
                "--port",
                str(self.port),
                "--node-port",
                str(self.node_port),
                "--vendor-port",
                str(self.vendor_port),
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + LINE_TIMEOUT
        for line in self.seen:
            if m := re.search(pattern, line):
                return m
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if m := re.search(pattern, line):
                return m
        output = "\n".join(self.seen)
        pytest.fail(f"no line matching {pattern!r}; output so far:\n{output}")

    def output(self, last: int = 150) -> str:
        """What up has said so far (its children's lines included), the last lines."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
        return "\n".join(self.seen[-last:])

    def child_pids(self) -> list[int]:
        return [int(m.group(1)) for line in self.seen if (m := re.search(r"pid (\d+)", line))]

    def stop(self) -> int:
        children = self.child_pids()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail("manage.py up did not exit within 15 s of SIGTERM")
        for pid in children:  # each child leads its own process group
            with pytest.raises(ProcessLookupError):
                os.killpg(pid, 0)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            for pid in self.child_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()


def start(env: dict, *args: str) -> tuple[Up, dict]:
    up = Up(env, *args)
    try:
        console = up.wait_for(r"^Console: (http://127\.0\.0\.1:(\d+)/)$")
        login = up.wait_for(r"^Login: (\S+) / ([0-9a-f]{16})$")
        key = up.wait_for(r"^Demo API key: (.+)$")
        node = up.wait_for(r"^Simulator node: (http://127\.0\.0\.1:(\d+))/v1$")
        vendor = up.wait_for(r"^Vendor simulator: http://127\.0\.0\.1:(\d+) ")
        up.wait_for(r"^Ready\.$")
    except BaseException:
        up.kill()
        raise
    assert int(console.group(2)) == up.port
    assert int(node.group(2)) == up.node_port
    assert int(vendor.group(1)) == up.vendor_port
    return up, {
        "node": node.group(1),
        "url": console.group(1),
        "email": login.group(1),
        "password": login.group(2),
        "key": key.group(1),
    }
