"""Reads of the node registry: the console's lists (scoped to the caller's
organization plus the shared platform nodes) and the gateway's routing
snapshot."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from asgiref.sync import sync_to_async
from django.db.models import Prefetch, Q, QuerySet
from django.utils.translation import gettext as _

from accounts.facade import Actor, NotFound, Perm, PermissionDenied
from console.kernel.crypto import Unreadable
from inference_node.addresses import guarded
from inference_node.models import (
    Credential,
    CredentialStatus,
    HealthCheck,
    Node,
    NodeHealth,
    NodeModel,
    NodeStatus,
)

# --- console ------------------------------------------------------------------------

# Why a vendor channel cannot be routed to for want of a key (its last_error, its badge).
ALL_KEYS_DISABLED = "every API key is disabled"
NO_API_KEY = "no API key"


def nodes_own_and_shared(*organization_ids: int) -> QuerySet[Node]:
    """The nodes these organizations may see and route to: their own and the
    shared platform nodes. The one statement of that rule: every page, form
    and selector that lists or names nodes for an organization starts here."""
    return Node.objects.filter(
        Q(organization__isnull=True) | Q(organization_id__in=organization_ids)
    )


def node_serves_model(node_id: int, public_name: str) -> bool:
    """Whether this node serves a model under this public name."""
    return NodeModel.objects.filter(node_id=node_id, public_name=public_name).exists()


@dataclass(frozen=True, slots=True)
class CredentialState:
    """One API key of a channel's pool as other apps see it: never the secret."""

    id: int
    node_name: str
    name: str  # its label (or "credential") and the last four characters
    disabled: bool


def credential_states(node_ids: Iterable[int]) -> list[CredentialState]:
    """The API keys of these nodes, in the pool's order (by node, then key)."""
    return [
        CredentialState(
            id=cred.pk,
            node_name=cred.node.name,
            name=str(cred),
            disabled=cred.status == CredentialStatus.DISABLED,
        )
        for cred in Credential.objects.filter(node_id__in=list(node_ids)).select_related("node")
    ]


def _visible(actor: Actor) -> QuerySet[Node]:
    return nodes_own_and_shared(actor.organization_id)


def node_list(*, actor: Actor, status: str | None = None) -> QuerySet[Node]:
    """The org's own nodes and the shared platform nodes, own ones first."""
    if not (actor.can(Perm.NODES_VIEW) or actor.can(Perm.NODES_MANAGE)):
        raise PermissionDenied(_("Your role cannot see inference nodes."))
    qs = _visible(actor).prefetch_related(
        Prefetch("models", queryset=NodeModel.objects.order_by("public_name")),
        Prefetch("credentials", queryset=Credential.objects.order_by("id")),
    )
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("organization_id", "name", "id")


def get_node(actor: Actor, node_id, *, for_change: bool = False, lock: bool = False) -> Node:
    """A node the actor may see; with ``for_change`` one of the org's own that
    the actor may manage. Another org's node is "not found", never "forbidden"."""
    if not (actor.can(Perm.NODES_VIEW) or actor.can(Perm.NODES_MANAGE)):
        raise PermissionDenied(_("Your role cannot see inference nodes."))
    qs = _visible(actor)
    if lock:
        qs = qs.select_for_update()
    try:
        node = qs.get(pk=node_id)
    except (Node.DoesNotExist, ValueError, TypeError):
        raise NotFound(_("No such node in this organization.")) from None
    if for_change:
        actor.require(Perm.NODES_MANAGE)
        if node.is_shared:
            raise PermissionDenied(
                _("Shared platform nodes are managed by the platform's staff."), code="shared_node"
            )
    return node


def get_credential(actor: Actor, node_id, credential_id, *, for_change: bool = False):
    """One API key of a node the actor may see (``get_node``'s rules); a key of
    another node, or of another organization's, is "not found"."""
    node = get_node(actor, node_id, for_change=for_change)
    try:
        return node.credentials.get(pk=credential_id)
    except (Credential.DoesNotExist, ValueError, TypeError):
        raise NotFound(_("No such API key on this node.")) from None


@dataclass(frozen=True)
class KeyPool:
    """A node's API keys as the console shows them (hints only, never secrets)."""

    credentials: tuple[Credential, ...]
    active: int
    # A vendor channel with no usable key: it cannot be routed to.
    down: bool

    @property
    def total(self) -> int:
        return len(self.credentials)

    @property
    def down_reason(self) -> str:
        if not self.down:
            return ""
        return ALL_KEYS_DISABLED if self.credentials else NO_API_KEY


