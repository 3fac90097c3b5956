"""The processes ``bench_gateway`` starts (simulator nodes, the floor, the
gateway's and the floor's uvicorn command line) and how it drives them: plain
HTTP on loopback, the closed-loop load generator in its own process, a
Prometheus counter summed from a ``/metrics`` text."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from tooling.bench.floor import UPSTREAM_ENV

NODE_TOKEN = "bench-node-token"  # noqa: S105 - loopback simulator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(*flags: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "tooling.simulator", "--host", "127.0.0.1", "--port", "0",
         "--token", NODE_TOKEN, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None  # stdout=PIPE
    line = proc.stdout.readline()
    match = re.search(r"http://[\d.]+:\d+", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"the simulator node did not start: {line!r}")
    return proc, match.group(0)


def http_get(url: str, headers: dict | None = None, timeout: float = 5.0) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - loopback only
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        return resp.read()


def http_post(url: str, body: dict, headers: dict | None = None, timeout: float = 10.0) -> bytes:
    data = json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 - loopback only
        url, data=data, headers={"content-type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        return resp.read()


def uvicorn_argv(app: str, port: int, *extra: str, http: str = "httptools") -> list[str]:
    """The uvicorn command line the gateway and the floor share: httptools (the
    gateway: production's guarded protocol on it), uvloop when importable, uvicorn's
    own access log off, no proxy headers."""
    cmd = [
        sys.executable, "-m", "uvicorn", app, *extra, "--host", "127.0.0.1",
        "--port", str(port), "--lifespan", "on", "--no-access-log", "--log-level", "warning",
        "--http", http, "--no-proxy-headers",
    ]  # fmt: skip
    try:
        import uvloop  # noqa: F401 - optional dependency: used when installed

        cmd += ["--loop", "uvloop"]
    except ImportError:
        pass
    return cmd


def wait_up(proc: subprocess.Popen, url: str, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            http_get(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the {what} exited at start") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the {what} did not start")


def start_floor(node_url: str, port: int) -> tuple[subprocess.Popen, str]:
    """The bare pass-through (tooling.bench.floor) to ``node_url``, on 127.0.0.1:``port``."""
    env = {**os.environ, UPSTREAM_ENV: node_url}
    cmd = uvicorn_argv("tooling.bench.floor:create_app", port, "--factory")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)  # noqa: S603
    url = f"http://127.0.0.1:{port}"
    wait_up(proc, f"{url}/health", "floor proxy")
    return proc, url


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (uvicorn's workers under their supervisor), from /proc."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as f:
                todo.extend(int(child) for child in f.read().split())
        except OSError:
            continue
    return found


def run_load(url: str, *, bodies: list[dict], headers: dict, concurrency: int, seconds: float,
          stream: bool, warmup: float, cpu_pid: int | None = None) -> dict:  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for body in bodies:
            f.write(json.dumps(body) + "\n")
        path = f.name
    cmd = [
        sys.executable, "-m", "console.features.capacity.loadgen",
        "--url", url, "--bodies-file", path,
        "--concurrency", str(concurrency), "--seconds", str(seconds), "--warmup", str(warmup),
    ]  # fmt: skip
    for name, value in headers.items():
        cmd += ["--header", f"{name}: {value}"]
    if stream:
        cmd.append("--stream")
    if cpu_pid is not None:
        for pid in process_tree(cpu_pid):  # every process of the server, workers included
            cmd += ["--cpu-pid", str(pid)]
    try:
        out = subprocess.run(  # noqa: S603 - our own interpreter and module
            cmd, capture_output=True, text=True, check=True, timeout=seconds * 4 + 60
        )
    finally:
        os.unlink(path)
    return json.loads(out.stdout)


def metric_total(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total
