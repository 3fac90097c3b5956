"""The pool of keep-alive connections per node, and the one call: ``request``.

At most ``max_connections_per_host`` connections per base URL (waiters get a
freed connection, or its slot, first come first served); idle connections
are reused most recent first and closed after ``idle_keepalive_s``. A
request is serialized once into one buffer (head and body).

Server-side request forgery: a request with ``public_only=True`` (a tenant's
node) goes over connections of their own, each opened by resolving the host
once, refusing it unless the pool's ``address_guard`` accepts every address
it resolved to, and connecting to one of those checked addresses (the name
still in the Host header and TLS's server name). A name that passed when it
was saved therefore cannot be re-pointed at this deployment's network later
(DNS rebinding), and an IP literal saved under older rules is checked again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl as ssl_module
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from gateway_bridge.upstreams.connection import _INF, _Connection, _Host
from gateway_bridge.upstreams.errors import UpstreamError, _public, _Stale
from gateway_bridge.upstreams.response import UpstreamResponse

_SKIPPED = frozenset({"host", "content-length", "connection", "transfer-encoding"})
# The pool's key of a base URL reached at checked addresses only.
_PUBLIC_ONLY = "public-only "


class AddressRefused(OSError):
    """A public-only host resolved to an address the address guard refuses."""


class UpstreamPool:
    """Keep-alive HTTP/1.1 connections to the nodes, at most ``max_connections_per_host`` each."""

    def __init__(
        self,
        max_connections_per_host: int = 512,
        idle_keepalive_s: float = 30.0,
        *,
        ssl_context: ssl_module.SSLContext | None = None,
        address_guard: Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], str] | None = None,
    ):
        """``address_guard(address)``: "" when a ``public_only`` request may
        connect to ``address``, else why not (``inference_node``'s
        ``why_not_public``). Without one, ``public_only`` requests are refused."""
        self.max_connections_per_host = max_connections_per_host
        self._address_guard = address_guard
        self.idle_keepalive_s = idle_keepalive_s
        self._ssl_context = ssl_context
        self._hosts: dict[str, _Host] = {}
        self._conns: set[_Connection] = set()
        self._sweeper: asyncio.TimerHandle | None = None
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
        public_only: bool = False,
    ) -> UpstreamResponse:
        """Send one request; returns once the response head is in.
        ``public_only``: connect only to addresses the address guard accepts."""
        if self._closed:
            raise UpstreamError("closed", "the pool is closed")
        loop = asyncio.get_running_loop()
        key = _PUBLIC_ONLY + base_url if public_only else base_url
        host = self._hosts.get(key) or self._host(base_url, key, public_only)
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
            assert error is not None  # the wait ends with the head or an error
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
                conn.fail(UpstreamError("closed", "the pool is closed"))
            else:
                conn.discard(abort=False)
        await asyncio.sleep(0)  # let the transports call connection_lost

    # connections
    def _host(self, base_url: str, key: str, public_only: bool) -> _Host:
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
        host = _Host(key, hostname, port, ssl, parts.path.rstrip("/"), shown, public_only)
        self._hosts[key] = host
        return host

    async def _acquire(
        self,
        host: _Host,
        loop: asyncio.AbstractEventLoop,
        connect_timeout: float | None,
        deadline: float,
        fresh: bool,
    ) -> tuple[_Connection, bool]:
        """A connection for one request: (connection, whether it came from the pool)."""
        if not fresh:
            idle = host.idle
            while idle:
                conn = idle.pop()
                conn.pooled = False
                if conn.dead or conn.transport is None or conn.transport.is_closing():
                    conn.discard(abort=True)
                    continue
                return conn, True
        if host.in_flight >= self.max_connections_per_host:
            handed_over = await self._wait_for_one(host, loop, connect_timeout, deadline)
            if handed_over is not None:
                return handed_over, True
            # None: a slot was freed for us (in_flight already counts it); connect below.
        else:
            host.in_flight += 1
        conn = _Connection(self, host, loop)
        host.opened += 1
        self._conns.add(conn)
        try:
            async with asyncio.timeout_at(_timeout(loop, connect_timeout, deadline)):
                if host.public_only:
                    await self._connect_checked(loop, conn, host)
                else:
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
            if conn.transport is not None:  # connected: the connect returned
                conn.transport.abort()
            raise UpstreamError("closed", host.key)
        return conn, False

    async def _wait_for_one(
        self,
        host: _Host,
        loop: asyncio.AbstractEventLoop,
        connect_timeout: float | None,
        deadline: float,
    ) -> _Connection | None:
        """Wait (the host at its limit) for a connection another request frees,
        or None for its slot (counted in ``in_flight`` for us already)."""
        waiter: asyncio.Future[_Connection | None] = loop.create_future()
        host.waiters.append(waiter)
        try:
            async with asyncio.timeout_at(_timeout(loop, connect_timeout, deadline)):
                return await waiter
        except TimeoutError:
            raise UpstreamError(_timeout_reason(loop, deadline), "no free connection") from None
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()
                if handed is not None:
                    self.put_idle(handed)
                elif not self._wake_waiter(host):  # pass the free slot on, or free it
                    host.in_flight -= 1
            raise

    async def _connect_checked(
        self, loop: asyncio.AbstractEventLoop, conn: _Connection, host: _Host
    ) -> None:
        """Resolve ``host`` once, refuse it unless every address passes the
        guard, then connect to those addresses in turn (never resolving again)."""
        guard = self._address_guard
        if guard is None:
            raise AddressRefused("no address guard: public-only hosts are refused")
        infos = await loop.getaddrinfo(host.hostname, host.port, type=socket.SOCK_STREAM)
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            if guard(address):
                # Named without the address: the message can reach the node's owner.
                raise AddressRefused("the node's host resolves to a non-public address")
        error: OSError = AddressRefused("the node's host resolves to no address")
        for family, _, proto, _, sockaddr in infos:
            try:
                await loop.create_connection(
                    lambda: conn,
                    str(sockaddr[0]),  # an IPv4 or IPv6 address: (host, port, ...)
                    int(sockaddr[1]),
                    family=family,
                    proto=proto,
                    ssl=host.ssl,
                    server_hostname=host.server_hostname,
                )
                return
            except OSError as exc:
                error = exc
        raise error

    # the connections' calls
    def put_idle(self, conn: _Connection) -> None:
        """A connection done with its request and good for another: to a
        waiting request, else onto its host's idle stack."""
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

    def forget(self, conn: _Connection) -> None:
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
                idle[0].discard(abort=False)  # forget() takes it off the stack
            remaining = remaining or bool(idle)
        if remaining and not self._closed:
            self._sweeper = loop.call_later(self.idle_keepalive_s / 2, self._sweep)


