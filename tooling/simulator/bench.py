"""Throughput benchmark: a node process driven by a lean keep-alive client.

The node runs as its own process (instant profile, free loopback port); this
process drives it with ``concurrency`` connections, each sending one small
chat request after another, parsing responses with httptools so the client
costs far less than the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httptools

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _request_bytes(host: str, port: int, *, stream: bool) -> bytes:
    body = {
        "model": "sim-chat-small",
        "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
        "max_tokens": 16,
    }
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    raw = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


class _Client(asyncio.Protocol):
    def __init__(self, payload: bytes, deadline: float, latencies: list, errors: list):
        self.payload = payload
        self.deadline = deadline
        self.latencies = latencies
        self.errors = errors
        self.parser = httptools.HttpResponseParser(self)
        self.done = asyncio.get_running_loop().create_future()
        self.sent_at = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._send()

    def _send(self) -> None:
        self.sent_at = time.perf_counter()
        assert self.transport is not None  # sent from connection_made on
        self.transport.write(self.payload)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        now = time.perf_counter()
        if self.parser.get_status_code() == 200:
            self.latencies.append(now - self.sent_at)
        else:
            self.errors.append(self.parser.get_status_code())
        if now < self.deadline:
            self._send()
        elif self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def drive(host: str, port: int, *, seconds: float, concurrency: int, stream: bool) -> dict:
    loop = asyncio.get_running_loop()
    payload = _request_bytes(host, port, stream=stream)
    latencies: list[float] = []
    errors: list[int] = []
    started = time.perf_counter()
    deadline = started + seconds
    clients = []
    for _ in range(concurrency):
        _, client = await loop.create_connection(
            lambda: _Client(payload, deadline, latencies, errors), host, port
        )
        clients.append(client)
    await asyncio.gather(*(c.done for c in clients))
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(q: float) -> float:
        if not latencies:
            return 0.0
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3)

    return {
        "requests": len(latencies),
        "seconds": round(elapsed, 3),
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "errors": len(errors),
    }


def start_node(extra: list[str] | None = None) -> tuple[subprocess.Popen, str, int]:
    """Start ``python -m tooling.simulator`` on a free port; returns (process, host, port)."""
    command = [sys.executable, "-m", "tooling.simulator", "--port", "0", *(extra or [])]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        command, stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, env=env
    )
    assert process.stdout is not None  # stdout=PIPE
    line = process.stdout.readline()
    if not line.startswith("Node listening on http://"):
        process.kill()
        raise RuntimeError(f"the node did not start: {line!r}")
    host, _, port = line.strip().rpartition("//")[2].rpartition(":")
    return process, host, int(port)


def run_bench(*, seconds: float = 5.0, concurrency: int = 32, stream_seconds: float = 1.0) -> dict:
    process, host, port = start_node(["--profile", "instant"])
    try:
        runner: Callable[..., Any]
        try:
            import uvloop  # optional dependency: the faster event loop when installed

            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        result = runner(drive(host, port, seconds=seconds, concurrency=concurrency, stream=False))
        result.update(concurrency=concurrency, profile="instant")
        if stream_seconds > 0:
            streamed = runner(
                drive(host, port, seconds=stream_seconds, concurrency=concurrency, stream=True)
            )
            result["stream"] = {
                k: streamed[k] for k in ("requests", "requests_per_second", "p50_ms", "p99_ms")
            }
            result["stream"]["errors"] = streamed["errors"]
        return result
    finally:
        process.terminate()
        process.wait(timeout=10)
