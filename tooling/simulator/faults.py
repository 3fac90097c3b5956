"""Fault injection: error rates, latency spikes, stalled and dropped streams.

Decisions come from one RNG seeded with the node's ``--seed``, so a run is
reproducible, and rates of 0.0 and 1.0 are exact. Each request draws once per
error kind, checked in the order 500, 429, 503.

A change may be timed (``update(changes, for_seconds=...)``): once it runs out
the settings go back to what they were before it. ``clear()`` goes back to the
settings the node started with.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from .config import FaultSettings
from .protocol import ApiError


@dataclass(frozen=True)
class FaultDecision:
    status: int = 0  # 0: no injected error
    spike: bool = False


NO_FAULT = FaultDecision()


class FaultInjector:
    def __init__(
        self, settings: FaultSettings, seed: int = 0, clock: Callable[[], float] = time.monotonic
    ):
        self.initial = settings
        self._settings = settings
        self._clock = clock
        # A timed change: the settings to go back to, and when (clock seconds).
        self._restore: FaultSettings | None = None
        self._expires_at: float | None = None
        self._rng = random.Random(f"faults:{seed}")  # noqa: S311 - simulation, not security

    def _expire(self) -> None:
        """Undo a timed change that ran out."""
        if self._expires_at is not None and self._clock() >= self._expires_at:
            self._settings = self._restore or self.initial
            self._restore = self._expires_at = None

    @property
    def settings(self) -> FaultSettings:
        """The settings in force."""
        self._expire()
        return self._settings

    def expires_in(self) -> float | None:
        """Seconds until the timed change runs out (None: nothing timed)."""
        self._expire()
        if self._expires_at is None:
            return None
        return max(0.0, self._expires_at - self._clock())

    def update(self, changes: object, for_seconds: float | None = None) -> FaultSettings:
        """Merge a JSON object of fault fields (raises config.FaultError on a bad one);
        with ``for_seconds``, only for that long (then the settings from before)."""
        current = self.settings
        merged = current.merged(changes)
        if for_seconds is not None:
            if self._expires_at is None:
                self._restore = current
            self._expires_at = self._clock() + for_seconds
        else:
            self._restore = self._expires_at = None
        self._settings = merged
        return merged

    def clear(self) -> FaultSettings:
        """Back to the settings the node started with (a timed change is dropped)."""
        self._settings = self.initial
        self._restore = self._expires_at = None
        return self.initial

    def _hit(self, rate: float) -> bool:
        if rate <= 0.0:
            return False
        return rate >= 1.0 or self._rng.random() < rate

    def decide(self) -> FaultDecision:
        s = self.settings
        if not (s.fault_500_rate or s.fault_429_rate or s.fault_503_rate or s.spike_rate):
            return NO_FAULT
        for status, rate in ((500, s.fault_500_rate), (429, s.fault_429_rate)):
            if self._hit(rate):
                return FaultDecision(status=status)
        if self._hit(s.fault_503_rate):
            return FaultDecision(status=503)
        return FaultDecision(spike=self._hit(s.spike_rate))

    def spike_seconds(self, prefill_seconds: float) -> float:
        """Extra unscaled delay a spiked request waits before its first token."""
        s = self.settings
        return prefill_seconds * (s.spike_multiplier - 1.0) + s.spike_ms / 1000.0


def fault_error(status: int) -> ApiError:
    """The error an injected fault answers (each front-end renders it in its shape)."""
    if status == 429:
        return ApiError(
            429,
            "Rate limit reached on this node (injected fault).",
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers=(("retry-after", "1"),),
        )
    if status == 503:
        return ApiError(
            503,
            "The node is overloaded; try again later (injected fault).",
            type="server_error",
            code="overloaded",
            headers=(("retry-after", "1"),),
        )
    return ApiError(
        500, "Internal server error (injected fault).", type="server_error", code="internal_error"
    )
