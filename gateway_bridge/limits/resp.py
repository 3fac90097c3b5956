"""A minimal pipelined Redis client for the limits store's hot path.

redis-py's asyncio client spends ~150 µs of Python per command on this
machine (a connection checked out of a pool per call, a parser per reply);
the gateway's whole budget is ~300 µs. This client keeps ONE connection,
writes each command as soon as it is issued and matches replies to callers
in order (Redis answers a connection's commands in order), so concurrent
calls share the socket and its syscalls. It speaks just what the limits
store needs: RESP2 replies, EVALSHA with a SCRIPT LOAD fallback, AUTH and
SELECT from the URL. ``rediss://`` and unix sockets are not supported: use
the redis-py client for those (``RedisLimitStore.from_url(..., client="redis-py")``).
``SentinelClient`` and ``ClusterClient`` put it on a Sentinel-managed primary
and on a Redis Cluster's primaries, with ``WAIT`` after the writes that
must survive a failover (``run_script(..., replicas=)``).

Deadlines: with ``timeout`` set, every command (and the connect with its
AUTH / SELECT) raises ``RedisTimeout`` (a ``TimeoutError``) when no reply came
within it, so a stalled Redis (paused, overloaded, a dead peer) costs a caller
at most ``timeout``, never a hang; the limits then answer 503
``limits_unavailable``. One timer handle per command, no extra task. The
command was written, so Redis may still run it later: its reply is matched
to the abandoned caller and dropped, keeping every later reply in order. A
connection that read nothing for ``STALE_AFTER_S`` while commands wait is
dropped, and the next command reconnects."""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol, cast
from urllib.parse import unquote, urlsplit

# A connection that answers nothing for this long while commands wait is dropped.
STALE_AFTER_S = 5.0


class RespError(Exception):
    """An error reply from Redis."""


class RedisTimeout(TimeoutError):
    """No reply within the client's deadline."""


class _Incomplete(Exception):
    pass


def encode(args: Sequence[bytes | str | int]) -> bytes:
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


def parse(buf: bytearray, pos: int) -> tuple[Any, int]:
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
        items: list[Any] = []
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
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[Any]] = deque()
        self.buf = bytearray()
        self.lost: Exception | None = None
        # Loop time of the last progress while commands wait (a reply read, or
        # the first command written to an idle connection).
        self.progress_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's

    def data_received(self, data: bytes) -> None:
        self.progress_at = asyncio.get_running_loop().time()
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

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionError("Redis closed the connection")
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_exception(ConnectionError(f"Redis connection lost: {self.lost}"))