def _timeout(
    loop: asyncio.AbstractEventLoop, timeout: float | None, deadline: float
) -> float | None:
    """The loop time by which a connect must be done (for ``asyncio.timeout``)."""
    when = loop.time() + timeout if timeout else _INF
    when = min(when, deadline)
    return None if when == _INF else when


def _timeout_reason(loop: asyncio.AbstractEventLoop, deadline: float) -> str:
    return "total_timeout" if loop.time() + 0.001 >= deadline else "connect_timeout"


def _serialize(
    method: str,
    host: _Host,
    path: str,
    body: bytes,
    headers: list[tuple[str, str]] | dict[str, str] | None,
) -> bytes:
    pairs: Iterable[tuple[str, str]]
    if headers is None:
        pairs = ()
    elif isinstance(headers, dict):
        pairs = headers.items()
    else:
        pairs = headers
    lines = [f"{name}: {value}\r\n" for name, value in pairs if name.lower() not in _SKIPPED]
    extra = "".join(lines)
    if extra.count("\n") != len(lines) or extra.count("\r") != len(lines):
        raise ValueError("header names and values must not contain CR or LF")
    head = (
        f"{method} {host.prefix}{path} HTTP/1.1\r\n{host.host_line}{extra}"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    return head + body if len(body) < 65536 else b"".join((head, body))
