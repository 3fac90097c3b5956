"""Fault injection: error rates, latency spikes, stalled and dropped streams.

Decisions come from one RNG seeded with the node's ``--seed``, so a run is
reproducible, and rates of 0.0 and 1.0 are exact. Each request draws once per
error kind, checked in the order 500, 429, 503.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .config import FaultSettings
from .protocol import ApiError


@dataclass(frozen=True)
class FaultDecision:
    status: int = 0  # 0: no injected error
    spike: bool = False


NO_FAULT = FaultDecision()


class FaultInjector:
    def __init__(self, settings: FaultSettings, seed: int = 0):
        self.settings = settings
        self._rng = random.Random(f"faults:{seed}")  # noqa: S311 - simulation, not security

    def update(self, changes: object) -> FaultSettings:
        """Merge a JSON object of fault fields (raises config.FaultError on a bad one)."""
        self.settings = self.settings.merged(changes)
        return self.settings

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
