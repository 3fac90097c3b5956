"""The gateway's pooled HTTP/1.1 client to inference nodes (asyncio + httptools).

One ``UpstreamPool`` per process keeps keep-alive connections per node
(``base_url``). A request costs a few tens of microseconds: the request is one
``transport.write``, the response is parsed by httptools in ``data_received``
and every timeout of a request shares one timer handle (no ``wait_for``, no
extra tasks). aiohttp's client costs several times more per request.

    resp = await pool.request("POST", base_url, "/v1/chat/completions", body, headers,
                              connect_timeout=2, first_byte_timeout=30, idle_timeout=30)
    resp.status, resp.headers            # headers: dict with lower-case names
    data = await resp.read()             # whole body (Content-Length, chunked or until close)
    async for data in resp.sse(): ...    # each SSE event's data payload, b"[DONE]" included
    resp.release()                       # back to the pool when fully read, else closed
    resp.abort()                         # close now: the node sees the disconnect

``read()`` and ``sse()`` release the connection themselves when the response
has been read to the end and close it on any error (or when the consumer is
cancelled or stops iterating); ``release()`` and ``abort()`` are idempotent,
so ``try: ... finally: resp.release()`` is always safe.

Timeouts (seconds, ``None`` for none): ``connect_timeout`` for the TCP (and TLS)
connect and for waiting on a free connection when the host is at its limit;
``first_byte_timeout`` from sending the request to the complete response head;
``idle_timeout`` for any wait on more body data (between SSE events);
``total_timeout`` for the whole exchange, body included. A failure raises
``UpstreamError`` whose ``reason`` is one of ``REASONS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as ssl_module
from collections import deque
from urllib.parse import urlsplit

import httptools

REASONS = frozenset(
    {
        "connect",
        "connect_timeout",
        "first_byte_timeout",
        "idle_timeout",
        "total_timeout",
        "protocol",
        "closed",
    }
)
# Reading stops (pause_reading) while this much body is buffered and unread.
HIGH_WATER_BYTES = 1 << 20
# How long sse() waits after [DONE] for the end of the body (see _settle).
SETTLE_S = 0.25
_INF = float("inf")
_SKIPPED = frozenset({"host", "content-length", "connection", "transfer-encoding"})


class UpstreamError(Exception):
    """A failed exchange with a node; ``reason`` says what failed (see ``REASONS``)."""

    def __init__(self, reason: str, message: str = ""):
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason = reason


class _Stale(Exception):
    """The connection closed before any response byte came (retryable if it was reused)."""


class _Host:
    __slots__ = (
        "host_line",
        "hostname",
        "idle",
        "in_flight",
        "key",
        "opened",
        "port",
        "prefix",
        "server_hostname",
        "ssl",
        "waiters",
    )

    def __init__(self, key, hostname, port, ssl, prefix, host_header):
        self.key = key
        self.hostname = hostname
        self.port = port
        self.ssl = ssl
        self.server_hostname = hostname if ssl else None
        self.prefix = prefix
        self.host_line = f"host: {host_header}\r\n"
        self.idle: list[_Connection] = []  # a stack: the most recently used on top
        self.in_flight = 0  # connections open or connecting, idle ones included
        self.opened = 0  # connections ever opened (stats, tests)
        self.waiters: deque[asyncio.Future] = deque()


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request at a time."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_paused",
        "_timer",
        "_waiter",
        "active",
        "complete",
        "dead",
        "deadline",
        "error",
        "first_byte_deadline",
        "head_done",
        "headers",
        "host",
        "idle_since",
        "idle_timeout",
        "keep_alive",
        "loop",
        "no_body",
        "parser",
        "pool",
        "pooled",
        "received",
        "status",
        "transport",
        "wait_since",
    )

    def __init__(self, pool: UpstreamPool, host: _Host, loop):
        self.pool = pool
        self.host = host
        self.loop = loop
        self.parser = httptools.HttpResponseParser(self)
        self.transport = None
        self.active = False  # a request is in flight on this connection
        self.dead = False  # discarded: counted out of the pool, never reused
        self.pooled = False  # in its host's idle stack
        self.idle_since = 0.0
        self._timer = None
        self._waiter = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self.error: BaseException | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.received = False
        self.no_body = False

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.active:
            # Bytes nobody asked for: the connection is out of step, drop it.
            self.discard(abort=True)
            return
        if self.complete:  # more than the one response: answer this one, then close
            self.keep_alive = False
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            if self.complete:  # junk after a whole response: keep it, but not the connection
                self.keep_alive = False
            else:
                self._fail(UpstreamError("protocol", str(error) or "malformed response"))
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("protocol", "unexpected protocol upgrade"))

    def connection_lost(self, exc) -> None:
        if self.active and not self.complete and self.error is None:
            if not self.received:
                self.error = _Stale()
            elif self.head_done and not self._framed():
                # No Content-Length, not chunked: the body ends when the connection does.
                self.complete = True
            else:
                self.error = UpstreamError("closed", "the node closed the connection mid-response")
        self.discard(abort=False)
        self._wake()

    def pause_writing(self) -> None:  # request bodies are small; the kernel buffers them
        pass

    def resume_writing(self) -> None:
        pass

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        key = name.decode("latin-1").lower()
        value = value.decode("latin-1")
        headers = self.headers
        headers[key] = f"{headers[key]}, {value}" if key in headers else value

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        status = self.parser.get_status_code()
        if status < 200:  # 1xx interim answers carry no body; wait for the real one
            self.headers = {}
            return
        self.status = status
        self.head_done = True
        if self._timer is not None:  # the first-byte timer; wait() arms the idle one
            self._timer.cancel()
            self._timer = None
        if self.no_body:  # a HEAD response: llhttp would wait for a body that never comes
            self.complete = True
            self.keep_alive = False
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER_BYTES and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.complete or not self.head_done:
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # the request in flight
    def _framed(self) -> bool:
        headers = self.headers
        return "content-length" in headers or "chunked" in headers.get("transfer-encoding", "")

    def start(self, payload: bytes, first_byte_timeout, idle_timeout, deadline, no_body) -> None:
        self._reset()
        self.active = True
        self.error = None
        self.no_body = no_body
        now = self.loop.time()
        self.wait_since = now
        self.first_byte_deadline = now + first_byte_timeout if first_byte_timeout else _INF
        self.idle_timeout = idle_timeout
        self.deadline = deadline
        when = min(self.first_byte_deadline, deadline)
        if when != _INF:
            self._timer = self.loop.call_at(when, self._check_timeouts)
        self.transport.write(payload)

    async def wait(self) -> None:
        """Wait for the next event of the response (head, body data, end, error)."""
        self._waiter = waiter = self.loop.create_future()
        self.wait_since = self.loop.time()
        if self._timer is None and self.head_done:
            when = self.deadline
            if self.idle_timeout:
                when = min(when, self.wait_since + self.idle_timeout)
            if when != _INF:
                self._timer = self.loop.call_at(when, self._check_timeouts)
        try:
            await waiter
        finally:
            if self._waiter is waiter:  # cancelled: nobody waits any more
                self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def take(self) -> bytes:
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._buffered = 0
        if self._paused:
            self._paused = False
            if not self.dead:
                self.transport.resume_reading()
        return data

    def _check_timeouts(self) -> None:
        self._timer = None
        if not self.active or self.error is not None or self.complete:
            return
        now = self.loop.time() + 0.001  # call_at may fire up to the clock resolution early
        if now >= self.deadline:
            self._fail(UpstreamError("total_timeout"))
            return
        if not self.head_done:
            if now >= self.first_byte_deadline:
                self._fail(UpstreamError("first_byte_timeout"))
                return
            when = min(self.first_byte_deadline, self.deadline)
        elif self._waiter is not None and self.idle_timeout:
            # Idle time counts only while the reader waits (not while it is slow to read);
            # every piece of body wakes the reader, whose next wait() restarts the clock.
            idle_deadline = self.wait_since + self.idle_timeout
            if now >= idle_deadline:
                self._fail(UpstreamError("idle_timeout"))
                return
            when = min(idle_deadline, self.deadline)
        else:
            when = self.deadline  # the next wait() arms the idle check again
        if when != _INF:
            self._timer = self.loop.call_at(when, self._check_timeouts)

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        self.discard(abort=True)
        self._wake()

    def finish(self, reuse: bool) -> None:
        """The response is done with: keep the connection for the next request or close it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.active = False
        self._chunks = []
        self._buffered = 0
        if self._paused:
            self._paused = False
            if not self.dead:
                self.transport.resume_reading()
        if reuse and not self.dead and not self.transport.is_closing():
            self.pool._put_idle(self)
            return
        if self.error is None and not self.complete:
            self.error = UpstreamError("closed", "the response was aborted")
        self.discard(abort=True)
        self._wake()  # a reader in another task (abort() from a watcher) gets the error

    def discard(self, abort: bool) -> None:
        """Close (``abort``: at once, dropping buffers) and count the connection out, once."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None and not self.transport.is_closing():
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
        if not self.dead:
            self.dead = True
            self.pool._forget(self)


class UpstreamResponse:
    """The head of a node's answer; read the body with ``read()`` or ``sse()``."""

    __slots__ = ("_conn", "headers", "reused", "status")

    def __init__(self, conn: _Connection, reused: bool):
        self._conn: _Connection | None = conn
        self.status: int = conn.status
        self.headers: dict[str, str] = conn.headers
        self.reused = reused  # whether the connection came from the pool

    async def read(self) -> bytes:
        """The whole body; releases the connection afterwards."""
        conn = self._conn
        if conn is None:
            raise UpstreamError("closed", "the response was already released")
        parts: list[bytes] = []
        try:
            while True:
                if self._conn is not conn:
                    raise self._gone(conn)
                if conn._chunks:
                    parts.append(conn.take())
                if conn.complete:
                    break
                if conn.error is not None:
                    raise _public(conn.error)
                await conn.wait()
        except BaseException:
            self.abort()
            raise
        self.release()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def sse(self):
        """Yield each server-sent event's data (lines joined with ``\\n``), ``[DONE]`` too.

        Comments and events without data are skipped. Releases the connection
        when the stream ends; closes it on an error or if iteration stops early.
        """
        conn = self._conn
        if conn is None:
            raise UpstreamError("closed", "the response was already released")
        buffer = b""
        try:
            while True:
                if self._conn is not conn:
                    raise self._gone(conn)
                if conn._chunks:
                    data = conn.take()
                    buffer = buffer + data if buffer else data
                    tail = b""
                    if b"\r" in buffer:  # CR or CRLF line ends: make them LF
                        if buffer[-1:] == b"\r":  # maybe half of a CRLF: decide later
                            buffer, tail = buffer[:-1], b"\r"
                        buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                    start = 0
                    while True:
                        end = buffer.find(b"\n\n", start)
                        if end < 0:
                            break
                        block = buffer[start:end]
                        start = end + 2
                        if block[:6] == b"data: " and b"\n" not in block:
                            payload = block[6:]
                        else:
                            payload = _event_data(block)
                            if payload is None:
                                continue
                        if payload == b"[DONE]" and not conn.complete:
                            await _settle(conn)
                        yield payload
                        if self._conn is not conn:  # released or aborted meanwhile
                            raise self._gone(conn)
                    buffer = buffer[start:] + tail if start or tail else buffer
                    continue
                if conn.complete:
                    break
                if conn.error is not None:
                    raise _public(conn.error)
                await conn.wait()
            payload = _event_data(buffer.replace(b"\r", b"\n").strip(b"\n"))
            if payload is not None:  # a last event without its blank line: lenient
                yield payload
        except BaseException:
            self.abort()
            raise
        self.release()

    @staticmethod
    def _gone(conn: _Connection) -> BaseException:
        if conn.error is not None:
            return _public(conn.error)
        return UpstreamError("closed", "the response was already released")

    def release(self) -> None:
        """Give the connection back (if read to the end and keep-alive) or close it."""
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.finish(reuse=conn.complete and conn.keep_alive and conn.error is None)

    def abort(self) -> None:
        """Close the connection now; the node sees the disconnect and stops generating."""
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.finish(reuse=False)

    def __del__(self) -> None:
        conn = self._conn
        if conn is not None:  # dropped without release(): close it rather than leak it
            self._conn = None
            with contextlib.suppress(Exception):  # the loop may be closed by now
                conn.finish(reuse=False)

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.release()
        else:
            self.abort()


