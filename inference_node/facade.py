"""What other apps may use of ``inference_node``: its one public face.

Other apps import from here and nowhere else in ``inference_node`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``inference_node`` modules import each other directly, never this module.
The simulator, ``tooling.simulator``, is not published at all: it is a
separate program (``python -m tooling.simulator``) that imports no app.

Published: the node model with its choices (other apps' rows point at a
node: calls and credits are filtered by node); ``nodes_own_and_shared``, the
one rule for which nodes an organization sees (its own plus the shared
platform nodes); ``node_serves_model`` and ``credential_states`` (a node's
API keys as plain data, never the secret); and the gateway's routing snapshot
(of ``RoutableNode``, built by ``build_routing_snapshot``, dropped by
``invalidate_routing_snapshot`` after a change), with
``connect_node_rows_changed`` for a cache of it to hear of a node's models and
keys changing.

For the programs that set a deployment up (the demo, the benchmarks, the
soak): ``seed_node_model`` and ``seed_credential`` (rows written without an
actor or an audit event), with ``SeedCost``.

For ``manage.py up``: ``probe_nodes`` (one probe round of the given nodes,
recorded as a scheduled round would be: the same health flips and audit
events), so the demo upstreams are healthy before its gateway starts.

For the gateway's key pools and upstream connections: ``credential_refused``
(a vendor refused a key with 401 / 403: disable it, audit it, take the
channel down when it was the last active one; idempotent, callable from a
worker thread), and the address rules a tenant's upstream must pass at
connect time too (``why_not_public``,
``refuse_internal_host``: DNS can change after a node was saved; a
``RoutableNode`` with ``public_only`` is reached at checked addresses only).
The same rules for any other tenant-given URL this deployment sends to (the
outbound webhooks of ``console.features.webhooks``): ``guarded`` (whether the rule
applies under ``NODE_ALLOW_PRIVATE_URLS``), ``literal_refusal`` (an IP
literal host) and ``PublicOnlyResolver`` (aiohttp's resolver that raises
``PrivateAddressRefused`` for a name resolving to a non-public address).
"""

from __future__ import annotations

from inference_node.addresses import (
    PrivateAddressRefused,
    PublicOnlyResolver,
    guarded,
    literal_refusal,
    refuse_internal_host,
    why_not_public,
)
from inference_node.health import probe_nodes
from inference_node.models import HealthCheck, Node, NodeHealth, NodeKind, NodeStatus
from inference_node.seeding import SeedCost, seed_credential, seed_node_model
from inference_node.selectors import (
    CostPrice,
    RoutableCredential,
    RoutableNode,
    build_routing_snapshot,
    credential_states,
    invalidate_routing_snapshot,
    node_serves_model,
    nodes_own_and_shared,
)
from inference_node.services.credentials import credential_refused
from inference_node.signals import connect_node_rows_changed

__all__ = [
    "CostPrice",
    "HealthCheck",
    "Node",
    "NodeHealth",
    "NodeKind",
    "NodeStatus",
    "PrivateAddressRefused",
    "PublicOnlyResolver",
    "RoutableCredential",
    "RoutableNode",
    "SeedCost",
    "build_routing_snapshot",
    "connect_node_rows_changed",
    "credential_refused",
    "credential_states",
    "guarded",
    "invalidate_routing_snapshot",
    "literal_refusal",
    "node_serves_model",
    "nodes_own_and_shared",
    "probe_nodes",
    "refuse_internal_host",
    "seed_credential",
    "seed_node_model",
    "why_not_public",
]
