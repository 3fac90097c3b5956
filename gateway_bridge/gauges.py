"""The gateway's gauges and counters read at scrape time (``/metrics``):
readers over the live router, emitter, key state and key pools, registered
once on the gateway's ``GatewayMetrics``. Each yields ``(labels, value)``;
nothing here runs on a call's path."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from gateway_bridge.metrics import COUNTER, GAUGE, MAX, SUM

if TYPE_CHECKING:
    from gateway_bridge.pipeline.parts import Parts

# What a reader yields: (label values, value).
Samples = Iterator[tuple[tuple[str, ...], float]]


def queue_depth(gw: Parts) -> Samples:
    stats = gw.router.stats()
    for model, by_priority in stats.get("queues", {}).items():
        for priority, depth in by_priority.items():
            yield (model, priority), depth


def node_in_flight(gw: Parts) -> Samples:
    for node, data in gw.router.stats().get("nodes", {}).items():
        yield (node,), data.get("in_flight", 0)


def breaker_open(gw: Parts) -> Samples:
    for node, data in gw.router.stats().get("nodes", {}).items():
        yield (node,), 0 if data.get("state") == "closed" else 1


def breaker_openings(gw: Parts) -> Samples:
    for node, data in gw.router.stats().get("nodes", {}).items():
        yield (node,), data.get("openings", 0)


def spool(gw: Parts) -> Samples:
    # Read every second on the event loop: never wait on the spool's lock.
    em = gw.started_emitter
    store = getattr(em, "spool", None)
    if store is not None:
        yield (), store.pending_batches
    else:
        yield (), em.spool_pending if em is not None else 0


def emitted(gw: Parts) -> Samples:
    em = gw.started_emitter
    yield (), em.emitted if em is not None else 0


def invalidations(gw: Parts) -> Samples:
    yield (), gw.state.key_invalidations


def negative_keys(gw: Parts) -> Samples:
    yield (), len(gw.state.negative)


def negative_hits(gw: Parts) -> Samples:
    yield (), gw.state.negative_hits


def large_refusals(gw: Parts) -> Samples:
    yield (), gw.large.refused


def key_coolings(gw: Parts) -> Samples:
    yield (), gw.keys.coolings


def key_refusals(gw: Parts) -> Samples:
    yield (), gw.keys.refusals


def key_limit_waits(gw: Parts) -> Samples:
    shared = gw.keys.shared
    yield (), shared.refusals if shared is not None else 0


def last_invalidation(gw: Parts) -> Samples:
    yield (), gw.state.last_key_invalidation


# (kind, name, help, labels, reader, aggregation across processes)
SERIES: tuple[tuple[str, str, str, tuple[str, ...], Callable[[Parts], Samples], str], ...] = (
    (GAUGE, "gateway_queue_depth", "Calls waiting for a node slot.",
     ("model", "priority"), queue_depth, SUM),
    (GAUGE, "gateway_node_in_flight", "Calls in flight per node.",
     ("node",), node_in_flight, SUM),
    (GAUGE, "gateway_circuit_open",
     "1 when a node's circuit is open or half-open (in any process).",
     ("node",), breaker_open, MAX),
    (COUNTER, "gateway_circuit_openings_total", "Times a node's circuit opened.",
     ("node",), breaker_openings, SUM),
    (GAUGE, "gateway_spool_batches", "Usage batches waiting in the spool.", (), spool, SUM),
    (COUNTER, "gateway_usage_events_total", "Usage events handed to the emitter.",
     (), emitted, SUM),
    (COUNTER, "gateway_key_invalidations_total",
     "Key, sub-account and organization changes heard (cached keys dropped).",
     (), invalidations, SUM),
    (GAUGE, "gateway_negative_keys",
     "Unusable presented keys remembered (by hash), refused without the database.",
     (), negative_keys, SUM),
    (COUNTER, "gateway_negative_key_hits_total",
     "Calls refused from the negative key cache, without the database.",
     (), negative_hits, SUM),
    (COUNTER, "gateway_large_body_refusals_total",
     "Large requests refused because their organization had every large-body slot busy.",
     (), large_refusals, SUM),
    (COUNTER, "gateway_credential_coolings_total",
     "Times a vendor's 429 cooled a credential of a channel's key pool.",
     (), key_coolings, SUM),
    (COUNTER, "gateway_credential_refusals_total",
     "Credentials a vendor refused (401 / 403), taken out of their pool.",
     (), key_refusals, SUM),
    (COUNTER, "gateway_credential_limit_waits_total",
     "Tries held back because every gateway process together had a vendor key at its "
     "RPM, TPM or concurrency limit, or resting (the Redis limits store).",
     (), key_limit_waits, SUM),
    (GAUGE, "gateway_last_key_invalidation_timestamp_seconds",
     "When the last key change was heard (POSIX seconds; the latest of any process).",
     (), last_invalidation, MAX),
)  # fmt: skip


def register_gauges(gw: Parts) -> None:
    """Register the scrape-time series of ``gw`` on ``gw.metrics``."""
    m = gw.metrics
    for kind, name, help_text, labels, reader, agg in SERIES:
        read = functools.partial(reader, gw)
        if kind == COUNTER:
            m.counter(name, help_text, labels, read)
        else:
            m.gauge(name, help_text, labels, read, agg=agg)
