"""The pipelined Redis client (``resp.RespClient``) on a Sentinel-managed
primary (``SentinelClient``) and on a Redis Cluster's primaries
(``ClusterClient``): where the primary is, and what a failover means for a
command in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, cast

from gateway_bridge.limits.resp import NotReplicated, RespClient, RespError, Script

# A command's argument as it goes on the wire.
Arg = bytes | str | int


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
        self,
        sentinels: Iterable[tuple[str, int]],
        service: str,
        *,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        timeout: float | None = None,
    ) -> None:
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
        errors: list[str] = []
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

    async def execute(self, *args: Arg) -> Any:
        client = await self._primary()
        try:
            return await client.execute(*args)
        except BaseException as exc:
            if _failed_over(exc):
                await self._forget(client)
            raise

    def register_script(self, lua: str) -> Script:
        return Script(self, lua)

    async def run_script(
        self, script: Script, keys: Sequence[str], args: Sequence[Arg], replicas: int = 0
    ) -> Any:
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

    def __init__(
        self,
        nodes: Iterable[tuple[str, int]],
        *,
        username: str | None = None,
        password: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.seeds = list(nodes)
        self.username, self.password = username, password
        self.timeout = timeout
        self._slots: list[tuple[str, int] | None] | None = None
        self._nodes: dict[tuple[str, int], RespClient] = {}

    def _node(self, addr: tuple[str, int]) -> RespClient:
        client = self._nodes.get(addr)
        if client is None:
            client = self._nodes[addr] = RespClient(
                addr[0], addr[1], 0, self.username, self.password, timeout=self.timeout
            )
        return client

    async def _refresh(self) -> list[tuple[str, int] | None]:
        errors: list[str] = []
        known = [*self._nodes, *self.seeds]
        for addr in dict.fromkeys(known):
            try:
                ranges = await self._node(addr).execute("CLUSTER", "SLOTS")
            except (OSError, TimeoutError, RespError) as exc:
                errors.append(f"{addr[0]}:{addr[1]}: {exc}")
                await self._drop(addr)
                continue
            slots: list[tuple[str, int] | None] = [None] * 16384
            for start, end, primary, *_ in ranges:
                where = (primary[0].decode() or addr[0], int(primary[1]))
                for slot in range(start, end + 1):
                    slots[slot] = where
            self._slots = slots
            return slots
        raise ConnectionError(f"no cluster node answered: {'; '.join(errors)}")

    async def _drop(self, addr: tuple[str, int]) -> None:
        client = self._nodes.pop(addr, None)
        if client is not None:
            await client.aclose()

    async def _for_key(self, key: str | bytes) -> RespClient:
        # deferred: redis-py is costly to import, and only a cluster needs its slot hash
        from redis.crc import key_slot

        slots = self._slots or await self._refresh()
        addr = slots[key_slot(key.encode() if isinstance(key, str) else key)]
        if addr is None:
            raise ConnectionError("the cluster serves no node for this key's slot")
        return self._node(addr)

    async def _on(self, key: str | bytes, call: Callable[[RespClient], Awaitable[Any]]) -> Any:
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

    async def execute(self, *args: Arg) -> Any:
        key = args[1] if len(args) > 1 else ""
        # A command's key is a string or bytes (an int one fails in the slot hash).
        return await self._on(cast(str | bytes, key), lambda c: c.execute(*args))

    def register_script(self, lua: str) -> Script:
        return Script(self, lua)

    async def run_script(
        self, script: Script, keys: Sequence[str], args: Sequence[Arg], replicas: int = 0
    ) -> Any:
        return await self._on(keys[0], lambda c: c.run_script(script, keys, args, replicas))

    async def aclose(self) -> None:
        for addr in list(self._nodes):
            await self._drop(addr)
