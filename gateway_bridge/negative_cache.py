"""Presented keys known to be unusable: a bounded, expiring set of keyed hashes.

A flood of random or guessed keys must not reach the database more than once
each, and must not push the valid keys out of the key cache. So the verdict
"not a usable key" lives here, apart from the valid keys' entries, keyed by
the keyed hash of the presented key (``GatewayState.digest``), never by the
key itself:

- bounded: at most ``max_entries``, the least recently seen dropped first
  (a flood of distinct keys evicts only other unknown keys);
- expiring: an entry is trusted for ``ttl_seconds``;
- exact: a key issued later has another secret, hence another hash, so it is
  never refused by an entry here. A presented key that matched a real key
  which was unusable at the time (revoked, expired, suspended account) is
  dropped by that key's hash when the key, its sub-account or its
  organization changes (``GatewayState`` looks the hashes up).

Pure Python, no I/O; one event loop uses it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable


class NegativeCache:
    def __init__(
        self,
        max_entries: int,
        ttl_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._entries: OrderedDict[str, float] = OrderedDict()  # digest -> expires at

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, digest: str) -> bool:
        expires = self._entries.get(digest)
        if expires is None:
            return False
        if expires <= self._clock():
            del self._entries[digest]
            return False
        self._entries.move_to_end(digest)
        return True

    def add(self, digest: str) -> None:
        if self.max_entries <= 0 or self.ttl_seconds <= 0:
            return
        entries = self._entries
        entries[digest] = self._clock() + self.ttl_seconds
        entries.move_to_end(digest)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def discard(self, digests: Iterable[str]) -> int:
        """Forget these hashes; how many were here."""
        entries = self._entries
        return sum(entries.pop(d, None) is not None for d in digests)

    def clear(self) -> None:
        self._entries.clear()