def key_pool(node: Node) -> KeyPool:
    """From ``node.credentials`` (prefetched by ``node_list``)."""
    credentials = tuple(sorted(node.credentials.all(), key=lambda c: c.pk))
    active = sum(c.status == CredentialStatus.ACTIVE for c in credentials)
    return KeyPool(credentials=credentials, active=active, down=node.is_vendor and not active)


def missing_models(node: Node) -> list[str]:
    """Configured upstream names the node's ``/v1/models`` does not list (empty
    until the node has answered once)."""
    discovered = node.discovered_ids
    if not discovered:
        return []
    return sorted({m.upstream_name for m in node.models.all()} - discovered)


# --- routing snapshot -----------------------------------------------------------------

SNAPSHOT_TTL_SECONDS = 1.0


@dataclass(frozen=True)
class RoutableCredential:
    """One credential of a channel's key pool, as the gateway presents it.
    ``credential_id`` None: the node's own token (or none at all)."""

    credential_id: int | None
    secret: str
    weight: int = 1
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    max_concurrency: int | None = None
    hint: str = ""

    def __repr__(self) -> str:  # never the secret in logs
        return f"RoutableCredential({self.credential_id}, {self.hint!r})"


@dataclass(frozen=True)
class CostPrice:
    """What the vendor charges for a model on a channel: micro-units of
    ``currency`` per million tokens of each class."""

    currency: str
    input_per_mtok: int
    cache_read_per_mtok: int
    cache_write_per_mtok: int
    output_per_mtok: int


@dataclass(frozen=True)
class RoutableNode:
    """One node able to serve one public model, as the gateway needs it."""

    node_id: int
    name: str
    base_url: str
    token: str
    weight: int
    max_concurrency: int
    upstream_model: str
    context_window: int | None
    running: int | None
    waiting: int | None
    kv_cache_usage: float | None
    prefix_cache_hit_rate: float | None
    labels: Mapping[str, str]
    organization_id: int | None
    kind: str = "openai_compatible"
    api_path: str = ""
    tier: int = 0
    # The key pool: never empty (a node without credentials has one entry for
    # its own token, which may be "").
    credentials: tuple[RoutableCredential, ...] = ()
    cost: CostPrice | None = None
    # Reach it at public addresses only, checked on every connect (a tenant's
    # node unless staff allow private ones: ``inference_node.addresses``).
    public_only: bool = False

    def __repr__(self) -> str:  # never the token in logs
        return f"RoutableNode({self.node_id}, {self.name!r}, {self.upstream_model!r})"


_NO_NODES: tuple[RoutableNode, ...] = ()


@dataclass(frozen=True)
class RoutingSnapshot:
    """Healthy, active nodes by public model and owner (None: shared). Immutable;
    rebuilt, never changed."""

    by_model: Mapping[str, Mapping[int | None, tuple[RoutableNode, ...]]]
    built_at: float

    def for_model(self, public_model: str, organization_id: int | None) -> tuple[RoutableNode, ...]:
        """Shared nodes and the organization's own that serve ``public_model``."""
        owners = self.by_model.get(public_model)
        if not owners:
            return _NO_NODES
        shared = owners.get(None, _NO_NODES)
        if organization_id is None:
            return shared
        own = owners.get(organization_id, _NO_NODES)
        return own + shared if own and shared else own or shared

    def models(self, organization_id: int | None) -> set[str]:
        """Public model names the organization can be served right now."""
        return {
            model
            for model, owners in self.by_model.items()
            if None in owners or (organization_id is not None and organization_id in owners)
        }


def routable_nodes() -> Q:
    """Which nodes take calls: active ones that are healthy — or, for vendor
    channels judged by traffic or a vendor probe, not known to be down."""
    return Q(node__status=NodeStatus.ACTIVE) & (
        Q(node__health=NodeHealth.HEALTHY)
        | (~Q(node__health_check=HealthCheck.HEALTH) & ~Q(node__health=NodeHealth.UNHEALTHY))
    )


