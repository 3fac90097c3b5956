"""Celery tasks of the node registry: thin calls into ``health``."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from inference_node import health

logger = logging.getLogger(__name__)
LOCK_KEY = "inference_node:probe-round"


# A lost round is replaced by the next one, so no late ack and no retry.
@shared_task(
    name="inference_node.probe_nodes",
    ignore_result=True,
    acks_late=False,
    soft_time_limit=60,
    time_limit=90,
)
def probe_nodes() -> int:
    """One probe round of every active and draining node; returns how many
    answered. A round still running elsewhere (slow nodes, a second worker)
    makes this one a no-op, so rounds never pile up."""
    ttl = max(settings.NODE_PROBE_TIMEOUT_SECONDS * 3, settings.NODE_PROBE_INTERVAL_SECONDS * 2)
    if not cache.add(LOCK_KEY, "1", timeout=ttl):
        logger.info("probe round skipped: the previous one is still running")
        return 0
    try:
        round_ = health.probe_nodes()
    finally:
        cache.delete(LOCK_KEY)
    for change in round_.changes:
        logger.warning(
            "node %s (%s): %s -> %s", change.name, change.node_id, change.before, change.after
        )
    return round_.ok


@shared_task(name="inference_node.record_circuit_events", ignore_result=True)
def record_circuit_events(transitions: list[dict]) -> int:
    """Circuit openings and closings a gateway saw, into the audit trail."""
    return health.record_circuit_events(transitions)
