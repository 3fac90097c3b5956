"""What the stages use of the gateway: its parts, each built once per process.

A stage (``admit``, ``forward``, ``relay``…) takes ``gw: Parts`` — the
state, router, limits, pools and caches it works with — not the ``Gateway``
class that composes the stages: so no stage depends on the module that
imports it, not even for its annotations (pyproject.toml's contract on
``gateway_bridge`` counts type-checking imports too). ``Gateway`` has every
one of these; mypy checks that where it hands itself to a stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from console.kernel import ipnet
    from gateway_bridge.cache import ResponseCache, TtlStore
    from gateway_bridge.config import GatewayConfig
    from gateway_bridge.emitter import UsageEmitter
    from gateway_bridge.keypool import KeyPool
    from gateway_bridge.limits import Limits
    from gateway_bridge.metrics import GatewayMetrics
    from gateway_bridge.metrics_dir import MetricsDirectory
    from gateway_bridge.pipeline.admit import Admission
    from gateway_bridge.pipeline.fair import LargeBodies
    from gateway_bridge.routing import Router
    from gateway_bridge.state import GatewayState
    from gateway_bridge.upstreams import UpstreamPool


class RelayParts(Protocol):
    """What relaying an answer uses: the metrics and the response cache."""

    metrics: GatewayMetrics
    cache: ResponseCache


class Parts(Protocol):
    """The gateway's parts as the stages see them."""

    config: GatewayConfig
    state: GatewayState
    metrics: GatewayMetrics
    metrics_dir: MetricsDirectory | None
    router: Router
    pool: UpstreamPool
    keys: KeyPool
    limits: Limits
    admission: Admission
    cache: ResponseCache
    responses: TtlStore
    trusted: ipnet.Networks
    large: LargeBodies
    max_body: int

    @property
    def started_emitter(self) -> UsageEmitter | None: ...
