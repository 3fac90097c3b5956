"""Helpers to run simulator nodes in tests: a real process, or one in a thread.

Test modules build their fixtures from these context managers, e.g.
``with inprocess_node("--token", TOKEN) as node: ...``; flags are the same as
``run_node``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tooling.simulator.app import NodeApp, serve
from tooling.simulator.config import NodeConfig, add_node_arguments, config_from_options

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "node-test-token"


def node_config(*flags: str) -> NodeConfig:
    """A NodeConfig from run_node flags (port 0, a free one, unless given)."""
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    return config_from_options(vars(parser.parse_args(["--port", "0", *flags])))


@dataclass
class RunningNode:
    host: str
    port: int
    token: str = ""
    app: NodeApp | None = None  # only for in-process nodes
    process: subprocess.Popen | None = None
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def connection(self, timeout: float = 5.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        token: str | None = None,
        raw: bytes | None = None,
        timeout: float = 5.0,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict, object]:
        """One request; returns (status, lower-cased headers, JSON body or text).
        ``headers`` are added (a vendor's key header, ``anthropic-version``)."""
        extra = headers or {}
        headers = {"content-type": "application/json"}
        token = self.token if token is None else token
        if token:
            headers["authorization"] = f"Bearer {token}"
        headers.update(extra)
        payload = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn = self.connection(timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read()
            response_headers = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        text = data.decode()
        if response_headers.get("content-type", "").startswith("application/json"):
            return response.status, response_headers, json.loads(text)
        return response.status, response_headers, text

    def post(self, path: str, body: object = None, **kwargs) -> tuple[int, dict, object]:
        return self.request("POST", path, body, **kwargs)

    def chat(self, content: str, **fields) -> dict:
        body = {"model": "sim-chat-small", "messages": [{"role": "user", "content": content}]}
        body.update(fields)
        status, _, data = self.post("/v1/chat/completions", body)
        assert status == 200, data
        return data

    def open_stream(self, path: str, body: dict, timeout: float = 5.0):
        """Start a streamed request; returns (connection, response) to read from."""
        conn = self.connection(timeout)
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        conn.request("POST", path, body=json.dumps({**body, "stream": True}), headers=headers)
        return conn, conn.getresponse()

    def stream(self, path: str, body: dict) -> tuple[list[dict], bool]:
        """A whole streamed response: (parsed data events, whether [DONE] came)."""
        conn, response = self.open_stream(path, body)
        try:
            assert response.status == 200, response.read()
            return parse_sse(response.read().decode())
        finally:
            conn.close()

    def raw(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict, bytes]:
        """One request with exactly these headers and body bytes; returns (status,
        lower-cased headers, body bytes) — streamed bodies read to the end."""
        conn = self.connection()
        try:
            conn.request(method, path, body=body or None, headers=headers or {})
            response = conn.getresponse()
            data = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            conn.close()

    def metrics(self) -> str:
        status, _, text = self.request("GET", "/metrics")
        assert status == 200
        return text


def parse_sse(text: str) -> tuple[list[dict], bool]:
    events, done = [], False
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        if payload == "[DONE]":
            done = True
        else:
            events.append(json.loads(payload))
    return events, done


def parse_named_sse(text: str) -> list[tuple[str, dict]]:
    """Server-sent events with ``event:`` lines (Anthropic's): [(event name, data)]."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        events.append((lines[0][len("event: ") :], json.loads(lines[1][len("data: ") :])))
    return events


def metric_value(text: str, name: str, model: str = "sim-chat-small", **labels: str) -> float:
    """The value of one series in Prometheus text, matched by name and labels."""
    wanted = {"model_name": model, **labels}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        label_text, _, value = line[len(name) + 1 :].rpartition("} ")
        found = dict(part.split("=", 1) for part in label_text.split(",") if part)
        found = {k: v.strip('"') for k, v in found.items()}
        if all(found.get(k) == v for k, v in wanted.items()):
            return float(value)
    raise AssertionError(f"no series {name} {wanted}")


@contextlib.contextmanager
def inprocess_node(*flags: str) -> Iterator[RunningNode]:
    """A node served by an event loop in a background thread of this process."""
    config = node_config(*flags)
    ready = threading.Event()
    holder: dict = {}
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def on_ready(app, host, port) -> None:
        holder.update(app=app, host=host, port=port)
        ready.set()

    def target() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve(config, stop, on_ready))
        except BaseException as error:  # surfaced to the test below
            holder["error"] = error
            ready.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert ready.wait(10), "the in-process node did not start"
    if "error" in holder:
        raise holder["error"]
    try:
        yield RunningNode(
            holder["host"], holder["port"], token=config.token, app=holder["app"], loop=loop
        )
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def _start_process(command: list[str], token: str) -> RunningNode:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = process.stdout.readline()
    if not line.startswith("Node listening on http://"):
        process.kill()
        _, err = process.communicate(timeout=10)
        raise AssertionError(f"node did not start: {line!r} {err[-2000:]}")
    host, _, port = line.strip().rpartition("//")[2].rpartition(":")
    return RunningNode(host, int(port), token=token, process=process)


@contextlib.contextmanager
def node_process(*flags: str, via: str = "manage") -> Iterator[RunningNode]:
    """A node in its own process, via ``manage.py run_node`` or ``-m tooling.simulator``."""
    if via == "manage":
        command = [sys.executable, "manage.py", "run_node"]
    else:
        command = [sys.executable, "-m", "tooling.simulator"]
    flags = ("--port", "0", *flags)
    token = flags[flags.index("--token") + 1] if "--token" in flags else ""
    node = _start_process([*command, *flags], token)
    try:
        yield node
    finally:
        stop_process(node.process)


def stop_process(process: subprocess.Popen) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe:
            pipe.close()
    return process.returncode
