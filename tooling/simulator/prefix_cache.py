"""Automatic prefix caching, modelled on vLLM's.

A prompt is cut into blocks of ``BLOCK_SIZE`` tokens; each *full* block is
identified by a hash chained on the previous block's hash, so a block only
matches when everything before it matches too. A lookup serves the longest run
of leading blocks already cached, but never the whole prompt: like vLLM, at
least the last token is computed again so there is a position to sample from.

Eviction is LRU over blocks. When a request touches its blocks they are moved
to the most-recent end in reverse order (the last block first), so a chain's
tail is evicted before its head, as vLLM frees blocks.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass

BLOCK_SIZE = 16


def block_hashes(token_ids: list[int], block_size: int = BLOCK_SIZE) -> list[bytes]:
    """Chained hashes of the full blocks of ``token_ids``."""
    hashes: list[bytes] = []
    parent = b""
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        chunk = array("I", token_ids[start : start + block_size]).tobytes()
        parent = hashlib.blake2b(parent + chunk, digest_size=16).digest()
        hashes.append(parent)
    return hashes


@dataclass(frozen=True)
class CacheResult:
    prompt_tokens: int
    cached_tokens: int


class PrefixCache:
    """Per-model block cache with a capacity in blocks (0 disables caching)."""

    def __init__(self, capacity_blocks: int, block_size: int = BLOCK_SIZE):
        self.capacity = capacity_blocks
        self.block_size = block_size
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.queries_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def usage(self) -> float:
        """Share of the capacity in use, 0..1."""
        return len(self._blocks) / self.capacity if self.capacity else 0.0

    def peek(self, token_ids: list[int]) -> int:
        """Tokens a request with this prompt would be served from cache, changing nothing."""
        return self._hit_blocks(block_hashes(token_ids, self.block_size), len(token_ids))[1]

    def _hit_blocks(self, hashes: list[bytes], prompt_len: int) -> tuple[int, int]:
        # Whole blocks only, and never the entire prompt.
        usable = min(len(hashes), (prompt_len - 1) // self.block_size) if prompt_len else 0
        hits = 0
        for digest in hashes[:usable]:
            if digest not in self._blocks:
                break
            hits += 1
        return hits, hits * self.block_size

    def admit(self, token_ids: list[int]) -> CacheResult:
        """Look the prompt up, then store its full blocks. Returns the cached token count."""
        prompt_len = len(token_ids)
        self.queries_tokens += prompt_len
        if not self.capacity:
            return CacheResult(prompt_len, 0)
        hashes = block_hashes(token_ids, self.block_size)
        _, cached = self._hit_blocks(hashes, prompt_len)
        self.hit_tokens += cached
        blocks = self._blocks
        kept = hashes[: self.capacity]
        for digest in reversed(kept):
            if digest in blocks:
                blocks.move_to_end(digest)
            else:
                blocks[digest] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        return CacheResult(prompt_len, cached)

    def contains_prefix_blocks(self, token_ids: list[int]) -> int:
        """How many leading full blocks of ``token_ids`` are cached (for tests and tools)."""
        count = 0
        for digest in block_hashes(token_ids, self.block_size):
            if digest not in self._blocks:
                break
            count += 1
        return count

    def clear(self) -> None:
        self._blocks.clear()
        self.queries_tokens = 0
        self.hit_tokens = 0
