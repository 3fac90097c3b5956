"""What the hot path reads, kept in process: keys, the price book and
catalogue, the routing snapshot. Everything here is read without I/O; loads
run on a small thread pool (the Django ORM is synchronous) and the event
loop never waits on the database except for the first sight of a key.

Invalidation: ``gateway_bridge.notify`` messages (this process directly;
other processes over Redis pub/sub, listened to here) drop cached keys and
refresh prices and nodes; a key is also re-read after
``GATEWAY_KEY_CACHE_SECONDS`` whatever happens, and its expiry is checked on
every call.

Unusable keys (unknown, a wrong secret, revoked, expired, a suspended
account) are remembered apart, by keyed hash, in a bounded expiring
``NegativeCache`` (``GATEWAY_NEGATIVE_KEY_CACHE_SECONDS`` / ``_ENTRIES``):
a garbage key reaches the database once, then costs a hash and a dict
look-up. A change of a key, sub-account or organization drops the negative
entries of exactly the hashes of the keys it concerns (one query on a
gateway thread); until that is done the negative entries are not trusted,
so a key made usable again (an account resumed, an expiry moved) works at
once. A new key has a new hash: no negative entry can refuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.db import close_old_connections

from accounts.facade import keyed_hash
from gateway_bridge import notify
from gateway_bridge.negative_cache import NegativeCache
from gateway_bridge.protocols.base import OVERLOADED, GatewayError
from gateway_bridge.state_db import (
    KEYS_OF,
    CatalogInfo,
    KeyEntry,
    db_done,
    key_hashes,
    load_catalog,
    load_key,
    load_nodes,
)
from inference_node.facade import credential_refused

if TYPE_CHECKING:
    from gateway_bridge.config import KeyCacheConfig
    from gateway_bridge.routing import NodeSnapshot
    from usage.facade import PriceBook, PriceRow

__all__ = ["CatalogInfo", "GatewayState", "KeyEntry"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

PRICE_REFRESH_SECONDS = 5.0
NODE_REFRESH_SECONDS = 1.0
MAX_CACHED_KEYS = 100_000
# Presented keys whose keyed hash is remembered (the HMAC is a fixed cost per
# call otherwise); the memo only maps a secret to its hash, never to a verdict.
MAX_DIGESTS = 4096


class GatewayState:
    def __init__(self, key_cache: KeyCacheConfig) -> None:
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gateway-db")
        self.key_ttl = key_cache.seconds
        # keyed hash of the presented key -> (KeyEntry, loaded_at monotonic)
        self._keys: dict[str, tuple[KeyEntry, float]] = {}
        # keyed hashes of presented keys that are not usable (see the module doc)
        self.negative = NegativeCache(key_cache.negative_entries, key_cache.negative_seconds)
        # Key, sub-account and organization changes heard (bumped at once, on any
        # thread) and those whose negative entries are dropped already: the
        # negative cache is trusted only while the two agree.
        self._changes_heard = 0
        self._changes_settled = 0
        self._heard_lock = threading.Lock()
        self._settling: asyncio.Lock | None = None
        self._settle_tasks: set[asyncio.Task[None]] = set()
        # Presented keys refused from the negative cache, without the database (/metrics).
        self.negative_hits = 0
        self._loading: dict[str, asyncio.Future[KeyEntry | None]] = {}
        # presented key -> its keyed hash (bounded; see digest())
        self._digests: dict[str, str] = {}
        self._pepper: object = None
        # Key, sub-account and organization change messages heard (for /metrics).
        self.key_invalidations = 0
        self.last_key_invalidation = 0.0  # POSIX seconds
        # ("k" | "s" | "o", id) of changes heard on another thread and not yet
        # applied by the event loop: a cached entry they name is not trusted. A
        # set's add and membership test are atomic, so the listener thread marks
        # a key revoked at once, however busy the loop is.
        self._tombstones: set[tuple[str, int]] = set()
        self._listener: threading.Thread | None = None
        self._listener_stop = threading.Event()
        self.price_book: PriceBook | None = None
        self.catalog: dict[str, CatalogInfo] = {}
        self.nodes: NodeSnapshot | None = None
        self._prices_at = 0.0
        self._nodes_at = 0.0
        self._prices_dirty = True
        self._nodes_dirty = True
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe: Callable[[], None] | None = None
        # Called as ``hook(kind, rest)`` for every message heard (the gateway's).
        self.on_message_hooks: list[Callable[[str, str], None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle --------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._unsubscribe = notify.subscribe(self._threadsafe_message)
        await self.refresh(force=True)
        self._tasks.append(asyncio.create_task(self._refresher(), name="gateway-refresh"))
        if settings.PUBSUB_REDIS_URL:
            self._listener_stop.clear()
            self._listener = threading.Thread(
                target=self._redis_listener, name="gateway-pubsub", daemon=True
            )
            self._listener.start()

    async def close(self) -> None:
        if self._unsubscribe:
            self._unsubscribe()
        self._listener_stop.set()
        for task in [*self._tasks, *self._settle_tasks]:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        # Wait for a load already running (a refresh that began just before): it
        # must not still be reading the database once the gateway is gone.
        await asyncio.to_thread(self.executor.shutdown, wait=True, cancel_futures=True)

    async def run_db(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # --- keys -------------------------------------------------------------

    def digest(self, raw: str) -> str:
        """``keyed_hash(raw)``, remembered for the last few thousand presented
        keys. Only the hash is remembered: whether the key is usable is the
        key cache's answer (``key``), checked on every call as before, so a
        revoked key is refused at once. Never logged or exposed."""
        digests = self._digests
        digest = digests.get(raw)
        if digest is not None and self._pepper is settings.API_KEY_PEPPER:
            return digest
        if self._pepper is not settings.API_KEY_PEPPER:
            digests.clear()
            self._pepper = settings.API_KEY_PEPPER
        digest = keyed_hash(raw)
        if len(digests) >= MAX_DIGESTS:
            digests.clear()
        digests[raw] = digest
        return digest

    async def key(self, raw: str) -> KeyEntry | None:
        """The cached entry for a presented key; ``None`` if it is not usable."""
        digest = self.digest(raw)
        now = time.monotonic()
        hit = self._keys.get(digest)
        if hit is not None:
            entry, loaded = hit
            if now - loaded < self.key_ttl and not (self._tombstones and self._buried(entry)):
                return entry
            if self._tombstones and self._buried(entry):
                hit = None  # changed: neither served nor kept for an outage
        elif self._changes_settled == self._changes_heard and digest in self.negative:
            self.negative_hits += 1
            return None
        pending = self._loading.get(digest)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[digest] = pending
            heard = self._changes_heard
            try:
                loaded_entry = await self.run_db(load_key, raw)
            except Exception as exc:
                self._loading.pop(digest, None)
                if hit is not None:
                    # The database is unreachable (a restart, a failover): the key was
                    # valid a moment ago and a revocation still arrives by pub/sub, so
                    # keep serving it rather than fail every call of every client.
                    logger.warning("gateway: key reload failed (%s); using the cached entry", exc)
                    pending.set_result(hit[0])
                    return hit[0]
                logger.warning("gateway: key lookup failed: %s", exc)
                error = GatewayError(
                    OVERLOADED,
                    "auth_unavailable",
                    "API keys cannot be checked right now; retry in a moment.",
                    headers=[("retry-after", "1")],
                )
                pending.set_exception(error)
                pending.exception()  # mark retrieved
                raise error from None
            except BaseException as exc:
                self._loading.pop(digest, None)
                pending.set_exception(exc)
                pending.exception()  # mark retrieved
                raise
            if loaded_entry is None:
                self._keys.pop(digest, None)
                if heard == self._changes_heard:  # no change heard while it was read
                    self.negative.add(digest)
            else:
                if len(self._keys) >= MAX_CACHED_KEYS:
                    self._keys.clear()
                self._keys[digest] = (loaded_entry, time.monotonic())
            self._loading.pop(digest, None)
            pending.set_result(loaded_entry)
            return loaded_entry
        return await asyncio.shield(pending)

    def drop_keys(
        self, *, key_id: int | None = None, sub_id: int | None = None, org_id: int | None = None
    ) -> int:
        doomed = [
            digest
            for digest, (entry, _) in self._keys.items()
            if (key_id is not None and entry.auth.key_id == key_id)
            or (sub_id is not None and entry.auth.sub_account_id == sub_id)
            or (org_id is not None and entry.auth.organization_id == org_id)
        ]
        for digest in doomed:
            self._keys.pop(digest, None)
        return len(doomed)

    # --- messages ---------------------------------------------------------

    def _buried(self, entry: KeyEntry) -> bool:
        auth = entry.auth
        t = self._tombstones
        return (
            ("k", auth.key_id) in t
            or ("o", auth.organization_id) in t
            or (auth.sub_account_id is not None and ("s", auth.sub_account_id) in t)
        )

    def _mark(self, message: str) -> None:
        """A key, sub-account or organization change: recorded now, on any thread."""
        kind, _, rest = message.partition(":")
        letter = {"key": "k", "sub": "s", "org": "o"}.get(kind)
        if letter is None:
            return
        try:
            self._tombstones.add((letter, int(rest)))
        except ValueError:
            return
        with self._heard_lock:  # the negative cache is not trusted until settled
            self._changes_heard += 1
        self.key_invalidations += 1
        self.last_key_invalidation = time.time()

    def _threadsafe_message(self, message: str) -> None:
        self._mark(message)
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.on_message(message)
        else:
            loop.call_soon_threadsafe(self.on_message, message)

    def on_message(self, message: str) -> None:
        kind, _, rest = message.partition(":")
        try:
            if kind in KEYS_OF:
                self._settle_negatives(kind, int(rest))
            if kind == "key":
                self.drop_keys(key_id=int(rest))
                self._tombstones.discard(("k", int(rest)))
            elif kind == "sub":
                self.drop_keys(sub_id=int(rest))
                self._tombstones.discard(("s", int(rest)))
            elif kind == "org":
                self.drop_keys(org_id=int(rest))
                self._tombstones.discard(("o", int(rest)))
            elif kind == "prices":
                self._prices_dirty = True
            elif kind == "nodes":
                self._nodes_dirty = True
        except ValueError:
            logger.warning("gateway: ignoring malformed message %r", message)
        for hook in self.on_message_hooks:
            hook(kind, rest)

    def _settle_negatives(self, kind: str, ident: int) -> None:
        """Drop the negative entries of the keys a change concerns (their hashes
        read on a gateway thread, one change after another), then trust the
        negative cache again. Without a database answer: forget them all."""

        def settled() -> None:
            # One change settled (never past those heard: a message handed to
            # on_message directly was not counted).
            self._changes_settled = min(self._changes_settled + 1, self._changes_heard)

        async def settle() -> None:
            if self._settling is None:
                self._settling = asyncio.Lock()
            async with self._settling:  # in the order the changes came
                try:
                    self.negative.discard(await self.run_db(key_hashes, kind, ident))
                except Exception:
                    logger.warning("gateway: could not read the changed keys; forgetting all")
                    self.negative.clear()
                settled()

        try:
            task = asyncio.get_running_loop().create_task(settle())
        except RuntimeError:  # no loop running (called outside the gateway)
            self.negative.clear()
            settled()
            return
        self._settle_tasks.add(task)
        task.add_done_callback(self._settle_tasks.discard)

    def _redis_listener(self) -> None:
        """Runs on its own thread: a message is marked (``_mark``) the moment it
        arrives, then handed to the event loop; a busy loop cannot delay a
        revocation. After every (re)subscription, whatever changed while we were
        not listening is forgotten: start clean."""
        notify.listen(
            self._listener_stop,
            self._threadsafe_message,
            on_subscribed=lambda: self._call_in_loop(self._forget_everything),
        )

    def _call_in_loop(self, fn: Callable[[], None]) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fn)

    def _forget_everything(self) -> None:
        self._keys.clear()
        self.negative.clear()
        self._prices_dirty = self._nodes_dirty = True

    # --- prices, catalogue, nodes ----------------------------------------

    async def refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        jobs: list[tuple[str, Callable[[], Any]]] = []
        if force or self._prices_dirty or now - self._prices_at >= PRICE_REFRESH_SECONDS:
            self._prices_dirty = False
            jobs.append(("prices", load_catalog))
        if force or self._nodes_dirty or now - self._nodes_at >= NODE_REFRESH_SECONDS:
            self._nodes_dirty = False
            jobs.append(("nodes", load_nodes))
        for what, job in jobs:
            try:
                result = await self.run_db(job)
            except Exception:
                if force:
                    raise
                logger.warning("gateway: could not refresh %s; keeping the old ones", what)
                continue
            if what == "prices":
                self.price_book, self.catalog = result
                self._prices_at = time.monotonic()
            else:
                self.nodes = result
                self._nodes_at = time.monotonic()

    def report_refused_credential(self, credential_id: int, status: int, message: str) -> None:
        """A vendor refused a credential: have the registry disable it (audit
        event, the channel marked down when it was its last key) on a gateway
        thread; the node refresh that follows drops it from every process."""

        def report() -> None:
            close_old_connections()
            try:
                credential_refused(credential_id=credential_id, status=status, message=message)
            except Exception:
                logger.exception("gateway: could not disable refused credential %s", credential_id)
            finally:
                db_done()
            self._nodes_dirty = True

        try:
            self.executor.submit(report)
        except RuntimeError:  # shutting down
            logger.warning("gateway: not reporting credential %s: shutting down", credential_id)

    async def _refresher(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("gateway: refresh failed")

    def price(self, model: str, currency: str, organization_id: int, ts: float) -> PriceRow | None:
        book = self.price_book
        return book.lookup(model, currency, organization_id, ts) if book else None
