"""Circuit breakers and the router's settings (``routing.Router`` keeps a
breaker per node, ``keypool.KeyPool`` one per credential).

A breaker keeps a rolling window of one-second buckets; it opens when
errors / calls >= ``breaker_error_rate`` with at least ``breaker_min_calls``
calls in the window; after ``breaker_open_seconds`` it is half-open and lets
``half_open_probes`` calls through at a time: a success closes it (window
cleared), a failure opens it again.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

POLICIES = ("prefix_affinity", "round_robin", "least_outstanding")


class Outcome(enum.Enum):
    SUCCESS = "success"  # the node answered
    FAILURE = "failure"  # connect error, timeout, 5xx, 429: counts against the node
    NEUTRAL = "neutral"  # the caller's fault (4xx) or the client left: says nothing


@dataclass(frozen=True)
class RouterConfig:
    default_policy: str = "prefix_affinity"
    policies: dict[str, str] = field(default_factory=dict)
    load_factor: float = 1.25
    prefix_chars: int = 256
    breaker_window: int = 60
    breaker_error_rate: float = 0.15
    breaker_min_calls: int = 100
    breaker_open_seconds: float = 30.0
    half_open_probes: int = 1
    queue_timeout: float = 10.0
    max_queue_depth: int = 1000

    def __post_init__(self) -> None:
        for policy in (self.default_policy, *self.policies.values()):
            if policy not in POLICIES:
                raise ValueError(f"unknown routing policy {policy!r}; use one of {POLICIES}")


class Breaker:
    __slots__ = (
        "buckets",
        "calls",
        "errors",
        "max_probes",
        "min_calls",
        "open_seconds",
        "opened_at",
        "opened_calls",
        "opened_errors",
        "opened_reason",
        "openings",
        "probes",
        "rate",
        "state",
        "window",
    )

    def __init__(self, config: RouterConfig):
        self.window = config.breaker_window
        self.rate = config.breaker_error_rate
        self.min_calls = config.breaker_min_calls
        self.open_seconds = config.breaker_open_seconds
        self.max_probes = config.half_open_probes
        self.state = "closed"
        self.buckets: deque[list[int]] = deque()  # [second, calls, errors]
        self.calls = 0
        self.errors = 0
        self.opened_at = 0.0
        self.probes = 0
        self.openings = 0
        # What the window held when the circuit last opened (for the audit trail).
        self.opened_calls = 0
        self.opened_errors = 0
        self.opened_reason = ""

    def _expire(self, now: float) -> None:
        horizon = int(now) - self.window
        buckets = self.buckets
        while buckets and buckets[0][0] <= horizon:
            _, calls, errors = buckets.popleft()
            self.calls -= calls
            self.errors -= errors

    def available(self, now: float) -> bool:
        """Whether a call may go to this node now (moves open → half-open)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if now - self.opened_at < self.open_seconds:
                return False
            self.state = "half_open"
            self.probes = 0
        return self.probes < self.max_probes

    def taken(self) -> bool:
        """A call was routed here; True when it is a half-open probe."""
        if self.state == "half_open":
            self.probes += 1
            return True
        return False

    def record(self, outcome: Outcome, now: float, probe: bool) -> None:
        if probe:
            self.probes = max(0, self.probes - 1)
            if outcome is Outcome.SUCCESS:
                self.state = "closed"
                self.buckets.clear()
                self.calls = self.errors = 0
            elif outcome is Outcome.FAILURE:
                self._open(now, "probe_failed")
            return
        if self.state != "closed" or outcome is Outcome.NEUTRAL:
            return
        second = int(now)
        buckets = self.buckets
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0, 0])
        bucket = buckets[-1]
        bucket[1] += 1
        self.calls += 1
        if outcome is Outcome.FAILURE:
            bucket[2] += 1
            self.errors += 1
        self._expire(now)
        if self.calls >= self.min_calls and self.errors >= self.rate * self.calls:
            self._open(now, "error_rate")

    def _open(self, now: float, reason: str) -> None:
        self.state = "open"
        self.opened_at = now
        self.openings += 1
        self.opened_calls, self.opened_errors, self.opened_reason = self.calls, self.errors, reason
        self.buckets.clear()
        self.calls = self.errors = 0
