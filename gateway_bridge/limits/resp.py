"""A minimal pipelined Redis client for the limits store's hot path.

redis-py's asyncio client spends ~150 µs of Python per command on this
machine (a connection checked out of a pool per call, a parser per reply);
the gateway's whole budget is ~300 µs. This client keeps ONE connection,
writes each command as soon as it is issued and matches replies to callers
in order (Redis answers a connection's commands in order), so concurrent
calls share the socket and its syscalls. It speaks just what the limits
store needs: RESP2 replies, EVALSHA with a SCRIPT LOAD fallback, AUTH and
SELECT from the URL. ``rediss://`` and unix sockets are not supported: use
the redis-py client for those (``RedisLimitStore.from_url(..., client="redis-py")``)."""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from urllib.parse import unquote, urlsplit


class RespError(Exception):
    """An error reply from Redis."""


class _Incomplete(Exception):
    pass


def encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(int(a)).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def parse(buf: bytearray, pos: int):
    """One reply from ``buf`` at ``pos``: ``(value, next_pos)``; raises
    ``_Incomplete`` when the reply is not all there yet."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, line = buf[pos], bytes(buf[pos + 1 : end])
    pos = end + 2
    if kind == 58:  # ':'
        return int(line), pos
    if kind == 36:  # '$'
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise _Incomplete
        return bytes(buf[pos : pos + n]), pos + n + 2
    if kind == 42:  # '*'
        n = int(line)
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            item, pos = parse(buf, pos)
            items.append(item)
        return items, pos
    if kind == 43:  # '+'
        return line.decode(), pos
    if kind == 45:  # '-'
        return RespError(line.decode()), pos
    raise RespError(f"unexpected reply type {chr(kind)!r}")


class _Protocol(asyncio.Protocol):
    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future] = deque()
        self.buf = bytearray()
        self.lost: Exception | None = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while pos < len(buf):
            try:
                value, pos = parse(buf, pos)
            except _Incomplete:
                break
            fut = self.pending.popleft()
            if fut.done():
                continue
            if isinstance(value, RespError):
                fut.set_exception(value)
            else:
                fut.set_result(value)
        del buf[:pos]

    def connection_lost(self, exc) -> None:
        self.lost = exc or ConnectionError("Redis closed the connection")
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_exception(ConnectionError(f"Redis connection lost: {self.lost}"))


class RespClient:
    def __init__(
        self, host: str = "127.0.0.1", port: int = 6379, db: int = 0, username=None, password=None
    ):
        self.host, self.port, self.db = host, port, db
        self.username, self.password = username, password
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    @classmethod
    def from_url(cls, url: str) -> RespClient:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"RespClient speaks redis:// only, not {parts.scheme}://")
        db = int(parts.path.strip("/") or 0)
        return cls(
            parts.hostname or "127.0.0.1",
            parts.port or 6379,
            db,
            unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password else None,
        )

    async def _connection(self) -> _Protocol:
        proto = self._proto
        if proto is not None and proto.lost is None:
            return proto
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._proto is not None and self._proto.lost is None:
                return self._proto
            loop = asyncio.get_running_loop()
            _, proto = await loop.create_connection(_Protocol, self.host, self.port)
            # AUTH and SELECT are written before anyone else can write: every
            # later command on the connection follows them.
            setup = []
            if self.password:
                auth = [self.username, self.password] if self.username else [self.password]
                setup.append(self._send(proto, ("AUTH", *auth)))
            if self.db:
                setup.append(self._send(proto, ("SELECT", self.db)))
            try:
                for fut in setup:
                    await fut
            except BaseException:
                proto.transport.close()
                raise
            self._proto = proto
            return proto

    @staticmethod
    def _send(proto: _Protocol, args) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        proto.pending.append(fut)
        proto.transport.write(encode(args))
        return fut

    async def execute(self, *args):
        proto = self._proto
        if proto is None or proto.lost is not None:
            proto = await self._connection()
        return await self._send(proto, args)

    def register_script(self, lua: str) -> _Script:
        return _Script(self, lua)

    async def aclose(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None


class _Script:
    def __init__(self, client: RespClient, lua: str):
        self.client = client
        self.lua = lua
        self.sha = hashlib.sha1(lua.encode()).hexdigest()  # noqa: S324 - Redis's script id

    async def __call__(self, keys=(), args=()):
        try:
            return await self.client.execute("EVALSHA", self.sha, len(keys), *keys, *args)
        except RespError as err:
            if not str(err).startswith("NOSCRIPT"):
                raise
        await self.client.execute("SCRIPT", "LOAD", self.lua)
        return await self.client.execute("EVALSHA", self.sha, len(keys), *keys, *args)
