"""A real ``manage.py up`` heals: its worker killed (SIGKILL, as a crash would),
the gateway keeps answering, up restarts the worker, and every call made
meanwhile reaches the call log once it is back."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.console.up_process import start, up_env_for

# It starts its own up (SQLite, the filesystem broker): CI's embedded pass leaves it out.
pytestmark = pytest.mark.engine_independent


def call(port: int, key: str) -> str:
    """One chat call with the demo key through up's gateway; its request id."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps(
            {
                "model": "sim-chat-small",
                "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 2,
            }
        )
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        payload = resp.read()
        assert resp.status == 200, (resp.status, payload[:500])
        request_id = resp.getheader("x-request-id")
        assert request_id, dict(resp.getheaders())
        return request_id
    finally:
        conn.close()


def logged(var: Path, request_ids: list[str]) -> set[str]:
    """Which of ``request_ids`` are in up's call log."""
    db = var / "console.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        marks = ",".join("?" * len(request_ids))
        rows = conn.execute(
            f"SELECT request_id FROM usage_call WHERE request_id IN ({marks})",  # noqa: S608
            request_ids,
        ).fetchall()
    return {row[0] for row in rows}


def wait_logged(var: Path, request_ids: list[str], up, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while (missing := set(request_ids) - logged(var, request_ids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not missing, f"not in the call log: {sorted(missing)}\n--- up said ---\n{up.output()}"


def test_up_restarts_a_killed_worker_and_no_call_is_lost(tmp_path):
    var = tmp_path / "var"
    up, info = start(up_env_for(var))
    try:
        worker_pid = int(up.wait_for(r"^Started worker \(pid (\d+)\)").group(1))
        first = call(up.port, info["key"])
        # Recorded before the kill: nothing of it is in the killed worker's hands.
        wait_logged(var, [first], up)

        os.kill(worker_pid, signal.SIGKILL)  # only the worker, which up started
        while_down = [call(up.port, info["key"])]
        # Answered while the worker was down: up restarts it 1 s after noticing.
        assert "Restarted worker" not in up.output(), up.output()
        while_down += [call(up.port, info["key"]) for _ in range(2)]

        up.wait_for(
            rf"^worker \(pid {worker_pid}\) exited \(signal SIGKILL\) after [0-9.]+ s; "
            r"restarting it in 1 s\."
        )
        restarted = int(up.wait_for(r"^Restarted worker \(pid (\d+)\) after it exited").group(1))
        assert restarted != worker_pid
        after = call(up.port, info["key"])

        wait_logged(var, [first, *while_down, after], up)
        os.kill(restarted, 0)  # the new worker runs
        assert not any("stopping" in line for line in up.seen), up.output()
    except BaseException:
        up.kill()
        raise
    assert up.stop() == 0, up.output()
    assert up.output().splitlines()[-1] == "Stopped."
