"""Rows written straight in by the programs that set a deployment up rather
than by a person: the demo (``manage.py up``), the benchmarks and the soak.
No actor, no audit event, no validation beyond the database's: what they
write is their own fixed configuration. The callers drop the routing snapshot
(``invalidate_routing_snapshot``) when they are done."""

from __future__ import annotations

from dataclasses import dataclass

from inference_node.models import Credential, NodeModel


@dataclass(frozen=True, slots=True)
class SeedCost:
    """What the vendor charges for a model: micro-units of ``currency`` per
    million tokens of each class."""

    currency: str
    input_per_mtok: int
    cache_read_per_mtok: int
    cache_write_per_mtok: int
    output_per_mtok: int


def _cost_fields(cost: SeedCost | None) -> dict[str, object]:
    if cost is None:
        return {}
    return {
        "cost_currency": cost.currency,
        "cost_input_per_mtok": cost.input_per_mtok,
        "cost_cache_read_per_mtok": cost.cache_read_per_mtok,
        "cost_cache_write_per_mtok": cost.cache_write_per_mtok,
        "cost_output_per_mtok": cost.output_per_mtok,
    }


def seed_node_model(
    node_id: int,
    public_name: str,
    *,
    upstream_name: str,
    context_window: int | None = None,
    cost: SeedCost | None = None,
    keep_existing: bool = False,
) -> None:
    """The node serves ``public_name`` as ``upstream_name``. A row the node
    already has for that public name is brought up to these values, or left as
    it is with ``keep_existing`` (a person may have edited it since)."""
    fields: dict[str, object] = {"upstream_name": upstream_name, "context_window": context_window}
    fields.update(_cost_fields(cost))
    if keep_existing:
        NodeModel.objects.get_or_create(node_id=node_id, public_name=public_name, defaults=fields)
    else:
        NodeModel.objects.update_or_create(
            node_id=node_id, public_name=public_name, defaults=fields
        )


def seed_credential(node_id: int, *, secret: str, label: str = "") -> None:
    """One more API key in the node's pool (active, weight 1, no limits)."""
    Credential.objects.create(node_id=node_id, label=label, secret=secret, secret_hint=secret[-4:])
