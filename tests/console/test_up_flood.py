"""The embedded default survives a flood: ``manage.py up`` (SQLite, the filesystem
broker) under 60 s of random keys, 3.5 MB bodies and slow clients (half a request
head, held), its worker SIGKILLed once
in the middle, still serves afterwards with every process up, and loses or
doubles nothing: every call of the demo key that got an answer with a record is
in the call log once, and the calls' costs equal the invoice preview."""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import signal
import socket
import string
import subprocess
import sys
import threading
import time

import pytest

from tests.console.up_process import ROOT, start, up_env_for

pytestmark = pytest.mark.engine_independent

FLOOD_SECONDS = float(os.environ.get("CONSOLE_FLOOD_SECONDS", "60"))
BIG_BODY_BYTES = 3_500_000
ALPHABET = string.ascii_letters + string.digits


def random_key() -> str:
    """A well-formed key nobody issued: the new checksummed shape or the old one."""
    ident = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(10))
    tail = "".join(secrets.choice(ALPHABET) for _ in range(42))
    return f"sk-{ident}_{tail}" + secrets.choice(["V", "A"])


class Flood:
    """Threads that hit the gateway until ``stop`` is set; the demo key's calls
    are kept with the request id and status each got."""

    def __init__(self, port: int, key: str):
        self.port = port
        self.key = key
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.demo_calls: list[tuple[str, int]] = []  # (request id, status)
        self.counts = {"random": 0, "big": 0, "demo": 0, "slow": 0, "transport_errors": 0}

    def _post(self, conn, path: str, body: bytes, key: str):
        conn.request(
            "POST",
            path,
            body=body,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        response.read()
        return response

    def _loop(self, kind: str, make) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self.stop.is_set():
            key, body, pause = make()
            try:
                response = self._post(conn, "/v1/chat/completions", body, key)
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                with self.lock:
                    self.counts["transport_errors"] += 1
                time.sleep(0.05)
                continue
            with self.lock:
                self.counts[kind] += 1
                if key == self.key:
                    self.demo_calls.append((response.getheader("x-request-id", ""), response.status))
            if response.getheader("connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            time.sleep(pause)
        conn.close()

    def _slow(self) -> None:
        """Half a request head, held until the server gives up on it."""
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
                    s.recv(1024)  # the header timeout's 408, or the close
            except OSError:
                pass
            with self.lock:
                self.counts["slow"] += 1

    def start(self) -> list[threading.Thread]:
        hello = json.dumps(
            {"model": "sim-chat-small", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
        ).encode()
        big = json.dumps(
            {
                "model": "sim-chat-small",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "x " * (BIG_BODY_BYTES // 2)}],
            }
        ).encode()
        makers = [("random", lambda: (random_key(), hello, 0.0))] * 4
        makers += [("big", lambda: (self.key, big, 0.0))] * 2
        makers += [("demo", lambda: (self.key, hello, 0.05))]
        threads = [threading.Thread(target=self._loop, args=m, daemon=True) for m in makers]
        threads += [threading.Thread(target=self._slow, daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        return threads


def child_pid(up, name: str) -> int:
    """The pid ``up`` last reported for its child ``name``."""
    pids = [int(m.group(1)) for line in up.seen if (m := re.match(rf"(?:Started|Restarted) {name} \(pid (\d+)\)", line))]
    assert pids, up.output()
    return pids[-1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def in_up(var, code: str) -> str:
    """``code`` run by ``manage.py shell`` on up's own database (its var dir)."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=up_env_for(var),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_up_survives_a_flood_and_a_worker_kill_and_loses_nothing(tmp_path):
    var = tmp_path / "var"
    up, info = start(up_env_for(var))
    try:
        # Given a flood of random keys, 3.5 MB bodies and the demo key's own calls
        flood = Flood(up.port, info["key"])
        threads = flood.start()
        time.sleep(FLOOD_SECONDS / 3)
        # When the worker is SIGKILLed in the middle of it
        worker = child_pid(up, "worker")
        os.kill(worker, signal.SIGKILL)
        time.sleep(FLOOD_SECONDS * 2 / 3)
        flood.stop.set()
        for thread in threads:
            thread.join(60)
        # Then up restarted the worker and every child is serving
        deadline = time.monotonic() + 60
        while child_pid(up, "worker") == worker and time.monotonic() < deadline:
            up.output()  # reads what up has said since
            time.sleep(0.5)
        assert child_pid(up, "worker") != worker, up.output()
        assert up.proc.poll() is None, up.output()
        for name in ("web", "worker", "beat", "node", "vendor-sim"):
            assert alive(child_pid(up, name)), f"{name} is down\n{up.output()}"
        conn = http.client.HTTPConnection("127.0.0.1", up.port, timeout=30)
        answer = flood._post(
            conn,
            "/v1/chat/completions",
            json.dumps({"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hi"}]}).encode(),
            info["key"],
        )
        assert answer.status == 200
        assert flood.counts["random"] > 100 and flood.counts["big"] > 4, flood.counts
        print("flood:", flood.counts, "demo calls:", len(flood.demo_calls))
        # And every call of the demo key that has a record is in the call log once
        recorded = {rid for rid, status in flood.demo_calls if rid and status != 401}
        assert recorded, flood.counts
        ids = json.dumps(sorted(recorded))
        code = (
            "import json, time\n"
            "from usage.models import CallRecord\n"
            f"ids = set(json.loads({ids!r}))\n"
            "deadline = time.monotonic() + 90\n"
            "while time.monotonic() < deadline:\n"
            "    found = CallRecord.objects.filter(request_id__in=ids).count()\n"
            "    if found == len(ids): break\n"
            "    time.sleep(1)\n"
            "rows = list(CallRecord.objects.filter(request_id__in=ids).values_list('request_id', flat=True))\n"
            "print(json.dumps({'found': len(rows), 'distinct': len(set(rows))}))"
        )
        seen = json.loads(in_up(var, code))
        assert seen == {"found": len(recorded), "distinct": len(recorded)}, (seen, len(recorded))
        # And the organization's calls cost what its invoice preview bills
        money = json.loads(
            in_up(
                var,
                "import json\n"
                "from django.db.models import Sum\n"
                "from accounts.models import ApiKey\n"
                "from invoicing.services.invoices import invoice_preview\n"
                "from usage.models import CallRecord\n"
                f"key = ApiKey.objects.get(public_id={info['key'].split('_')[0][3:]!r})\n"
                "org = key.organization_id\n"
                "calls = CallRecord.objects.filter(organization_id=org, is_test=False)\n"
                "cost = calls.aggregate(s=Sum('cost'))['s'] or 0\n"
                "preview = invoice_preview(organization_id=org)\n"
                "print(json.dumps({'calls': cost, 'invoice_usage': preview.usage_amount}))",
            )
        )
        assert money["calls"] == money["invoice_usage"], money
    finally:
        up.kill()
