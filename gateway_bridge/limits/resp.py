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
from typing import Any
from urllib.parse import unquote, urlsplit

# A connection that answers nothing for this long while commands wait is dropped.
STALE_AFTER_S = 5.0


class RespError(Exception):
    """An error reply from Redis."""


class RedisTimeout(TimeoutError):
    """No reply within the client's deadline."""


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
        # Loop time of the last progress while commands wait (a reply read, or
        # the first command written to an idle connection).
        self.progress_at = 0.0

    def connection_made(self, transport):
        self.transport = transport

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

    def connection_lost(self, exc) -> None:
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
        username=None,
        password=None,
        *,
        timeout: float | None = None,
    ):
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

    def _send(self, proto: _Protocol, args) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not proto.pending:
            proto.progress_at = loop.time()
        proto.pending.append(fut)
        proto.transport.write(encode(args))
        return fut

    def _expire(self, fut: asyncio.Future, proto: _Protocol) -> None:
        """A command's deadline passed: its caller gets ``RedisTimeout`` (the
        reply, if it ever comes, is dropped in order); a connection that has
        read nothing for ``STALE_AFTER_S`` is dropped."""
        if fut.done():
            return
        fut.set_exception(RedisTimeout(f"Redis did not answer within {self.timeout:g} s"))
        stalled = fut.get_loop().time() - proto.progress_at
        if stalled >= STALE_AFTER_S and proto.transport is not None and proto.lost is None:
            proto.transport.abort()  # connection_lost fails the rest; the next command reconnects

    async def execute(self, *args):
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

    async def pipeline(self, *commands) -> list[Any]:
        """``commands`` written back to back on ONE connection (so a ``WAIT``
        among them counts the writes before it); their replies, an exception
        in place of an error reply. A lost connection or a deadline raises."""
        proto = self._proto
        if proto is None or proto.lost is not None:
            proto = await self._connection()
        futs = [self._send(proto, c) for c in commands]
        timers = []
        if self.timeout is not None:
            loop = asyncio.get_running_loop()
            timers = [loop.call_later(self.timeout, self._expire, f, proto) for f in futs]
        try:
            out, failure = [], None
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

    def register_script(self, lua: str) -> _Script:
        return _Script(self, lua)

    async def run_script(self, script: _Script, keys, args, replicas: int = 0):
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


class _Script:
    def __init__(self, client, lua: str):
        self.client = client
        self.lua = lua
        self.sha = hashlib.sha1(lua.encode()).hexdigest()  # noqa: S324 - Redis's script id

    async def __call__(self, keys=(), args=(), replicas: int = 0):
        return await self.client.run_script(self, keys, args, replicas)


def _failed_over(exc: BaseException) -> bool:
    """An error after which the primary must be looked up again."""
    if isinstance(exc, RespError):
        return str(exc).startswith(("READONLY", "MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN"))
    return isinstance(exc, (ConnectionError, OSError, TimeoutError))


class SentinelClient:
    """The pipelined client on a Sentinel-managed primary: asks the sentinels
    where the primary is, keeps one ``RespClient`` to it, and looks again
    after a connection error, a deadline or a ``READONLY`` reply (a failover).
    The failed command raises (the gateway answers 503); it is never retried,
    since Redis may have run it."""

    def __init__(
        self, sentinels, service: str, *, db=0, username=None, password=None, timeout=None
    ):
        self.sentinels = list(sentinels)
        self.service = service
        self.db, self.username, self.password = db, username, password
        self.timeout = timeout
        self._client: RespClient | None = None
        self._finding: asyncio.Lock | None = None

    async def _primary(self) -> RespClient:
        if self._client is not None:
            return self._client
        # One search at a time: the calls that meet a cold or failed-over client
        # wait for the one asking the sentinels, not each ask (and connect) anew.
        if self._finding is None:
            self._finding = asyncio.Lock()
        async with self._finding:
            if self._client is not None:
                return self._client
            return await self._find_primary()

    async def _find_primary(self) -> RespClient:
        errors = []
        for host, port in self.sentinels:
            probe = RespClient(host, port, timeout=self.timeout or 2.0)
            try:
                addr = await probe.execute("SENTINEL", "get-master-addr-by-name", self.service)
            except (OSError, TimeoutError, RespError) as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            finally:
                await probe.aclose()
            if addr:
                self._client = RespClient(
                    addr[0].decode(),
                    int(addr[1]),
                    self.db,
                    self.username,
                    self.password,
                    timeout=self.timeout,
                )
                return self._client
            errors.append(f"{host}:{port}: no primary named {self.service!r}")
        raise ConnectionError(f"no Sentinel knows the primary: {'; '.join(errors)}")

    async def _forget(self, client: RespClient) -> None:
        if self._client is client:
            self._client = None
        await client.aclose()

    async def execute(self, *args):
        client = await self._primary()
        try:
            return await client.execute(*args)
        except BaseException as exc:
            if _failed_over(exc):
                await self._forget(client)
            raise

    def register_script(self, lua: str) -> _Script:
        return _Script(self, lua)

    async def run_script(self, script: _Script, keys, args, replicas: int = 0):
        client = await self._primary()
        try:
            return await client.run_script(script, keys, args, replicas)
        except NotReplicated:
            raise
        except BaseException as exc:
            if _failed_over(exc):
                await self._forget(client)
            raise

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        self._client = None


