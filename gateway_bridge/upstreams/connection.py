"""One keep-alive HTTP/1.1 connection to a node (asyncio.Protocol + httptools).

``_Connection`` carries at most one request at a time: the request is one
``transport.write``; the response head and body are parsed by httptools in
``data_received`` into ``status``, ``headers`` (lower-case names) and body
chunks, and every timeout of the request shares one timer handle (no
``wait_for``, no extra task). ``_Host`` is the pool's state per base URL.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections import deque
from typing import Protocol, cast

import httptools

from gateway_bridge.upstreams.errors import UpstreamError, _Stale


class Owner(Protocol):
    """What a connection tells its pool (``UpstreamPool``): reusable, or gone."""

    def put_idle(self, conn: _Connection) -> None: ...

    def forget(self, conn: _Connection) -> None: ...


# Reading stops (pause_reading) while this much body is buffered and unread.
HIGH_WATER_BYTES = 1 << 20
_INF = float("inf")


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
        "public_only",
        "server_hostname",
        "ssl",
        "waiters",
    )

    def __init__(
        self,
        key: str,
        hostname: str,
        port: int,
        ssl: ssl_module.SSLContext | None,
        prefix: str,
        host_header: str,
        public_only: bool = False,
    ) -> None:
        self.key = key
        # Connect only to addresses the pool's address guard accepts (a tenant's node).
        self.public_only = public_only
        self.hostname = hostname
        self.port = port
        self.ssl = ssl
        self.server_hostname = hostname if ssl else None
        self.prefix = prefix
        self.host_line = f"host: {host_header}\r\n"
        self.idle: list[_Connection] = []  # a stack: the most recently used on top
        self.in_flight = 0  # connections open or connecting, idle ones included
        self.opened = 0  # connections ever opened (stats, tests)
        # Requests waiting for a connection: each gets a freed one, or None for
        # a freed slot (it then connects itself).
        self.waiters: deque[asyncio.Future[_Connection | None]] = deque()


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request at a time."""

    __slots__ = (
        "_buffered",
        "_paused",
        "_timer",
        "_waiter",
        "active",
        "chunks",
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

    def __init__(self, pool: Owner, host: _Host, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.host = host
        self.loop = loop
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None  # set by connection_made
        self.active = False  # a request is in flight on this connection
        self.dead = False  # discarded: counted out of the pool, never reused
        self.pooled = False  # in its host's idle stack
        self.idle_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.chunks: list[bytes] = []
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
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # loop.create_connection's transports are read-write ones.
        self.transport = cast(asyncio.Transport, transport)

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
                self.fail(UpstreamError("protocol", str(error) or "malformed response"))
        except httptools.HttpParserUpgrade:
            self.fail(UpstreamError("protocol", "unexpected protocol upgrade"))

    def connection_lost(self, exc: Exception | None) -> None:
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
        text = value.decode("latin-1")
        headers = self.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

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
        self.chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER_BYTES and not self._paused:
            self._paused = True
            assert self.transport is not None  # data comes over it
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

    def start(
        self,
        payload: bytes,
        first_byte_timeout: float | None,
        idle_timeout: float | None,
        deadline: float,
        no_body: bool,
    ) -> None:
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
        assert self.transport is not None  # the pool starts connected connections only
        self.transport.write(payload)

    async def wait(self) -> None:
        """Wait for the next event of the response (head, body data, end, error)."""
        waiter: asyncio.Future[None] = self.loop.create_future()
        self._waiter = waiter
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
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.chunks = []
        self._buffered = 0
        if self._paused:
            self._paused = False
            if not self.dead and self.transport is not None:  # paused: it is set
                self.transport.resume_reading()
        return data

    def _check_timeouts(self) -> None:
        self._timer = None
        if not self.active or self.error is not None or self.complete:
            return
        now = self.loop.time() + 0.001  # call_at may fire up to the clock resolution early
        if now >= self.deadline:
            self.fail(UpstreamError("total_timeout"))
            return
        if not self.head_done:
            if now >= self.first_byte_deadline:
                self.fail(UpstreamError("first_byte_timeout"))
                return
            when = min(self.first_byte_deadline, self.deadline)
        elif self._waiter is not None and self.idle_timeout:
            # Idle time counts only while the reader waits (not while it is slow to read);
            # every piece of body wakes the reader, whose next wait() restarts the clock.
            idle_deadline = self.wait_since + self.idle_timeout
            if now >= idle_deadline:
                self.fail(UpstreamError("idle_timeout"))
                return
            when = min(idle_deadline, self.deadline)
        else:
            when = self.deadline  # the next wait() arms the idle check again
        if when != _INF:
            self._timer = self.loop.call_at(when, self._check_timeouts)

    def fail(self, error: UpstreamError) -> None:
        """End the request in flight with ``error`` (the first one stands) and
        close the connection."""
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
        self.chunks = []
        self._buffered = 0
        transport = self.transport
        if self._paused:
            self._paused = False
            if not self.dead and transport is not None:  # paused: it is set
                transport.resume_reading()
        if reuse and not self.dead and transport is not None and not transport.is_closing():
            self.pool.put_idle(self)
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
            self.pool.forget(self)
