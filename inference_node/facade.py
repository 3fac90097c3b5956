"""What other apps may use of ``inference_node``: its one public face.

Other apps import from here and nowhere else in ``inference_node`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``inference_node`` modules import each other directly, never this module.
The simulator, ``inference_node.server``, is not published at all: it is a
separate program (``python -m inference_node.server``) that imports no app.

Published: the node models with their choices (other apps filter calls and
credits by node and seed the simulator node); ``nodes_own_and_shared``, the
one rule for which nodes an organization sees (its own plus the shared
platform nodes); and the gateway's routing snapshot (``RoutingSnapshot`` of
``RoutableNode``, built by ``build_routing_snapshot``, dropped by
``invalidate_routing_snapshot`` after a change).
"""

from __future__ import annotations

from inference_node.models import (
    Credential,
    CredentialStatus,
    HealthCheck,
    Node,
    NodeHealth,
    NodeKind,
    NodeModel,
    NodeStatus,
)
from inference_node.selectors import (
    CostPrice,
    RoutableCredential,
    RoutableNode,
    RoutingSnapshot,
    build_routing_snapshot,
    invalidate_routing_snapshot,
    nodes_own_and_shared,
)

__all__ = [
    "CostPrice",
    "Credential",
    "CredentialStatus",
    "HealthCheck",
    "Node",
    "NodeHealth",
    "NodeKind",
    "NodeModel",
    "NodeStatus",
    "RoutableCredential",
    "RoutableNode",
    "RoutingSnapshot",
    "build_routing_snapshot",
    "invalidate_routing_snapshot",
    "nodes_own_and_shared",
]
