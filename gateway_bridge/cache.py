"""The exact-match response cache: a deterministic request (temperature 0 or
a seed, one choice) of an organization, byte-for-byte the same upstream body,
is answered from the cache instead of a node.

Opt-in: per key (``ApiKey.response_cache_seconds`` > 0) and per request with
the ``x-gateway-cache: on`` header (``x-gateway-cache-ttl: <seconds>`` sets
the time to live, default 300 s); ``x-gateway-cache: off`` skips it for one
request. Entries live in Redis when configured (shared by every gateway
process), else in a bounded in-process LRU.

Billing rule for a hit (the price book's rule for such hits): the prompt's
tokens are billed as cache reads and the output tokens as output, at the
model's prices — the answer is delivered again, its prompt is not processed.

``TtlStore`` is the storage under it (Redis or the in-process LRU), also
used for the Responses API's stored responses (``pipeline.stored``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

DEFAULT_REQUEST_TTL = 300
REDIS_TIMEOUT_S = 2.0
MAX_TTL = 7 * 24 * 3600
_VOLATILE = ("stream", "stream_options", "user", "metadata", "store", "service_tier")


def cache_key(organization_id: int, model: str, endpoint: str, body: dict[str, Any]) -> str:
    stable = {k: v for k, v in body.items() if k not in _VOLATILE and k != "model"}
    material = json.dumps(
        [organization_id, model, endpoint, stable], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(material.encode()).hexdigest()


class TtlStore:
    """JSON values with a time to live, in the Redis of ``url`` when there is
    one (shared by every gateway process; keys ``<prefix>:gateway:<namespace>:...``)
    or else in an in-process LRU (this process only) of at most ``max_entries``
    and ``max_bytes`` (0: no byte bound). A value over ``max_entry_bytes`` (0:
    no bound) is not kept anywhere. Redis errors are logged and read as a miss
    / a lost write: the hot path never fails on them."""

    def __init__(
        self,
        namespace: str,
        max_entries: int,
        max_ttl: int,
        *,
        url: str = "",
        max_bytes: int = 0,
        max_entry_bytes: int = 0,
    ):
        self.max_entries = max_entries
        self.max_ttl = max_ttl
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._local: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0  # of the in-process values
        self.too_large = 0  # values refused for their size
        self._redis = None
        if url:
            # deferred: only with a Redis; the embedded setup never loads it
            from console.kernel import redis_url

            # A stalled Redis costs a lookup at most this (then it is a miss), never a hang.
            self._redis = redis_url.async_client(
                url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
            )
        prefix = settings.CACHES["default"].get("KEY_PREFIX") or "console"
        self._prefix = f"{prefix}:gateway:{namespace}:"
        self._what = namespace

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = None
        if self._redis is not None:
            try:
                raw = await self._redis.get(self._prefix + key)
            except Exception:
                logger.warning("gateway: %s store read failed", self._what, exc_info=True)
                return None
        else:
            hit = self._local.get(key)
            if hit is not None:
                expires, raw = hit
                if expires < time.monotonic():
                    self._drop(key)
                    raw = None
                else:
                    self._local.move_to_end(key)
        if raw is None:
            return None
        try:
            value: dict[str, Any] = json.loads(raw)  # written by ``put``: an object
        except ValueError:
            return None
        return value

    async def put(self, key: str, value: dict[str, Any], ttl: int) -> bool:
        """Store ``value``; False when it could not be written."""
        ttl = max(1, min(int(ttl), self.max_ttl))
        raw = json.dumps(value, separators=(",", ":")).encode()
        if self.max_entry_bytes and len(raw) > self.max_entry_bytes:
            self.too_large += 1
            logger.info(
                "gateway: a %s value of %d bytes is over %d and is not kept",
                self._what,
                len(raw),
                self.max_entry_bytes,
            )
            await self.delete(key)  # an older value under the key is stale now
            return False
        if self._redis is not None:
            try:
                await self._redis.set(self._prefix + key, raw, ex=ttl)
            except Exception:
                logger.warning("gateway: %s store write failed", self._what, exc_info=True)
                return False
            return True
        self._drop(key)  # an older value under the key goes, kept or not
        if self.max_entries <= 0 or (self.max_bytes and len(raw) > self.max_bytes):
            return False
        self._local[key] = (time.monotonic() + ttl, raw)
        self._bytes += len(raw)
        while len(self._local) > self.max_entries or (
            self.max_bytes and self._bytes > self.max_bytes
        ):
            _, (_, dropped) = self._local.popitem(last=False)
            self._bytes -= len(dropped)
        return True

    def _drop(self, key: str) -> tuple[float, bytes] | None:
        hit = self._local.pop(key, None)
        if hit is not None:
            self._bytes -= len(hit[1])
        return hit

    @property
    def local_bytes(self) -> int:
        """The bytes of the values kept in process."""
        return self._bytes

    async def delete(self, key: str) -> bool:
        """Remove ``key``; True when it was there."""
        if self._redis is not None:
            try:
                return bool(await self._redis.delete(self._prefix + key))
            except Exception:
                logger.warning("gateway: %s store delete failed", self._what, exc_info=True)
                return False
        hit = self._drop(key)
        return hit is not None and hit[0] >= time.monotonic()

    async def close(self) -> None:
        if self._redis is not None:
            try:
                await self._redis.aclose()
            except Exception:
                logger.debug("gateway: error closing the %s store", self._what, exc_info=True)


class ResponseCache(TtlStore):
    def __init__(self, max_entries: int, url: str = ""):
        super().__init__("rc", max_entries, MAX_TTL, url=url)


def request_ttl(headers: dict[str, str], key_seconds: int) -> int:
    """Seconds to cache this request's answer; 0 = do not use the cache."""
    mode = headers.get("x-gateway-cache", "").strip().lower()
    if mode in ("off", "no", "false", "0", "bypass"):
        return 0
    if mode in ("on", "yes", "true", "1"):
        raw = headers.get("x-gateway-cache-ttl", "")
        try:
            ttl = int(raw) if raw else (key_seconds or DEFAULT_REQUEST_TTL)
        except ValueError:
            ttl = key_seconds or DEFAULT_REQUEST_TTL
        return max(0, min(ttl, MAX_TTL))
    return key_seconds