class RespClient:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6379,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        self.host, self.port, self.db = host, port, db
        self.username, self.password = username, password
        self.timeout = timeout  # seconds per command; None: wait as long as it takes
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    @classmethod
    def from_url(cls, url: str, *, timeout: float | None = None) -> RespClient:
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
            timeout=timeout,
        )

    async def _connection(self) -> _Protocol:
        proto = self._proto
        if proto is not None and proto.lost is None:
            return proto
        if self.timeout is None:
            return await self._connect()
        try:
            async with asyncio.timeout(self.timeout):
                return await self._connect()
        except TimeoutError:
            raise RedisTimeout(
                f"no connection to Redis at {self.host}:{self.port} within {self.timeout:g} s"
            ) from None

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._proto is not None and self._proto.lost is None:
                return self._proto
            loop = asyncio.get_running_loop()
            _, proto = await loop.create_connection(_Protocol, self.host, self.port)
            # AUTH and SELECT are written before anyone else can write: every
            # later command on the connection follows them.
            setup: list[asyncio.Future[Any]] = []
            if self.password:
                auth = [self.username, self.password] if self.username else [self.password]
                setup.append(self._send(proto, ("AUTH", *auth)))
            if self.db:
                setup.append(self._send(proto, ("SELECT", self.db)))
            try:
                for fut in setup:
                    await fut
            except BaseException:
                if proto.transport is not None:
                    proto.transport.close()
                raise
            self._proto = proto
            return proto

    def _send(self, proto: _Protocol, args: Sequence[bytes | str | int]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not proto.pending:
            proto.progress_at = loop.time()
        proto.pending.append(fut)
        transport = proto.transport
        if transport is None:  # pragma: no cover - connected before it is returned
            raise ConnectionError("Redis connection not made")
        transport.write(encode(args))
        return fut

    def _expire(self, fut: asyncio.Future[Any], proto: _Protocol) -> None:
        """A command's deadline passed: its caller gets ``RedisTimeout`` (the
        reply, if it ever comes, is dropped in order); a connection that has
        read nothing for ``STALE_AFTER_S`` is dropped."""
        if fut.done():
            return
        fut.set_exception(RedisTimeout(f"Redis did not answer within {self.timeout:g} s"))
        stalled = fut.get_loop().time() - proto.progress_at
        if stalled >= STALE_AFTER_S and proto.transport is not None and proto.lost is None:
            proto.transport.abort()  # connection_lost fails the rest; the next command reconnects

    async def execute(self, *args: bytes | str | int) -> Any:
        proto = self._proto
        if proto is None or proto.lost is not None:
            proto = await self._connection()
        fut = self._send(proto, args)
        if self.timeout is None:
            return await fut
        timer = fut.get_loop().call_later(self.timeout, self._expire, fut, proto)
        try:
            return await fut
        finally:
            timer.cancel()

    async def pipeline(self, *commands: Sequence[bytes | str | int]) -> list[Any]:
        """``commands`` written back to back on ONE connection (so a ``WAIT``
        among them counts the writes before it); their replies, an exception
        in place of an error reply. A lost connection or a deadline raises."""
        proto = self._proto
        if proto is None or proto.lost is not None:
            proto = await self._connection()
        futs = [self._send(proto, c) for c in commands]
        timers: list[asyncio.TimerHandle] = []
        if self.timeout is not None:
            loop = asyncio.get_running_loop()
            timers = [loop.call_later(self.timeout, self._expire, f, proto) for f in futs]
        try:
            out: list[Any] = []
            failure: Exception | None = None
            for fut in futs:  # every reply awaited, so none is left unretrieved
                try:
                    out.append(await fut)
                except RespError as err:
                    out.append(err)
                except Exception as exc:
                    failure = failure or exc
                    out.append(exc)
            if failure is not None:
                raise failure
            return out
        finally:
            for t in timers:
                t.cancel()

    def register_script(self, lua: str) -> Script:
        return Script(self, lua)

    async def run_script(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[bytes | str | int],
        replicas: int = 0,
    ) -> Any:
        """EVALSHA (SCRIPT LOAD on NOSCRIPT), then, with ``replicas``, ``WAIT``
        on the same connection: ``NotReplicated`` when fewer replicas than that
        acknowledged the script's writes within ``WAIT_MS``."""
        call = ("EVALSHA", script.sha, len(keys), *keys, *args)
        # Within the command deadline, so a slow replica reads as NotReplicated.
        wait_ms = WAIT_MS if self.timeout is None else max(1, min(WAIT_MS, int(self.timeout * 800)))
        wait = ("WAIT", replicas, wait_ms)
        for attempt in (0, 1):
            out = await self.pipeline(call, wait) if replicas else await self.pipeline(call)
            if isinstance(out[0], RespError) and str(out[0]).startswith("NOSCRIPT") and not attempt:
                await self.execute("SCRIPT", "LOAD", script.lua)
                continue
            break
        for value in out:
            if isinstance(value, RespError):
                raise value
        if replicas and out[1] < replicas:
            raise NotReplicated(
                f"{out[1]} of {replicas} replicas acknowledged within {wait_ms} ms "
                f"at {self.host}:{self.port}"
            )
        return out[0]

    async def aclose(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None


# How long a write waits for its replicas to acknowledge it (``WAIT``), on
# Sentinel and Cluster.
WAIT_MS = 1000


class NotReplicated(ConnectionError):
    """A write no replica acknowledged in time: a failover now could lose it,
    so the caller treats the store as unavailable."""


class ScriptRunner(Protocol):
    """A client that runs a registered script (``RespClient``, and the
    Sentinel and Cluster clients of ``resp_ha``)."""

    async def run_script(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[bytes | str | int],
        replicas: int = 0,
    ) -> Any: ...


class Script:
    """A Lua script registered on a client: ``await script(keys=, args=)``."""

    def __init__(self, client: ScriptRunner, lua: str) -> None:
        self.client = client
        self.lua = lua
        self.sha = hashlib.sha1(lua.encode()).hexdigest()  # noqa: S324 - Redis's script id

    async def __call__(
        self,
        keys: Sequence[str] = (),
        args: Sequence[bytes | str | int] = (),
        replicas: int = 0,
    ) -> Any:
        return await self.client.run_script(self, keys, args, replicas)
