"""A small HTTP/1.1 server on asyncio.Protocol and httptools.

Keep-alive, pipelined requests answered in order, Content-Length request
bodies (and chunked ones, which httptools decodes), Content-Length responses
and chunked responses for server-sent events. aiohttp's server costs several
times more per request, which matters for the throughput target.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from urllib.parse import unquote

import httptools

log = logging.getLogger("tooling.simulator")

MAX_BODY_BYTES = 32 * 1024 * 1024
# Keep-alive connections with nothing in flight are closed after this long.
IDLE_TIMEOUT_S = 120.0
SERVER_HEADER = b"server: inference-node-sim\r\n"
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


class Request:
    __slots__ = ("body", "headers", "keep_alive", "method", "path", "query")

    def __init__(self, method, path, query, headers, body, keep_alive):
        self.method: str = method
        self.path: str = path
        self.query: str = query
        self.headers: dict[str, str] = headers
        self.body: bytes = body
        self.keep_alive: bool = keep_alive


class Response:
    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(self, status=200, body=b"", content_type="application/json", headers=()):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers


Handler = Callable[[Request, "HttpConnection"], Awaitable[Response | None]]

_INTERNAL_ERROR = Response(
    500,
    b'{"error": {"message": "Internal server error.", "type": "server_error", '
    b'"param": null, "code": "internal_error"}}',
)


def _head(status: int, content_type: str, headers, keep_alive: bool) -> list[bytes]:
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown")), SERVER_HEADER]
    if content_type:
        parts.append(b"content-type: " + content_type.encode() + b"\r\n")
    for name, value in headers:
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    return parts


class HttpConnection(asyncio.Protocol):
    """One client connection; requests are handled one at a time, in order."""

    def __init__(self, handler: Handler, connections: set):
        self._handler = handler
        self._connections = connections
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._task: asyncio.Task | None = None
        self._pending: deque[Request] = deque()
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._writable: asyncio.Future | None = None
        self._streaming = False
        self.last_active = 0.0

    @property
    def idle(self) -> bool:
        return self._task is None

    # asyncio.Protocol
    @property
    def wire(self) -> asyncio.Transport:
        """The transport (every callback but ``connection_made`` comes after it is set)."""
        if self.transport is None:
            raise RuntimeError("the connection is not made yet")
        return self.transport

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.last_active = asyncio.get_running_loop().time()
        self._connections.add(self)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        self._pending.clear()
        if self._writable is not None and not self._writable.done():
            self._writable.set_exception(ConnectionResetError("client went away"))

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.last_active = asyncio.get_running_loop().time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(400, b"Protocol upgrades are not supported.")
        except httptools.HttpParserError:
            self._reject(400, b"Malformed HTTP request.")

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self._headers.get("expect", "").lower() == "100-continue":
            self.wire.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > MAX_BODY_BYTES:
            self._reject(413, b"The request body is too large.")
            raise httptools.HttpParserError("body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.closed:
            return
        url = httptools.parse_url(self._url)
        request = Request(
            self._parser.get_method().decode("latin-1"),
            unquote(url.path.decode("latin-1")),
            (url.query or b"").decode("latin-1"),
            self._headers,
            b"".join(self._body),
            self._parser.should_keep_alive(),
        )
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve(request))
        else:
            self._pending.append(request)
            if len(self._pending) > 64:
                self.wire.pause_reading()

    # serving
    async def _serve(self, request: Request) -> None:
        while True:
            try:
                response = await self._handler(request, self)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("unhandled error serving %s %s", request.method, request.path)
                if self._streaming:
                    self.abort()
                    return
                response = _INTERNAL_ERROR
            if self.closed:
                return
            if response is not None:
                self.send(response, request.keep_alive)
            if not request.keep_alive:
                self.wire.close()
                self.closed = True
                return
            if not self._pending:
                self._task = None
                self.last_active = asyncio.get_running_loop().time()
                return
            request = self._pending.popleft()
            if len(self._pending) < 16:
                self.wire.resume_reading()

    def send(self, response: Response, keep_alive: bool = True) -> None:
        parts = _head(response.status, response.content_type, response.headers, keep_alive)
        parts.append(b"content-length: %d\r\n\r\n" % len(response.body))
        parts.append(response.body)
        self.wire.write(b"".join(parts))

    def _reject(self, status: int, message: bytes) -> None:
        if self.closed:
            return
        body = (
            b'{"error": {"message": "' + message + b'", "type": "invalid_request_error", '
            b'"param": null, "code": null}}'
        )
        self.send(Response(status, body), keep_alive=False)
        self.wire.close()
        self.closed = True

    # streaming API used by handlers that return None
    def start_stream(self, content_type: str, headers=()) -> None:
        parts = _head(200, content_type, headers, True)
        parts.append(b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n")
        self.wire.write(b"".join(parts))
        self._streaming = True

    async def write_chunk(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("client went away")
        self.wire.write(b"%x\r\n%s\r\n" % (len(data), data))
        if self._writable is not None and not self._writable.done():
            await self._writable

    def end_stream(self) -> None:
        self._streaming = False
        if not self.closed:
            self.wire.write(b"0\r\n\r\n")

    def abort(self) -> None:
        """Drop the connection at once, mid-response (fault injection)."""
        self._streaming = False
        if not self.closed:
            self.closed = True
            self.wire.abort()


async def start_server(handler: Handler, host: str, port: int):
    """Listen; returns (asyncio.Server, the set of open connections)."""
    connections: set[HttpConnection] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: HttpConnection(handler, connections), host, port, backlog=1024, reuse_address=True
    )
    return server, connections


async def sweep_idle(connections: set[HttpConnection], timeout: float = IDLE_TIMEOUT_S) -> None:
    """Close keep-alive connections idle for longer than ``timeout`` (runs until cancelled)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(min(timeout, 15.0))
        cutoff = loop.time() - timeout
        for connection in list(connections):
            if connection.idle and connection.last_active < cutoff and connection.transport:
                connection.transport.close()


def close_connections(connections: set[HttpConnection]) -> None:
    for connection in list(connections):
        if connection.transport is not None:
            connection.transport.close()
