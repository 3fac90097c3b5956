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
  parsed, so one address cannot take every file descriptor. The peer is the
  TCP peer: behind a reverse proxy raise it (or cap at the proxy).

An answer sent before the request's body has arrived (a ``413``, a refusal
before the body is read) closes the connection once written: the rest of
the body is never read.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True)
class ServerLimits:
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 5.0
    max_per_address: int = 512

    @classmethod
    def from_settings(cls) -> ServerLimits:
        from django.conf import settings

        return cls(
            header_timeout=settings.CONSOLE_HEADER_TIMEOUT_SECONDS,
            body_timeout=settings.CONSOLE_BODY_TIMEOUT_SECONDS,
            keepalive_timeout=settings.CONSOLE_KEEPALIVE_TIMEOUT_SECONDS,
            max_per_address=settings.CONSOLE_MAX_CONNECTIONS_PER_ADDRESS,
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
HEADER_TIMEOUT = _plain("408 Request Timeout", "The request head did not arrive in time.")
BODY_TIMEOUT = _plain("408 Request Timeout", "The request body did not arrive in time.")

_IDLE, _HEAD, _BODY = 0, 1, 2


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body timeouts, the
    keep-alive timeout from the settings and a per-address connection cap."""

    limits: ServerLimits | None = None  # read from the settings on first use
    open_by_address: dict[str, int] = {}  # this process's connections, by peer address

    @classmethod
    def current_limits(cls) -> ServerLimits:
        if cls.limits is None:
            cls.limits = ServerLimits.from_settings()
        return cls.limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits = self.current_limits()
        self.timeout_keep_alive = limits.keepalive_timeout
        self._guard_timer: asyncio.TimerHandle | None = None
        self._phase = _IDLE
        self._address = self.client[0] if self.client else ""
        self._counted = False
        self._refused = False
        table = self.open_by_address
        held = table.get(self._address, 0)
        # No peer address (a Unix socket): nothing to tell clients apart by.
        if limits.max_per_address and self._address and held >= limits.max_per_address:
            self._refused = True
            transport.write(TOO_MANY)
            transport.close()
            return
        table[self._address] = held + 1
        self._counted = True
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_guard()
        if self._counted:
            self._counted = False
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
        self._phase = _BODY
        self._arm(self.current_limits().body_timeout, self._body_timed_out)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._cancel_guard()
        self._phase = _IDLE
        super().on_message_complete()

    def on_response_complete(self) -> None:
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