def _key_pools() -> dict[int, tuple[RoutableCredential, ...]]:
    pools: dict[int, list[RoutableCredential]] = {}
    for c in Credential.objects.filter(status=CredentialStatus.ACTIVE).order_by("node_id", "id"):
        if isinstance(c.secret, Unreadable):
            continue  # sealed with a key no longer configured: never sent (logged)
        pools.setdefault(c.node_id, []).append(
            RoutableCredential(
                credential_id=c.pk,
                secret=c.secret,
                weight=c.weight,
                rpm_limit=c.rpm_limit,
                tpm_limit=c.tpm_limit,
                max_concurrency=c.max_concurrency,
                hint=c.secret_hint,
            )
        )
    return {node_id: tuple(pool) for node_id, pool in pools.items()}


def _cost(row: NodeModel) -> CostPrice | None:
    if not row.has_cost:
        return None
    return CostPrice(
        currency=row.cost_currency,
        input_per_mtok=row.cost_input_per_mtok or 0,
        cache_read_per_mtok=row.cost_cache_read_per_mtok or 0,
        cache_write_per_mtok=row.cost_cache_write_per_mtok or 0,
        output_per_mtok=row.cost_output_per_mtok or 0,
    )


def build_routing_snapshot() -> RoutingSnapshot:
    """Two queries: the models of every routable node, with their node, and
    the active credentials of every node. A vendor channel without an active
    credential is left out (it cannot authenticate)."""
    rows = (
        NodeModel.objects.filter(routable_nodes())
        .select_related("node")
        .order_by("public_name", "tier", "node__organization_id", "node__name", "node_id")
    )
    pools = _key_pools()
    grouped: dict[str, dict[int | None, list[RoutableNode]]] = {}
    own_token: dict[int, tuple[RoutableCredential, ...]] = {}
    for row in rows:
        node = row.node
        pool = pools.get(node.pk)
        if pool is None:
            if node.health_check != HealthCheck.HEALTH or isinstance(node.token, Unreadable):
                continue  # a vendor channel with no usable credential, or an unreadable token
            pool = own_token.get(node.pk)
            if pool is None:
                pool = own_token[node.pk] = (
                    RoutableCredential(None, node.token, hint=node.token_hint),
                )
        context = row.context_window or _discovered_length(node, row.upstream_name)
        entry = RoutableNode(
            node_id=node.pk,
            name=node.name,
            base_url=node.base_url,
            token=node.token,
            weight=row.weight or node.weight,
            max_concurrency=node.max_concurrency,
            upstream_model=row.upstream_name,
            context_window=context,
            running=node.running,
            waiting=node.waiting,
            kv_cache_usage=node.kv_cache_usage,
            prefix_cache_hit_rate=node.prefix_cache_hit_rate,
            labels=MappingProxyType({str(k): str(v) for k, v in (node.labels or {}).items()}),
            organization_id=node.organization_id,
            kind=node.kind,
            api_path=node.api_path,
            tier=row.tier,
            credentials=pool,
            cost=_cost(row),
            public_only=guarded(node.organization_id),
        )
        grouped.setdefault(row.public_name, {}).setdefault(node.organization_id, []).append(entry)
    frozen = {
        model: MappingProxyType({owner: tuple(nodes) for owner, nodes in owners.items()})
        for model, owners in grouped.items()
    }
    return RoutingSnapshot(by_model=MappingProxyType(frozen), built_at=time.monotonic())


def _discovered_length(node: Node, upstream: str) -> int | None:
    for item in node.discovered_models or []:
        if isinstance(item, dict) and item.get("id") == upstream:
            return item.get("max_model_len")
    return None


_lock = threading.Lock()
_current: RoutingSnapshot | None = None


def routing_snapshot() -> RoutingSnapshot:
    """The process's snapshot, rebuilt at most once per ``SNAPSHOT_TTL_SECONDS``.
    Thread-safe: one thread rebuilds while the others wait for its result."""
    global _current
    snap = _current
    if snap is not None and time.monotonic() - snap.built_at < SNAPSHOT_TTL_SECONDS:
        return snap
    with _lock:
        snap = _current
        if snap is None or time.monotonic() - snap.built_at >= SNAPSHOT_TTL_SECONDS:
            snap = _current = build_routing_snapshot()
        return snap


async def arouting_snapshot() -> RoutingSnapshot:
    """``routing_snapshot`` for async callers: the cached one without a thread
    hop, a rebuild in a worker thread."""
    snap = _current
    if snap is not None and time.monotonic() - snap.built_at < SNAPSHOT_TTL_SECONDS:
        return snap
    return await sync_to_async(routing_snapshot, thread_sensitive=False)()


def invalidate_routing_snapshot() -> None:
    """Drop this process's snapshot (after a change, and in tests)."""
    global _current
    with _lock:
        _current = None
