"""What the node and key-pool services share: telling the gateways about a
change, forgetting what the prober saw, and the rule that a vendor channel
whose every API key is disabled is down.

How a change reaches the gateways: this process's routing snapshot is dropped
when the transaction commits (``invalidate_routing_snapshot``), and saving the
``Node`` row fires the ``post_save`` signal that ``gateway_bridge.notify``
turns into its ``nodes`` message for every gateway process. A key-pool change
therefore saves its node too (``touch``), so it is published exactly like an
edit of the node.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.facade import audit_record
from inference_node.models import CredentialStatus, Node, NodeHealth
from inference_node.selectors import ALL_KEYS_DISABLED, invalidate_routing_snapshot


def after_change() -> None:
    transaction.on_commit(invalidate_routing_snapshot)


def touch(node: Node) -> None:
    """Save the node (its ``updated_at``) so the change is published."""
    node.save(update_fields=["updated_at"])


def forget_health(node: Node) -> None:
    """Back to "unknown" until the next probe: a self-hosted node is not
    routable before it answers; a vendor channel is (unless known down)."""
    node.health = NodeHealth.UNKNOWN
    node.consecutive_failures = node.consecutive_successes = 0
    node.last_error = ""
    node.last_latency_ms = None
    node.discovered_models = []
    node.metrics_available = False
    node.running = node.waiting = node.kv_cache_usage = None
    node.prefix_cache_queries = node.prefix_cache_hits = node.prefix_cache_hit_rate = None


def has_active_key(node: Node) -> bool:
    return node.credentials.filter(status=CredentialStatus.ACTIVE).exists()


def mark_down_if_keyless(node: Node) -> bool:
    """A vendor channel with no active key left turns unhealthy, with
    ``ALL_KEYS_DISABLED`` as its error and a ``node.unhealthy`` audit event by
    "system" (as a probe's flip has). Saves the node when it changes; returns
    whether it did. A self-hosted node falls back to its own token: untouched."""
    if not node.is_vendor or has_active_key(node):
        return False
    before = node.health
    if before == NodeHealth.UNHEALTHY and node.last_error == ALL_KEYS_DISABLED:
        return False
    now = timezone.now()
    node.health = NodeHealth.UNHEALTHY
    node.last_error = ALL_KEYS_DISABLED
    node.consecutive_successes = 0
    if before != NodeHealth.UNHEALTHY:
        node.health_changed_at = now
        audit_record(
            actor=None,
            action="node.unhealthy",
            target=node,
            organization=node.organization,
            params={"from": before, "to": NodeHealth.UNHEALTHY, "error": ALL_KEYS_DISABLED},
        )
    node.save()
    return True


def revive_if_keyed(node: Node) -> bool:
    """A channel that was down only for want of a key goes back to "unknown"
    once it has an active one (routable again; the next probe confirms).
    Saves the node when it changes; returns whether it did."""
    if node.health != NodeHealth.UNHEALTHY or node.last_error != ALL_KEYS_DISABLED:
        return False
    if not has_active_key(node):
        return False
    node.health = NodeHealth.UNKNOWN
    node.last_error = ""
    node.consecutive_failures = 0
    node.health_changed_at = timezone.now()
    node.save()
    return True
