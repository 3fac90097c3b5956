"""Latency model and scheduler, in the spirit of llm-d-inference-sim.

Time to first token = queueing (real waiting for a batch slot) + the prefill
overhead + uncached prompt tokens x prefill time per token; then one token per
inter-token latency. Both prefill and decode times grow with the number of
running sequences: x ``1 + load_factor * (running - 1) / (max_running - 1)``,
so a full batch is ``1 + load_factor`` times slower than a lone request.
Continuous batching: up to ``max_running`` sequences run at once per model;
the rest wait in FIFO order. ``time_scale`` multiplies every sleep; with the
instant profile nothing sleeps at all.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque

from .config import LatencyProfile


class LatencyModel:
    def __init__(
        self, profile: LatencyProfile, *, max_running: int, time_scale: float, seed: int = 0
    ):
        self.profile = profile
        self.max_running = max_running
        self.time_scale = time_scale
        self._rng = random.Random(seed)  # noqa: S311 - jitter, not security
        self.sleeps = profile.sleeps and time_scale > 0

    def load_multiplier(self, running: int) -> float:
        if self.max_running <= 1 or running <= 1:
            return 1.0
        share = min(running - 1, self.max_running - 1) / (self.max_running - 1)
        return 1.0 + self.profile.load_factor * share

    def _jitter(self) -> float:
        spread = self.profile.jitter
        return 1.0 + self._rng.uniform(-spread, spread) if spread else 1.0

    def prefill_seconds(self, uncached_tokens: int, running: int = 1, *, jitter=True) -> float:
        """Unscaled model time from admission to the first token."""
        p = self.profile
        base = p.ttft_ms / 1000.0 + uncached_tokens * p.prefill_us_per_token / 1_000_000.0
        value = base * self.load_multiplier(running)
        return value * self._jitter() if jitter else value

    def itl_seconds(self, running: int = 1, *, jitter=True) -> float:
        """Unscaled time between two output tokens."""
        value = self.profile.itl_ms / 1000.0 * self.load_multiplier(running)
        return value * self._jitter() if jitter else value

    def scaled(self, seconds: float) -> float:
        return seconds * self.time_scale


class Scheduler:
    """Batch slots of one model: at most ``max_running`` at once, FIFO waiting queue."""

    def __init__(self, max_running: int):
        self.max_running = max_running
        self.running = 0
        self._waiters: deque[asyncio.Future] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> bool:
        if self.running < self.max_running and not self._waiters:
            self.running += 1
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                # The slot was handed over just as we were cancelled: pass it on.
                self.release()
            else:
                self._waiters.remove(future)
            raise

    def release(self) -> None:
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                # The slot moves straight to the next waiter; running stays the same.
                future.set_result(None)
                return
        self.running -= 1
