"""The gateway's gauges and counters read at scrape time (``/metrics``):
callables over the live router, emitter, key state and key pools, registered
once on the gateway's ``GatewayMetrics``. Each yields ``(labels, value)``;
nothing here runs on a call's path."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway_bridge.metrics import MAX

if TYPE_CHECKING:
    from gateway_bridge.gateway import Gateway


def register_gauges(gw: Gateway) -> None:
    """Register the scrape-time series of ``gw`` on ``gw.metrics``."""

    def queue_depth():
        stats = gw.router.stats()
        for model, by_priority in stats.get("queues", {}).items():
            for priority, depth in by_priority.items():
                yield (model, priority), depth

    def node_in_flight():
        for node, data in gw.router.stats().get("nodes", {}).items():
            yield (node,), data.get("in_flight", 0)

    def breaker_open():
        for node, data in gw.router.stats().get("nodes", {}).items():
            yield (node,), 0 if data.get("state") == "closed" else 1

    def breaker_openings():
        for node, data in gw.router.stats().get("nodes", {}).items():
            yield (node,), data.get("openings", 0)

    def spool():
        # Read every second on the event loop: never wait on the spool's lock.
        em = gw.started_emitter
        store = getattr(em, "spool", None)
        if store is not None:
            yield (), store.pending_batches
        else:
            yield (), em.spool_pending if em is not None else 0

    def emitted():
        em = gw.started_emitter
        yield (), em.emitted if em is not None else 0

    def invalidations():
        yield (), gw.state.key_invalidations

    def negative_keys():
        yield (), len(gw.state.negative)

    def negative_hits():
        yield (), gw.state.negative_hits

    def large_refusals():
        yield (), gw.large.refused

    def key_coolings():
        yield (), gw.keys.coolings

    def key_refusals():
        yield (), gw.keys.refusals

    def last_invalidation():
        yield (), gw.state.last_key_invalidation

    m = gw.metrics
    m.gauge(
        "gateway_queue_depth",
        "Calls waiting for a node slot.",
        ("model", "priority"),
        queue_depth,
    )
    m.gauge("gateway_node_in_flight", "Calls in flight per node.", ("node",), node_in_flight)
    m.gauge(
        "gateway_circuit_open",
        "1 when a node's circuit is open or half-open (in any process).",
        ("node",),
        breaker_open,
        agg=MAX,
    )
    m.counter(
        "gateway_circuit_openings_total",
        "Times a node's circuit opened.",
        ("node",),
        breaker_openings,
    )
    m.gauge("gateway_spool_batches", "Usage batches waiting in the spool.", (), spool)
    m.counter("gateway_usage_events_total", "Usage events handed to the emitter.", (), emitted)
    m.counter(
        "gateway_key_invalidations_total",
        "Key, sub-account and organization changes heard (cached keys dropped).",
        (),
        invalidations,
    )
    m.gauge(
        "gateway_negative_keys",
        "Unusable presented keys remembered (by hash), refused without the database.",
        (),
        negative_keys,
    )
    m.counter(
        "gateway_negative_key_hits_total",
        "Calls refused from the negative key cache, without the database.",
        (),
        negative_hits,
    )
    m.counter(
        "gateway_large_body_refusals_total",
        "Large requests refused because their organization had every large-body slot busy.",
        (),
        large_refusals,
    )
    m.counter(
        "gateway_credential_coolings_total",
        "Times a vendor's 429 cooled a credential of a channel's key pool.",
        (),
        key_coolings,
    )
    m.counter(
        "gateway_credential_refusals_total",
        "Credentials a vendor refused (401 / 403), taken out of their pool.",
        (),
        key_refusals,
    )
    m.gauge(
        "gateway_last_key_invalidation_timestamp_seconds",
        "When the last key change was heard (POSIX seconds; the latest of any process).",
        (),
        last_invalidation,
        agg=MAX,
    )
