"""Anthropic's explicit prompt caching (``cache_control`` breakpoints).

A request is a chain of blocks in prefix order (tools, system blocks, message
blocks); each block's position has a key, a hash chained over every block
before it (``Prefixes``), so a key matches only when the whole prefix matches.
Breakpoints are positions marked with ``cache_control`` (``ttl`` "5m" or "1h").

Accounting (``account``), as Anthropic describes it:

* A breakpoint whose prefix is shorter than the node's ``--cache-min-tokens``
  (default 32) is not cached.
* Read: the longest prefix found in the cache, looking at each breakpoint and
  up to ``LOOKBACK`` blocks before it (so a conversation that moves its
  breakpoint to the newest turn reads what the previous turn wrote) →
  ``cache_read_input_tokens``.
* Write: from there up to the last usable breakpoint → ``cache_creation``;
  each stretch between breakpoints counts as the ttl of the breakpoint that
  ends it (``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``).
* The rest of the prompt is ``input_tokens``. Every usable breakpoint is then
  stored (a hit refreshes its lifetime).

Lifetimes are 5 minutes and 1 hour of monotonic time, times ``--cache-ttl-scale``.
Each model has its own cache, cleared by ``POST /admin/reset``; it keeps at most
``capacity`` entries, dropping the one that expires first.
"""

from __future__ import annotations

import hashlib
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
LOOKBACK = 20


class Prefixes:
    """The chained keys of a request's block positions and its breakpoints."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.where: list[tuple[str, int, int]] = []  # (segment, index, block index)
        self.breakpoints: list[tuple[int, str]] = []  # (position, ttl)
        # tokens of the prompt up to and including a position (set by the parser)
        self.tokens_at: Callable[[int], int] = lambda position: 0
        self._chain = b""

    def mix(self, text: str) -> None:
        """Chain something that is not a position of its own (a turn's role)."""
        self._chain = hashlib.blake2b(self._chain + text.encode(), digest_size=16).digest()

    def add(self, text: str, where: tuple[str, int, int]) -> int:
        self.mix(text)
        self.keys.append(self._chain)
        self.where.append(where)
        return len(self.keys) - 1


@dataclass(frozen=True)
class CacheUsage:
    read: int = 0
    write_5m: int = 0
    write_1h: int = 0

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h


NO_CACHE = CacheUsage()


class PromptCache:
    def __init__(self, ttl_scale: float = 1.0, capacity: int = 16384):
        self.ttl_scale = ttl_scale
        self.capacity = capacity
        self._expires: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self._expires)

    def alive(self, key: bytes, now: float) -> bool:
        expires = self._expires.get(key)
        return expires is not None and expires > now

    def put(self, key: bytes, ttl: str, now: float) -> None:
        expires = now + TTL_SECONDS[ttl] * self.ttl_scale
        self._expires[key] = max(expires, self._expires.get(key, 0.0))
        if len(self._expires) > self.capacity:
            dead = [k for k, at in self._expires.items() if at <= now]
            for k in dead:
                del self._expires[k]
            extra = len(self._expires) - self.capacity
            if extra > 0:
                soonest = heapq.nsmallest(extra, self._expires.items(), key=lambda kv: kv[1])
                for k, _ in soonest:
                    del self._expires[k]

    def clear(self) -> None:
        self._expires.clear()


def account(cache: PromptCache, prefixes: Prefixes, *, min_tokens: int, total: int) -> CacheUsage:
    """Read and write tokens of one request (see the module docstring); stores its
    breakpoints."""
    if not prefixes.breakpoints:
        return NO_CACHE
    now = time.monotonic()
    usable = []  # (position, ttl, tokens)
    for position, ttl in sorted(prefixes.breakpoints):
        tokens = min(prefixes.tokens_at(position), total)
        if tokens >= min_tokens:
            usable.append((position, ttl, tokens))
    if not usable:
        return NO_CACHE
    hit = -1
    for position, _, _ in usable:
        for earlier in range(position, max(-1, position - LOOKBACK - 1), -1):
            if earlier > hit and cache.alive(prefixes.keys[earlier], now):
                hit = earlier
                break
    read = 0
    if hit >= 0:
        exact = [tokens for position, _, tokens in usable if position == hit]
        read = exact[0] if exact else min(prefixes.tokens_at(hit), total)
    written = {"5m": 0, "1h": 0}
    reached = read
    for position, ttl, tokens in usable:
        if position > hit and tokens > reached:
            written[ttl] += tokens - reached
            reached = tokens
        cache.put(prefixes.keys[position], ttl, now)
    return CacheUsage(read, written["5m"], written["1h"])
