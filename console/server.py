"""The web server's connection guard: what uvicorn does not bound by itself.

``up`` and the soak run uvicorn with ``--http console.server:GuardedHttpProtocol``
(``server_args()`` gives the flags). The protocol is uvicorn's httptools one
with four limits added per connection, below ASGI (so they hold for the
console, its API and the gateway alike):

* **Header timeout** (``CONSOLE_HEADER_TIMEOUT_SECONDS``): a request's head
  (request line and headers) must arrive whole within this many seconds of
  the connection opening, or of its first byte on a kept-alive connection;
  otherwise ``408`` and the connection is closed (a client sending half a
  header no longer holds a socket for minutes).
* **Body timeout** (``CONSOLE_BODY_TIMEOUT_SECONDS``): the body must arrive
  within this many seconds of the head; otherwise the connection is closed
  (``408`` when no answer has started; the application sees a disconnect).
* **Keep-alive** (``CONSOLE_KEEPALIVE_TIMEOUT_SECONDS``): an idle kept-alive
  connection is closed after this long (uvicorn's own timer, set here so the
  setting holds whatever the command line says).
* **Connections per address** (``CONSOLE_MAX_CONNECTIONS_PER_ADDRESS``, 0:
  no cap): a peer address with that many connections open in this process
  gets a ``503`` and its new connection closed at once, before anything is
  parsed, so one address cannot take every file descriptor. A peer that is
  one of ``GATEWAY_TRUSTED_PROXIES`` carries many clients: its connections
  are not counted by its own address; each request through it is counted,
  while it is in flight, against the client address it forwards
  (``console.kernel.ipnet.forwarded_client``), and a client over the cap gets the
  ``503`` (that connection closed) instead of shutting out everyone behind
  the proxy.
* **Connections in all** (``CONSOLE_MAX_CONNECTIONS``, 0: no cap): past this
  many open connections in this process any new one gets the ``503`` and is
  closed at once, whatever its address, so many addresses together cannot
  take every file descriptor either.

An answer sent before the request's body has arrived (a ``413``, a refusal
before the body is read) closes the connection once written: the rest of
the body is never read.

An answer's head goes out with its first body bytes in one write (one system
call, one TCP segment on loopback) when the application sends them in the
same turn of the event loop, as a whole answer does; otherwise at the end of
that turn, so a stream's head never waits for its first event
(``_HeadCork``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from console.kernel import ipnet


@dataclass(frozen=True)
class ServerLimits:
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 5.0
    max_per_address: int = 512
    max_connections: int = 4096
    trusted_proxies: ipnet.Networks = field(default_factory=ipnet.Networks)

    @classmethod
    def from_settings(cls) -> ServerLimits:
        return cls(
            header_timeout=settings.CONSOLE_HEADER_TIMEOUT_SECONDS,
            body_timeout=settings.CONSOLE_BODY_TIMEOUT_SECONDS,
            keepalive_timeout=settings.CONSOLE_KEEPALIVE_TIMEOUT_SECONDS,
            max_per_address=settings.CONSOLE_MAX_CONNECTIONS_PER_ADDRESS,
            max_connections=settings.CONSOLE_MAX_CONNECTIONS,
            trusted_proxies=ipnet.parse(settings.GATEWAY_TRUSTED_PROXIES or ()),
        )


def _plain(status: str, text: str, extra: str = "") -> bytes:
    body = text.encode() + b"\n"
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode() + body


TOO_MANY = _plain(
    "503 Service Unavailable", "Too many connections from your address.", "retry-after: 1\r\n"
)
FULL = _plain(
    "503 Service Unavailable", "The server has too many connections open.", "retry-after: 1\r\n"
)
HEADER_TIMEOUT = _plain("408 Request Timeout", "The request head did not arrive in time.")
BODY_TIMEOUT = _plain("408 Request Timeout", "The request body did not arrive in time.")

_IDLE, _HEAD, _BODY = 0, 1, 2


class _HeadCork:
    """A response's transport that holds its first write (uvicorn's cycle
    writes the status line and headers alone) until the next write, which
    carries it, or the end of the event loop's turn, or ``close``: whichever
    comes first. Everything else is the connection's own transport."""

    __slots__ = ("_flush_soon", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._flush_soon = False  # the first write not made yet: it is held

    def arm(self) -> None:
        """A new response: hold its first write."""
        self._flush_soon = True

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif self._flush_soon:
            self._flush_soon = False
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body timeouts, the
    keep-alive timeout from the settings, a per-address connection cap and an
    overall one."""

    limits: ServerLimits | None = None  # read from the settings on first use
    # This process's connections, by peer address (and, through a trusted
    # proxy, its requests in flight by forwarded client address); and in all.
    open_by_address: dict[str, int] = {}
    open_total = 0

    @classmethod
    def current_limits(cls) -> ServerLimits:
        if cls.limits is None:
            cls.limits = ServerLimits.from_settings()
        return cls.limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits = self.current_limits()
        # uvicorn declares an int; it only hands it to loop.call_later, which takes seconds
        self.timeout_keep_alive = limits.keepalive_timeout  # type: ignore[assignment]
        self._guard_timer: asyncio.TimerHandle | None = None
        self._phase = _IDLE
        self._address = self.client[0] if self.client else ""
        self._counted = False
        self._refused = False
        self._forwarded: str | None = None  # the in-flight request's counted client
        self._cork = _HeadCork(transport, self.loop)
        cls = type(self)
        if limits.max_connections and cls.open_total >= limits.max_connections:
            self._refuse(FULL)
            return
        self._via_proxy = bool(self._address) and self._address in limits.trusted_proxies
        table = self.open_by_address
        held = table.get(self._address, 0)
        # No peer address (a Unix socket): nothing to tell clients apart by. A
        # trusted proxy's requests are counted by the client they forward.
        if (
            limits.max_per_address
            and self._address
            and not self._via_proxy
            and held >= limits.max_per_address
        ):
            self._refuse(TOO_MANY)
            return
        if not self._via_proxy:
            table[self._address] = held + 1
        cls.open_total += 1
        self._counted = True
        self._start_head()

    def _refuse(self, answer: bytes) -> None:
        self._refused = True
        self.transport.write(answer)
        self.transport.close()

    def _count_forwarded(self) -> bool:
        """Through a trusted proxy: count this request against the client it
        forwards; False (answered 503, closed) when that client is over the cap."""
        limits = self.current_limits()
        forwarded = b",".join(v for n, v in self.headers if n == b"x-forwarded-for")
        client = ipnet.forwarded_client(
            self._address, forwarded.decode("latin-1") or None, limits.trusted_proxies
        )
        held = self.open_by_address.get(client, 0)
        if limits.max_per_address and held >= limits.max_per_address:
            self._refuse(TOO_MANY)
            return False
        self.open_by_address[client] = held + 1
        self._forwarded = client
        return True

    def _release_forwarded(self) -> None:
        client, self._forwarded = self._forwarded, None
        if client is not None:
            left = self.open_by_address.get(client, 1) - 1
            if left > 0:
                self.open_by_address[client] = left
            else:
                self.open_by_address.pop(client, None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_guard()
        self._release_forwarded()
        if self._counted:
            self._counted = False
            type(self).open_total -= 1
            if not self._via_proxy:
                left = self.open_by_address.get(self._address, 1) - 1
                if left > 0:
                    self.open_by_address[self._address] = left
                else:
                    self.open_by_address.pop(self._address, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._phase == _IDLE:
            self._start_head()
        super().data_received(data)

    # --- the parser's callbacks -------------------------------------------------

    def on_headers_complete(self) -> None:
        self._cancel_guard()
        if self._via_proxy:
            self._release_forwarded()  # a kept-alive connection's earlier request
            if not self._count_forwarded():
                return
        self._phase = _BODY
        self._arm(self.current_limits().body_timeout, self._body_timed_out)
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not before:  # else: an upgrade, not a response
            self._cork.arm()
            cycle.transport = self._cork  # type: ignore[assignment]  # a transport in all it uses

    def on_message_complete(self) -> None:
        self._cancel_guard()
        self._phase = _IDLE
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._release_forwarded()
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not self.transport.is_closing():
            # Answered before the body arrived (413, a refusal): never read the rest.
            self._cancel_guard()
            self.transport.close()
            return
        super().on_response_complete()

    # --- timers -------------------------------------------------------------------

    def _start_head(self) -> None:
        self._phase = _HEAD
        self._arm(self.current_limits().header_timeout, self._head_timed_out)

    def _arm(self, seconds: float, callback) -> None:
        self._cancel_guard()
        if seconds > 0:
            self._guard_timer = self.loop.call_later(seconds, callback)

    def _cancel_guard(self) -> None:
        timer = getattr(self, "_guard_timer", None)
        if timer is not None:
            timer.cancel()
            self._guard_timer = None

    def _head_timed_out(self) -> None:
        self._guard_timer = None
        if not self.transport.is_closing():
            self.transport.write(HEADER_TIMEOUT)
            self.transport.close()

    def _body_timed_out(self) -> None:
        self._guard_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            cycle.response_started = True  # the application's answer is not wanted any more
            self.transport.write(BODY_TIMEOUT)
        self.transport.close()


def server_args() -> list[str]:
    """uvicorn's command-line flags for these limits (the protocol, and its
    keep-alive timeout for uvicorn's own bookkeeping)."""
    limits = ServerLimits.from_settings()
    return [
        "--http",
        "console.server:GuardedHttpProtocol",
        "--timeout-keep-alive",
        str(max(1, round(limits.keepalive_timeout))),
    ]
