"""The upstream client's former home: it lives in ``gateway_bridge.upstreams`` now.

Kept so that ``from gateway_bridge.upstream import UpstreamPool, UpstreamError``
goes on working while callers move to ``gateway_bridge.upstreams``.
"""

from gateway_bridge.upstreams import (
    HIGH_WATER_BYTES,
    REASONS,
    SETTLE_S,
    UpstreamError,
    UpstreamPool,
    UpstreamResponse,
)

__all__ = [
    "HIGH_WATER_BYTES",
    "REASONS",
    "SETTLE_S",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamResponse",
]
