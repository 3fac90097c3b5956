"""Reading a node's answer: the whole body, or server-sent events one by one.

``UpstreamResponse`` holds the connection until the body has been read to
its end (then it goes back to the pool) or the reader gives up (then it is
closed, so the node sees the disconnect and stops generating).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType

from gateway_bridge.upstreams.connection import _Connection
from gateway_bridge.upstreams.errors import UpstreamError, _public

# How long sse() waits after [DONE] for the end of the body (see _settle).
SETTLE_S = 0.25


class UpstreamResponse:
    """The head of a node's answer; read the body with ``read()`` or ``sse()``."""

    __slots__ = ("_conn", "event_buffered", "headers", "reused", "status")

    def __init__(self, conn: _Connection, reused: bool):
        self._conn: _Connection | None = conn
        self.status: int = conn.status
        self.headers: dict[str, str] = conn.headers
        self.reused = reused  # whether the connection came from the pool
        # While sse() is suspended at an event: whether the next event with data has
        # already come in, so the next __anext__ returns without waiting. A relay may
        # hold what it has to write and send the two (or more) in one write.
        self.event_buffered = False

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
                if conn.chunks:
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

    async def sse(self) -> AsyncIterator[bytes]:
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
                if conn.chunks:
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
                        payload: bytes | None
                        if block[:6] == b"data: " and b"\n" not in block:
                            payload = block[6:]
                        else:
                            payload = _event_data(block)
                            if payload is None:
                                continue
                        if payload == b"[DONE]" and not conn.complete:
                            await _settle(conn)
                        # (Not when the next is a [DONE] that may wait in _settle.)
                        self.event_buffered = _data_follows(buffer, start) and (
                            conn.complete or not buffer.startswith(b"data: [DONE]", start)
                        )
                        yield payload
                        self.event_buffered = False
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

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the body as it arrives, chunk by chunk, untouched (native
        pass-through relays them as they are). Releases the connection at the
        end; closes it on an error or if iteration stops early."""
        conn = self._conn
        if conn is None:
            raise UpstreamError("closed", "the response was already released")
        try:
            while True:
                if self._conn is not conn:
                    raise self._gone(conn)
                if conn.chunks:
                    yield conn.take()
                    continue
                if conn.complete:
                    break
                if conn.error is not None:
                    raise _public(conn.error)
                await conn.wait()
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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.release()
        else:
            self.abort()


async def _settle(conn: _Connection) -> None:
    """After ``[DONE]``: give the end of the chunked body a moment to come in, so that
    a release() right after the last event keeps the connection."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_S):
            while not conn.complete and conn.error is None and not conn.chunks:
                await conn.wait()


def _data_follows(buffer: bytes, start: int) -> bool:
    """Whether ``buffer[start:]`` begins with a complete event block that has data."""
    end = buffer.find(b"\n\n", start)
    if end < 0:
        return False
    return buffer.startswith(b"data:", start) or buffer.find(b"\ndata:", start, end) >= 0


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