async def _settle(conn: _Connection) -> None:
    """After ``[DONE]``: give the end of the chunked body a moment to come in, so that
    a release() right after the last event keeps the connection."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_S):
            while not conn.complete and conn.error is None and not conn._chunks:
                await conn.wait()


def _event_data(block: bytes) -> bytes | None:
    """The data of one SSE event block (lines without their LF), or None if it has none."""
    data = None
    for line in block.split(b"\n"):
        if line[:5] != b"data:":
            continue  # comments (":..."), event:, id:, retry: and unknown fields
        value = line[5:]
        if value[:1] == b" ":
            value = value[1:]
        data = value if data is None else data + b"\n" + value
    return data


def _public(error: BaseException) -> BaseException:
    if isinstance(error, _Stale):
        return UpstreamError("closed", "the node closed the connection before answering")
    return error


class UpstreamPool:
    """Keep-alive HTTP/1.1 connections to the nodes, at most ``max_connections_per_host`` each."""

    def __init__(
        self,
        max_connections_per_host: int = 512,
        idle_keepalive_s: float = 30.0,
        *,
        ssl_context: ssl_module.SSLContext | None = None,
    ):
        self.max_connections_per_host = max_connections_per_host
        self.idle_keepalive_s = idle_keepalive_s
        self._ssl_context = ssl_context
        self._hosts: dict[str, _Host] = {}
        self._conns: set[_Connection] = set()
        self._sweeper = None
        self._closed = False

    # public
    async def request(
        self,
        method: str,
        base_url: str,
        path: str,
        body: bytes = b"",
        headers: list[tuple[str, str]] | dict[str, str] | None = None,
        *,
        connect_timeout: float | None = 10.0,
        first_byte_timeout: float | None = 60.0,
        idle_timeout: float | None = 60.0,
        total_timeout: float | None = None,
    ) -> UpstreamResponse:
        """Send one request; returns once the response head is in."""
        if self._closed:
            raise UpstreamError("closed", "the pool is closed")
        loop = asyncio.get_running_loop()
        host = self._hosts.get(base_url) or self._host(base_url)
        deadline = loop.time() + total_timeout if total_timeout else _INF
        payload = _serialize(method, host, path, body or b"", headers)
        no_body = method == "HEAD"
        fresh = False
        while True:
            conn, reused = await self._acquire(host, loop, connect_timeout, deadline, fresh)
            try:
                conn.start(payload, first_byte_timeout, idle_timeout, deadline, no_body)
                while not conn.head_done and conn.error is None:
                    await conn.wait()
            except BaseException:
                conn.finish(reuse=False)
                raise
            if conn.head_done:
                return UpstreamResponse(conn, reused)
            error = conn.error
            conn.finish(reuse=False)
            if isinstance(error, _Stale) and reused and not fresh:
                # A pooled connection the node closed while we sent (its keep-alive
                # timeout, a restart): nothing of a response came, so the node did not
                # answer it and, the connection being a reused one, that is the known
                # keep-alive race, not a node failing on this request. Retry once, on a
                # new connection. Not done for fresh connections or after any response
                # byte (a POST is not idempotent; it could run twice).
                fresh = True
                continue
            raise _public(error)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per base_url: open (connecting included), idle, in_use, waiting, opened (ever)."""
        return {
            key: {
                "open": host.in_flight,
                "idle": len(host.idle),
                "in_use": host.in_flight - len(host.idle),
                "waiting": sum(1 for w in host.waiters if not w.done()),
                "opened": host.opened,
            }
            for key, host in self._hosts.items()
        }

    async def close(self) -> None:
        """Close every connection (in-use ones too: their readers get ``closed``)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for host in self._hosts.values():
            while host.waiters:
                waiter = host.waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(UpstreamError("closed", "the pool is closed"))
        for conn in list(self._conns):
            if conn.active:
                conn._fail(UpstreamError("closed", "the pool is closed"))
            else:
                conn.discard(abort=False)
        await asyncio.sleep(0)  # let the transports call connection_lost

    # connections
    def _host(self, base_url: str) -> _Host:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        hostname = parts.hostname
        shown = f"[{hostname}]" if ":" in hostname else hostname
        if port != (443 if secure else 80):
            shown = f"{shown}:{port}"
        ssl = None
        if secure:
            if self._ssl_context is None:
                self._ssl_context = ssl_module.create_default_context()
            ssl = self._ssl_context
        host = _Host(base_url, hostname, port, ssl, parts.path.rstrip("/"), shown)
        self._hosts[base_url] = host
        return host

    async def _acquire(self, host: _Host, loop, connect_timeout, deadline, fresh: bool):
        """A connection for one request: (connection, whether it came from the pool)."""
        if not fresh:
            idle = host.idle
            while idle:
                conn = idle.pop()
                conn.pooled = False
                if conn.dead or conn.transport.is_closing():
                    conn.discard(abort=True)
                    continue
                return conn, True
        if host.in_flight >= self.max_connections_per_host:
            waiter = loop.create_future()
            host.waiters.append(waiter)
            try:
                async with asyncio.timeout_at(_timeout(loop, connect_timeout, deadline)):
                    conn = await waiter
            except TimeoutError:
                raise UpstreamError(_timeout_reason(loop, deadline), "no free connection") from None
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    handed = waiter.result()
                    if handed is not None:
                        self._put_idle(handed)
                    elif not self._wake_waiter(host):  # pass the free slot on, or free it
                        host.in_flight -= 1
                raise
            if conn is not None:
                return conn, True
            # None: a slot was freed for us (in_flight already counts it); connect below.
        else:
            host.in_flight += 1
        conn = _Connection(self, host, loop)
        host.opened += 1
        self._conns.add(conn)
        try:
            async with asyncio.timeout_at(_timeout(loop, connect_timeout, deadline)):
                await loop.create_connection(
                    lambda: conn,
                    host.hostname,
                    host.port,
                    ssl=host.ssl,
                    server_hostname=host.server_hostname,
                )
        except TimeoutError:
            conn.discard(abort=True)
            raise UpstreamError(_timeout_reason(loop, deadline), host.key) from None
        except OSError as error:
            conn.discard(abort=True)
            raise UpstreamError("connect", f"{host.key}: {error}") from None
        except BaseException:
            conn.discard(abort=True)
            raise
        if conn.dead:  # closed by the pool (or the peer) while connecting
            conn.transport.abort()
            raise UpstreamError("closed", host.key)
        return conn, False

    def _put_idle(self, conn: _Connection) -> None:
        host = conn.host
        while host.waiters:
            waiter = host.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)  # hand it straight to a waiting request
                return
        conn.idle_since = conn.loop.time()
        conn.pooled = True
        host.idle.append(conn)
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(self.idle_keepalive_s / 2, self._sweep)

    def _forget(self, conn: _Connection) -> None:
        """A connection is gone: free its slot (for a waiting request, if any)."""
        host = conn.host
        host.in_flight -= 1
        self._conns.discard(conn)
        if conn.pooled:
            conn.pooled = False
            host.idle.remove(conn)
        if host.waiters:
            host.in_flight += 1  # the slot goes to the waiter, which connects
            if not self._wake_waiter(host):
                host.in_flight -= 1

    def _wake_waiter(self, host: _Host) -> bool:
        while host.waiters:
            waiter = host.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return True
        return False

    def _sweep(self) -> None:
        """Close connections idle for longer than ``idle_keepalive_s`` (oldest at the bottom)."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.idle_keepalive_s
        remaining = False
        for host in self._hosts.values():
            idle = host.idle
            while idle and idle[0].idle_since < cutoff:
                idle[0].discard(abort=False)  # _forget takes it off the stack
            remaining = remaining or bool(idle)
        if remaining and not self._closed:
            self._sweeper = loop.call_later(self.idle_keepalive_s / 2, self._sweep)


def _timeout(loop, timeout, deadline) -> float | None:
    """The loop time by which a connect must be done (for ``asyncio.timeout``)."""
    when = loop.time() + timeout if timeout else _INF
    when = min(when, deadline)
    return None if when == _INF else when


def _timeout_reason(loop, deadline) -> str:
    return "total_timeout" if loop.time() + 0.001 >= deadline else "connect_timeout"


def _serialize(method, host: _Host, path: str, body: bytes, headers) -> bytes:
    if headers is None:
        headers = ()
    elif isinstance(headers, dict):
        headers = headers.items()
    lines = [f"{name}: {value}\r\n" for name, value in headers if name.lower() not in _SKIPPED]
    extra = "".join(lines)
    if extra.count("\n") != len(lines) or extra.count("\r") != len(lines):
        raise ValueError("header names and values must not contain CR or LF")
    head = (
        f"{method} {host.prefix}{path} HTTP/1.1\r\n{host.host_line}{extra}"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    return head + body if len(body) < 65536 else b"".join((head, body))
