"""Node health: one probe round (``inference_node.probes`` asks, this module
records), flipping a node's health after enough probes in a row, and the
circuit-breaker transitions the gateways report.

Channels judged by ``traffic`` are not probed: their health is what the key
pool left (``credential_refused`` takes a channel whose every key is disabled
down) and the gateways' breakers decide the rest. Each flip is an audit event
by "system".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch

from accounts.facade import audit_record, audit_recorded
from inference_node.metrics import recent_hit_rate
from inference_node.models import (
    Credential,
    CredentialStatus,
    HealthCheck,
    Node,
    NodeHealth,
    NodeStatus,
)
from inference_node.probes import (
    MAX_BODY_BYTES,
    MAX_DISCOVERED_MODELS,
    ProbeResult,
    ProbeTarget,
    probe_node,
    probe_targets,
    run_probes,
)
from inference_node.selectors import invalidate_routing_snapshot

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_DISCOVERED_MODELS",
    "PROBED_STATUSES",
    "HealthChange",
    "ProbeResult",
    "ProbeRound",
    "ProbeTarget",
    "probe_node",
    "probe_nodes",
    "probe_targets",
    "record_circuit_events",
    "record_probe",
    "run_probes",
]

logger = logging.getLogger(__name__)
PROBED_STATUSES = (NodeStatus.ACTIVE, NodeStatus.DRAINING)


@dataclass(frozen=True)
class HealthChange:
    node_id: int
    name: str
    before: str
    after: str


@dataclass(frozen=True)
class ProbeRound:
    results: tuple[ProbeResult, ...]
    changes: tuple[HealthChange, ...]

    @property
    def ok(self) -> int:
        return sum(r.ok for r in self.results)


# --- recording (database) -------------------------------------------------------------


def record_probe(result: ProbeResult) -> tuple[Node | None, HealthChange | None]:
    """Store one probe's outcome on its node and flip its health when the run
    of failures (``NODE_UNHEALTHY_AFTER``) or successes (``NODE_HEALTHY_AFTER``)
    is long enough. A node of unknown health turns healthy on its first success.
    Each flip is an audit event (``node.healthy`` / ``node.unhealthy``) by
    "system"; a shared node's has no organization (it shows in the admin)."""
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(pk=result.node_id).first()
        if node is None:  # deleted while it was being probed
            return None, None
        before = node.health
        node.last_probe_at = result.probed_at
        node.last_latency_ms = result.latency_ms
        if result.models is not None:
            node.discovered_models = list(result.models)
        if result.ok:
            node.consecutive_successes += 1
            node.consecutive_failures = 0
            node.last_seen_at = result.probed_at
            node.last_error = ""
            _apply_load(node, result)
            if before == NodeHealth.UNKNOWN or (
                before == NodeHealth.UNHEALTHY
                and node.consecutive_successes >= settings.NODE_HEALTHY_AFTER
            ):
                node.health = NodeHealth.HEALTHY
        else:
            node.consecutive_failures += 1
            node.consecutive_successes = 0
            node.last_error = result.error
            if (
                before != NodeHealth.UNHEALTHY
                and node.consecutive_failures >= settings.NODE_UNHEALTHY_AFTER
            ):
                node.health = NodeHealth.UNHEALTHY
        change = None
        if node.health != before:
            node.health_changed_at = result.probed_at
            change = HealthChange(node.pk, node.name, before, node.health)
            audit_record(
                actor=None,
                action=f"node.{node.health}",
                target=node,
                organization=node.organization,
                params={
                    "from": before,
                    "to": node.health,
                    "consecutive_failures": node.consecutive_failures,
                    "consecutive_successes": node.consecutive_successes,
                    "error": node.last_error,
                },
            )
        node.save()
    if change is not None:
        transaction.on_commit(invalidate_routing_snapshot)
    return node, change


def _apply_load(node: Node, result: ProbeResult) -> None:
    load = result.load
    if result.metrics == "error":
        return  # keep the last figures; the probe itself was fine
    node.metrics_available = load is not None
    if load is None:
        node.running = node.waiting = node.kv_cache_usage = None
        node.prefix_cache_queries = node.prefix_cache_hits = node.prefix_cache_hit_rate = None
        return
    node.prefix_cache_hit_rate = recent_hit_rate(
        node.prefix_cache_queries, node.prefix_cache_hits, load
    )
    node.running, node.waiting, node.kv_cache_usage = (
        load.running,
        load.waiting,
        load.kv_cache_usage,
    )
    node.prefix_cache_queries, node.prefix_cache_hits = (
        load.prefix_cache_queries,
        load.prefix_cache_hits,
    )


def probe_nodes(nodes: Iterable[Node] | None = None) -> ProbeRound:
    """Probe every active and draining node (or just ``nodes``) and record it.
    Channels judged by traffic are skipped."""
    if nodes is None:
        nodes = (
            Node.objects.filter(status__in=PROBED_STATUSES)
            .exclude(health_check=HealthCheck.TRAFFIC)
            .prefetch_related(
                Prefetch(
                    "credentials",
                    queryset=Credential.objects.filter(status=CredentialStatus.ACTIVE).order_by(
                        "id"
                    ),
                    to_attr="active_keys",
                )
            )
        )
    targets = [ProbeTarget.of(n) for n in nodes if n.health_check != HealthCheck.TRAFFIC]
    results = run_probes(targets)
    changes = []
    for result in results:
        _node, change = record_probe(result)
        if change is not None:
            changes.append(change)
    return ProbeRound(results=tuple(results), changes=tuple(changes))


# --- circuit breakers (reported by the gateways) ---------------------------------------

CIRCUIT_ACTIONS = {"open": "node.circuit_opened", "closed": "node.circuit_closed"}


def record_circuit_events(transitions: list[dict]) -> int:
    """Store the circuit-breaker transitions a gateway reported (see
    ``gateway_bridge.circuits``) as audit events ``node.circuit_opened`` /
    ``node.circuit_closed`` by "system", dated when the gateway saw them.
    A transition already stored (same id: a redelivered batch), of a deleted
    node, or malformed is skipped. Returns how many were stored."""
    stored = 0
    for t in transitions:
        try:
            action = CIRCUIT_ACTIONS[t["state"]]
            node_id = int(t["node_id"])
            event_id = str(t["id"])[:64]
            at = datetime.fromtimestamp(float(t["at"]), tz=UTC)
        except (KeyError, TypeError, ValueError):
            logger.warning("circuit transition skipped: malformed %r", t)
            continue
        node = Node.objects.filter(pk=node_id).first()
        if node is None:
            continue
        with transaction.atomic():
            if audit_recorded(
                action=action, target_type="node", target_id=str(node.pk), event_id=event_id
            ):
                continue
            audit_record(
                actor=None,
                action=action,
                target=node,
                organization=node.organization,
                at=at,
                params={
                    "id": event_id,
                    "gateway": str(t.get("gateway", ""))[:200],
                    "reason": str(t.get("reason", ""))[:40],
                    "calls": int(t.get("calls") or 0),
                    "errors": int(t.get("errors") or 0),
                },
            )
        stored += 1
    return stored
