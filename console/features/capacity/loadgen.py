"""Closed-loop HTTP load generator for the gateway benchmark.

``concurrency`` virtual clients, each on its own keep-alive connection, send
one request after another (bodies taken round-robin from a list) for
``seconds`` after ``warmup`` seconds, and one JSON object is printed:

    python -m console.features.capacity.loadgen --url http://127.0.0.1:8000/v1/chat/completions \\
        --body-file body.json --header 'Authorization: Bearer sk-...' \\
        --concurrency 50 --seconds 10 [--stream] [--warmup 2] [--bodies-file prompts.jsonl]

Requests are counted when their response ends inside the measured window;
latency percentiles are over 2xx answers (end of the response), ``ttft_*`` over
2xx streams (time to the first SSE data event that carries generated text:
OpenAI chat/completions, Anthropic and Gemini chunks are recognised).
``errors`` counts non-2xx answers and transport failures (``error_kinds``).
``output_tokens`` sums the ``completion_tokens`` / ``output_tokens`` usage
figure each 2xx answer reports (the last one in its body: a stream's final
usage chunk when the body asks for ``stream_options.include_usage``).
``stop`` (``drive``/``run_load`` only): a callable asked every quarter second;
when it answers true the run ends at once (open requests are aborted) and the
summary covers the time measured so far (``"stopped": true``).
``cpu_seconds`` is this process's CPU time over the window: the generator is
asyncio.Protocol + httptools (+ uvloop when importable), so it stays a small
share of a 2-core machine, but the benchmark should report it.
``--cpu-pid PID`` (repeatable) adds ``server_cpu_seconds``: each such
process's CPU time (user + system, all its threads, from ``/proc``) over the
same window, so a server's CPU per call is that divided by ``requests``.

``--stream`` reads answers as SSE and sets ``"stream": true`` in JSON object
bodies that do not say (except for Gemini URLs, where streaming is in the URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import ssl as ssl_module
import sys
import time
from collections import Counter
from collections.abc import Iterable
from urllib.parse import urlsplit

import httptools

DEFAULT_BODY = {
    "model": "sim-chat-small",
    "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
    "max_tokens": 16,
}
_perf = time.perf_counter
_USAGE_OUTPUT = re.compile(rb'"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)')


class _Run:
    """The shared state of one load run."""

    def __init__(self, payloads, host, port, ssl, server_hostname, stream, timeout):
        self.payloads: list[bytes] = payloads
        self.next_payload = 0
        self.host = host
        self.port = port
        self.ssl = ssl
        self.server_hostname = server_hostname
        self.stream = stream
        self.timeout = timeout
        self.window_start = 0.0
        self.deadline = 0.0
        self.latencies: list[float] = []
        self.ttfts: list[float] = []
        self.output_tokens = 0
        self.statuses: Counter[str] = Counter()
        self.error_kinds: Counter[str] = Counter()
        self.clients: set[_Client] = set()
        self.users_left = 0
        self.all_done: asyncio.Future | None = None

    def payload(self) -> bytes:
        payloads = self.payloads
        index = self.next_payload
        self.next_payload = index + 1 if index + 1 < len(payloads) else 0
        return payloads[index]

    def in_window(self, now: float) -> bool:
        return self.window_start <= now <= self.deadline

    def error(self, kind: str, now: float) -> None:
        if self.in_window(now):
            self.error_kinds[kind] += 1

    async def connect(self, delay: float = 0.0) -> None:
        """Open a connection for one virtual client (again, after a failure)."""
        loop = asyncio.get_running_loop()
        while True:
            if delay:
                await asyncio.sleep(delay)
            if _perf() >= self.deadline:
                self.user_done()
                return
            try:
                await loop.create_connection(
                    lambda: _Client(self),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.server_hostname,
                )
                return
            except OSError:
                self.error("connect", _perf())
                delay = 0.05

    def user_done(self) -> None:
        self.users_left -= 1
        if self.users_left <= 0 and self.all_done is not None and not self.all_done.done():
            self.all_done.set_result(None)


class _Client(asyncio.Protocol):
    """One keep-alive connection of a virtual client; sends the next request when one ends."""

    def __init__(self, run: _Run):
        self.run = run
        self.parser = httptools.HttpResponseParser(self)
        self.transport = None
        self.sent_at = 0.0
        self.busy = False  # a request is in flight
        self.ttft = None
        self.sse = b""
        self.tail = b""  # the end of the body read so far (a usage figure may straddle reads)
        self.output = 0
        self.stopping = False

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.run.clients.add(self)
        self._send()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.busy:
                self.busy = False
                self.run.error("protocol", _perf())
            self.transport.abort()

    def connection_lost(self, exc) -> None:
        run = self.run
        run.clients.discard(self)
        if self.busy:
            self.busy = False
            run.error("closed", _perf())
        if self.stopping or _perf() >= run.deadline:
            run.user_done()
        else:
            asyncio.get_running_loop().create_task(run.connect())

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.ttft = None
        self.sse = b""
        self.tail = b""
        self.output = 0

    def on_body(self, body: bytes) -> None:
        window = self.tail + body
        if b"_tokens" in window:
            for match in _USAGE_OUTPUT.finditer(window):
                self.output = int(match.group(1))
        self.tail = window[-48:]
        if not self.run.stream or self.ttft is not None:
            return
        buffer = self.sse + body
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            block, buffer = buffer[:end], buffer[end + 2 :]
            for line in block.split(b"\n"):
                if line[:5] == b"data:" and _has_content(line[5:]):
                    self.ttft = _perf() - self.sent_at
                    self.sse = b""
                    return
        self.sse = buffer

    def on_message_complete(self) -> None:
        now = _perf()
        run = self.run
        self.busy = False
        if run.in_window(now):
            status = self.parser.get_status_code()
            run.statuses[str(status)] += 1
            if 200 <= status < 300:
                run.latencies.append(now - self.sent_at)
                run.output_tokens += self.output
                if self.ttft is not None:
                    run.ttfts.append(self.ttft)
        if not self.parser.should_keep_alive():
            self.transport.close()  # connection_lost opens the next connection
            return
        self._send()

    def _send(self) -> None:
        if _perf() >= self.run.deadline:
            self.stopping = True
            self.transport.close()
            return
        self.busy = True
        self.sent_at = _perf()
        self.transport.write(self.run.payload())

    def check_timeout(self, now: float) -> None:
        if self.busy and now - self.sent_at > self.run.timeout:
            self.busy = False
            self.run.error("timeout", now)
            self.transport.abort()


def _has_content(payload: bytes) -> bool:
    """Whether one SSE data payload carries generated text (OpenAI, Anthropic, Gemini)."""
    payload = payload.strip()
    if not payload or payload == b"[DONE]":
        return False
    try:
        event = json.loads(payload)
    except ValueError:
        return False
    if not isinstance(event, dict):
        return False
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or choice.get("text"):
            return True
    delta = event.get("delta")
    if isinstance(delta, dict) and (delta.get("text") or delta.get("partial_json")):
        return True
    for candidate in event.get("candidates") or ():
        for part in (candidate.get("content") or {}).get("parts") or ():
            if part.get("text"):
                return True
    return False


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all threads) from /proc; None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


def _cpu_of(pids) -> dict[int, float | None]:
    return {pid: process_cpu_seconds(pid) for pid in pids}


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 3)


def _payloads(url, bodies, headers, stream: bool, method: str):
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    if isinstance(headers, dict):
        headers = list(headers.items())
    headers = list(headers or ())
    names = {name.lower() for name, _ in headers}
    lines = [f"{method} {target} HTTP/1.1", f"host: {parts.netloc}"]
    if "content-type" not in names:
        lines.append("content-type: application/json")
    lines += [f"{name}: {value}" for name, value in headers if name.lower() != "host"]
    head = "\r\n".join(lines)
    payloads = []
    for body in bodies:
        raw = _body_bytes(body, stream and ":streamGenerateContent" not in target)
        payloads.append(f"{head}\r\ncontent-length: {len(raw)}\r\n\r\n".encode("latin-1") + raw)
    if not payloads:
        raise ValueError("no request bodies")
    ssl = ssl_module.create_default_context() if secure else None
    return payloads, parts.hostname, port, ssl, (parts.hostname if secure else None)


def _body_bytes(body, add_stream: bool) -> bytes:
    if isinstance(body, str):
        body = body.encode()
    if isinstance(body, bytes):
        if not add_stream:
            return body
        try:
            decoded = json.loads(body)
        except ValueError:
            return body
        if not isinstance(decoded, dict) or "stream" in decoded:
            return body
        body = decoded
    if add_stream and isinstance(body, dict) and "stream" not in body:
        body = {**body, "stream": True}
    return json.dumps(body).encode()


async def drive(
    url: str,
    bodies: Iterable,
    headers=(),
    concurrency: int = 10,
    seconds: float = 10.0,
    stream: bool = False,
    warmup: float = 0.0,
    *,
    timeout: float = 60.0,
    drain: float = 2.0,
    method: str = "POST",
    cpu_pids: Iterable[int] = (),
    stop=None,
) -> dict:
    """Run the load inside the running event loop; returns the summary dict."""
    payloads, host, port, ssl, server_hostname = _payloads(url, bodies, headers, stream, method)
    run = _Run(payloads, host, port, ssl, server_hostname, stream, timeout)
    loop = asyncio.get_running_loop()
    run.all_done = loop.create_future()
    run.users_left = concurrency
    started = _perf()
    run.window_start = started + warmup
    run.deadline = run.window_start + seconds
    cpu_at_start = cpu_at_end = None
    cpu_pids = list(cpu_pids)
    servers_at_start: dict = {}
    servers_at_end: dict = {}
    connecting = [loop.create_task(run.connect()) for _ in range(concurrency)]
    stopped_at = None
    while not run.all_done.done():
        now = _perf()
        if stop is not None and stopped_at is None and stop():
            stopped_at = now
            run.deadline = min(run.deadline, now)
            for client in list(run.clients):
                client.stopping = True
                client.transport.abort()
            break
        if cpu_at_start is None and now >= run.window_start:
            cpu_at_start = time.process_time()
            servers_at_start = _cpu_of(cpu_pids)
        if cpu_at_end is None and now >= run.deadline:
            cpu_at_end = time.process_time()
            servers_at_end = _cpu_of(cpu_pids)
        if now >= run.deadline + drain + 1.0:
            break  # connections that never came up
        if now >= run.deadline + drain:
            for client in list(run.clients):
                client.stopping = True
                client.transport.abort()
        for client in list(run.clients):
            client.check_timeout(now)
        tick = 0.25 if cpu_at_start is not None else max(0.0, min(0.25, run.window_start - now))
        if now < run.deadline:
            tick = min(tick, max(0.0, run.deadline - now))
        await asyncio.wait([run.all_done], timeout=tick)
    end = cpu_at_end if cpu_at_end is not None else time.process_time()
    cpu = end - (cpu_at_start if cpu_at_start is not None else end)
    for task in connecting:
        task.cancel()
    if stopped_at is not None:
        seconds = max(0.0, stopped_at - run.window_start)
    if cpu_pids and not servers_at_end:
        servers_at_end = _cpu_of(cpu_pids)
    run.latencies.sort()
    run.ttfts.sort()
    requests = sum(run.statuses.values())
    ok = len(run.latencies)
    errors = requests - ok + sum(run.error_kinds.values())
    mean = sum(run.latencies) / ok * 1000 if ok else None
    result = {
        "requests": requests,
        "ok": ok,
        "errors": errors,
        "seconds": round(seconds, 3),
        "requests_per_second": round(requests / seconds, 1) if seconds else 0.0,
        "p50_ms": _percentile(run.latencies, 0.50),
        "p90_ms": _percentile(run.latencies, 0.90),
        "p99_ms": _percentile(run.latencies, 0.99),
        "p999_ms": _percentile(run.latencies, 0.999),
        "max_ms": _percentile(run.latencies, 1.0),
        "mean_ms": round(mean, 3) if mean is not None else None,
        "ttft_p50_ms": _percentile(run.ttfts, 0.50),
        "ttft_p90_ms": _percentile(run.ttfts, 0.90),
        "ttft_p99_ms": _percentile(run.ttfts, 0.99),
        "ttft_p999_ms": _percentile(run.ttfts, 0.999),
        "output_tokens": run.output_tokens,
        "stopped": stopped_at is not None,
        "statuses": dict(sorted(run.statuses.items())),
        "error_kinds": dict(sorted(run.error_kinds.items())),
        "concurrency": concurrency,
        "stream": stream,
        "warmup": warmup,
        "cpu_seconds": round(cpu, 3),
    }
    if cpu_pids:
        server_cpu = {}
        for pid in cpu_pids:
            start, end = servers_at_start.get(pid), servers_at_end.get(pid)
            server_cpu[str(pid)] = (
                round(end - start, 3) if start is not None and end is not None else None
            )
        result["server_cpu_seconds"] = server_cpu
    return result


def run_load(
    url: str,
    bodies: Iterable,
    headers=(),
    concurrency: int = 10,
    seconds: float = 10.0,
    stream: bool = False,
    warmup: float = 0.0,
    *,
    timeout: float = 60.0,
    drain: float = 2.0,
    method: str = "POST",
    use_uvloop: bool = True,
    cpu_pids: Iterable[int] = (),
    stop=None,
) -> dict:
    """Run a closed-loop load on a fresh event loop (uvloop when importable).

    ``bodies``: request bodies (bytes, str, or JSON-able objects), used round-robin.
    ``headers``: a dict or (name, value) pairs sent with every request.
    """
    coroutine = drive(
        url,
        list(bodies),
        headers,
        concurrency,
        seconds,
        stream,
        warmup,
        timeout=timeout,
        drain=drain,
        method=method,
        cpu_pids=cpu_pids,
        stop=stop,
    )
    if use_uvloop:
        try:
            import uvloop  # optional dependency (a faster event loop)
        except ImportError:
            pass
        else:
            return uvloop.run(coroutine)
    return asyncio.run(coroutine)


def _header(raw: str) -> tuple[str, str]:
    name, sep, value = raw.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {raw!r}")
    return name.strip(), value.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m console.features.capacity.loadgen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--url", required=True)
    add("--body-file", help="one request body (default: a small sim-chat-small chat request)")
    add("--bodies-file", help="JSON lines, one body per line, used round-robin")
    add("--header", action="append", type=_header, default=[], help="'Name: value', repeatable")
    add("--concurrency", type=int, default=10)
    add("--seconds", type=float, default=10.0)
    add("--warmup", type=float, default=0.0)
    add("--stream", action="store_true", help="read answers as SSE, measure time to first token")
    add("--timeout", type=float, default=60.0, help="per request, seconds")
    add("--method", default="POST")
    add("--no-uvloop", action="store_true")
    add("--cpu-pid", type=int, action="append", default=[], help="report this process's CPU")
    options = parser.parse_args(argv)
    if options.bodies_file:
        with open(options.bodies_file, "rb") as f:
            bodies = [line.strip() for line in f if line.strip()]
    elif options.body_file:
        with open(options.body_file, "rb") as f:
            bodies = [f.read()]
    else:
        bodies = [DEFAULT_BODY]
    result = run_load(
        options.url,
        bodies,
        options.header,
        options.concurrency,
        options.seconds,
        options.stream,
        options.warmup,
        timeout=options.timeout,
        method=options.method.upper(),
        use_uvloop=not options.no_uvloop,
        cpu_pids=options.cpu_pid,
    )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