class ClusterClient:
    """The pipelined client on a Redis Cluster: the slot map from ``CLUSTER
    SLOTS``, one ``RespClient`` per primary, each script sent to the node of
    its first key's slot (every key of one call shares a hash tag, so a
    slot). After ``MOVED`` (the command did not run) the map is read again
    and the command retried once; after a connection error or a deadline the
    map is read again on the next call and the error raised (Redis may have
    run the command)."""

    def __init__(self, nodes, *, username=None, password=None, timeout=None):
        self.seeds = list(nodes)
        self.username, self.password = username, password
        self.timeout = timeout
        self._slots: list[tuple[str, int]] | None = None
        self._nodes: dict[tuple[str, int], RespClient] = {}

    def _node(self, addr: tuple[str, int]) -> RespClient:
        client = self._nodes.get(addr)
        if client is None:
            client = self._nodes[addr] = RespClient(
                addr[0], addr[1], 0, self.username, self.password, timeout=self.timeout
            )
        return client

    async def _refresh(self) -> list[tuple[str, int]]:
        errors = []
        known = [*self._nodes, *self.seeds]
        for addr in dict.fromkeys(known):
            try:
                ranges = await self._node(addr).execute("CLUSTER", "SLOTS")
            except (OSError, TimeoutError, RespError) as exc:
                errors.append(f"{addr[0]}:{addr[1]}: {exc}")
                await self._drop(addr)
                continue
            slots: list[Any] = [None] * 16384
            for start, end, primary, *_ in ranges:
                where = (primary[0].decode() or addr[0], int(primary[1]))
                for slot in range(start, end + 1):
                    slots[slot] = where
            self._slots = slots
            return slots
        raise ConnectionError(f"no cluster node answered: {'; '.join(errors)}")

    async def _drop(self, addr) -> None:
        client = self._nodes.pop(addr, None)
        if client is not None:
            await client.aclose()

    async def _for_key(self, key) -> RespClient:
        from redis.crc import key_slot

        slots = self._slots or await self._refresh()
        addr = slots[key_slot(key.encode() if isinstance(key, str) else key)]
        if addr is None:
            raise ConnectionError("the cluster serves no node for this key's slot")
        return self._node(addr)

    async def _on(self, key, call):
        for attempt in (0, 1):
            client = await self._for_key(key)
            try:
                return await call(client)
            except NotReplicated:
                raise
            except BaseException as exc:
                if not _failed_over(exc):
                    raise
                self._slots = None
                if isinstance(exc, RespError) and str(exc).startswith("MOVED") and not attempt:
                    continue
                if not isinstance(exc, RespError):
                    await self._drop((client.host, client.port))
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def execute(self, *args):
        key = args[1] if len(args) > 1 else ""
        return await self._on(key, lambda c: c.execute(*args))

    def register_script(self, lua: str) -> _Script:
        return _Script(self, lua)

    async def run_script(self, script: _Script, keys, args, replicas: int = 0):
        return await self._on(keys[0], lambda c: c.run_script(script, keys, args, replicas))

    async def aclose(self) -> None:
        for addr in list(self._nodes):
            await self._drop(addr)
