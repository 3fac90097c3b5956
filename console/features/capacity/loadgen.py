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
``cut_off`` counts the requests sent in the window whose answer (or failure)
came after it: finished in the drain, or aborted at its end or by ``stop``.
The server saw them (a gateway charges and logs them), so ``requests`` plus
``cut_off`` plus transport failures is every request sent in the window.
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
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import httptools

from console.features.capacity.cputime import CpuClocks, cpu_of
from console.features.capacity.wire import Headers, has_content, request_payloads

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
        self.cut_off = 0
        self.clients: set[_Client] = set()
        self.users_left = 0
        self.all_done: asyncio.Future[None] | None = None

    def payload(self) -> bytes:
        payloads = self.payloads
        index = self.next_payload
        self.next_payload = index + 1 if index + 1 < len(payloads) else 0
        return payloads[index]

    def in_window(self, now: float) -> bool:
        return self.window_start <= now <= self.deadline

    def error(self, kind: str, now: float, *, sent: bool = True) -> None:
        """A failure at ``now``; ``sent``: of a request in flight (past the
        window, one cut off)."""
        if self.in_window(now):
            self.error_kinds[kind] += 1
        elif sent and now > self.deadline:
            self.cut_off += 1

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
                self.error("connect", _perf(), sent=False)
                delay = 0.05

    def abort_all(self) -> None:
        """Abort every open connection; its client stops (opens no other). A
        request in flight is cut off here and now (the summary may be taken
        before the loop reports the connection lost)."""
        for client in list(self.clients):
            client.stopping = True
            if client.busy:
                client.busy = False
                self.cut_off += 1
            client.transport.abort()

    def user_done(self) -> None:
        self.users_left -= 1
        if self.users_left <= 0 and self.all_done is not None and not self.all_done.done():
            self.all_done.set_result(None)


class _Client(asyncio.Protocol):
    """One keep-alive connection of a virtual client; sends the next request when one ends."""

    transport: asyncio.Transport  # from connection_made, before any other callback

    def __init__(self, run: _Run):
        self.run = run
        self.parser = httptools.HttpResponseParser(self)
        self.sent_at = 0.0
        self.busy = False  # a request is in flight
        self.ttft: float | None = None
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
                if line[:5] == b"data:" and has_content(line[5:]):
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
        elif now > run.deadline:
            run.cut_off += 1
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


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 3)


async def drive(
    url: str,
    bodies: Iterable,
    headers: Headers = (),
    concurrency: int = 10,
    seconds: float = 10.0,
    stream: bool = False,
    warmup: float = 0.0,
    *,
    timeout: float = 60.0,
    drain: float = 2.0,
    method: str = "POST",
    cpu_pids: Iterable[int] = (),
    stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Run the load inside the running event loop; returns the summary dict."""
    payloads, host, port, ssl, server_hostname = request_payloads(
        url, bodies, headers, stream, method
    )
    run = _Run(payloads, host, port, ssl, server_hostname, stream, timeout)
    loop = asyncio.get_running_loop()
    all_done: asyncio.Future[None] = loop.create_future()
    run.all_done = all_done
    run.users_left = concurrency
    started = _perf()
    run.window_start = started + warmup
    run.deadline = run.window_start + seconds
    cpu = CpuClocks(list(cpu_pids))
    connecting = [loop.create_task(run.connect()) for _ in range(concurrency)]
    stopped_at = await _watch(run, all_done, cpu, stop, drain)
    cpu_seconds = cpu.seconds()
    for task in connecting:
        task.cancel()
    if stopped_at is not None:
        seconds = max(0.0, stopped_at - run.window_start)
    if cpu.pids and not cpu.servers_at_end:
        cpu.servers_at_end = cpu_of(cpu.pids)
    result = _summary(run, seconds, stopped=stopped_at is not None)
    result.update(concurrency=concurrency, stream=stream, warmup=warmup)
    result["cpu_seconds"] = round(cpu_seconds, 3)
    if cpu.pids:
        result["server_cpu_seconds"] = cpu.servers()
    return result


async def _watch(
    run: _Run,
    all_done: asyncio.Future[None],
    cpu: CpuClocks,
    stop: Callable[[], bool] | None,
    drain: float,
) -> float | None:
    """Tick (a quarter second at most) until every virtual client is done: read the
    CPU clocks as the window opens and closes, time out stuck requests, abort what is
    still open ``drain`` seconds past the deadline. When ``stop`` answers true the
    open requests are aborted at once and the time it did is returned (else None)."""
    stopped_at = None
    while not all_done.done():
        now = _perf()
        if stop is not None and stopped_at is None and stop():
            stopped_at = now
            run.deadline = min(run.deadline, now)
            run.abort_all()
            break
        cpu.read(now, run.window_start, run.deadline)
        if now >= run.deadline + drain + 1.0:
            break  # connections that never came up
        if now >= run.deadline + drain:
            run.abort_all()
        for client in list(run.clients):
            client.check_timeout(now)
        tick = 0.25 if cpu.at_start is not None else max(0.0, min(0.25, run.window_start - now))
        if now < run.deadline:
            tick = min(tick, max(0.0, run.deadline - now))
        await asyncio.wait([all_done], timeout=tick)
    return stopped_at


def _summary(run: _Run, seconds: float, *, stopped: bool) -> dict[str, Any]:
    """The measured window's counts, rates and latency percentiles (milliseconds)."""
    run.latencies.sort()
    run.ttfts.sort()
    requests = sum(run.statuses.values())
    ok = len(run.latencies)
    errors = requests - ok + sum(run.error_kinds.values())
    mean = sum(run.latencies) / ok * 1000 if ok else None
    return {
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
        "cut_off": run.cut_off,
        "stopped": stopped,
        "statuses": dict(sorted(run.statuses.items())),
        "error_kinds": dict(sorted(run.error_kinds.items())),
    }


def run_load(
    url: str,
    bodies: Iterable,
    headers: Headers = (),
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
    stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
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
    bodies: list[bytes | dict[str, Any]]
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
