"""Writes of the node registry, by topic: ``nodes`` (register, edit, status,
test), ``credentials`` (a channel's key pool, and the gateway's
``credential_refused``), ``validation`` (what both take). Import from here:
``from inference_node.services import node_create, credential_add``."""

from __future__ import annotations

from inference_node.addresses import refuse_internal_host
from inference_node.services._common import ALL_KEYS_DISABLED
from inference_node.services.credentials import (
    CREDENTIAL_FIELDS,
    credential_add,
    credential_refused,
    credential_remove,
    credential_set_status,
    credential_update,
)
from inference_node.services.nodes import (
    NEEDS_A_KEY,
    NODE_FIELDS,
    NodeTestOutcome,
    node_create,
    node_set_status,
    node_test,
    node_update,
)
from inference_node.services.validation import (
    MAX_CONCURRENCY,
    MAX_CONTEXT_WINDOW,
    MAX_CREDENTIALS,
    MAX_LABELS,
    MAX_MODELS,
    MAX_TIER,
    MAX_WEIGHT,
    CredentialSpec,
    ModelSpec,
    clean_api_path,
    clean_base_url,
    clean_labels,
    clean_models,
)

# The name this check had before it moved to inference_node.addresses.
_refuse_internal_host = refuse_internal_host

__all__ = [
    "ALL_KEYS_DISABLED",
    "CREDENTIAL_FIELDS",
    "MAX_CONCURRENCY",
    "MAX_CONTEXT_WINDOW",
    "MAX_CREDENTIALS",
    "MAX_LABELS",
    "MAX_MODELS",
    "MAX_TIER",
    "MAX_WEIGHT",
    "NEEDS_A_KEY",
    "NODE_FIELDS",
    "CredentialSpec",
    "ModelSpec",
    "NodeTestOutcome",
    "clean_api_path",
    "clean_base_url",
    "clean_labels",
    "clean_models",
    "credential_add",
    "credential_refused",
    "credential_remove",
    "credential_set_status",
    "credential_update",
    "node_create",
    "node_set_status",
    "node_test",
    "node_update",
]
