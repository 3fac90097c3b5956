"""What the gateway's state (``gateway_bridge.state``) loads from the
database, on its threads: a presented key's cache entry, the price book and
catalogue, the routing snapshot, and the hashes of the keys a change
concerns."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import close_old_connections, connection

from accounts.facade import ApiKey, AuthenticatedKey, Organization, api_key_authenticate
from console.kernel import ipnet
from inference_node.facade import build_routing_snapshot
from usage.facade import PriceBook, catalog_models, discount_ppm_for

if TYPE_CHECKING:
    from gateway_bridge.routing import NodeSnapshot


@dataclass(frozen=True, slots=True)
class KeyEntry:
    auth: AuthenticatedKey
    networks: ipnet.Networks  # the parsed IP allowlist (empty: any address)
    discount_ppm: int
    expires_ts: float | None  # POSIX seconds
    loaded_at: float  # monotonic
    # A rotated-out secret in its grace period: when the grace ends (POSIX
    # seconds), checked on every call like the expiry, so the cache cannot
    # stretch it.
    grace_ends_ts: float | None = None

    def ip_allowed(self, ip: str) -> bool:
        return not self.networks or ip in self.networks


@dataclass(frozen=True, slots=True)
class CatalogInfo:
    name: str
    display_name: str
    kind: str
    context_window: int
    fallbacks: tuple[str, ...]
    enabled: bool
    created: int
    modality: str = "text"  # "text" | "vision" (takes images and documents)


def db_done() -> None:
    """After a load on a gateway thread: with SQLite (the embedded mode, which
    reloads nodes and keys every second) the thread keeps its connection for
    the next load, as opening one is most of a load's cost; a connection that
    saw an error, and every other database's, is closed as before."""
    conn = connection
    if (
        conn.vendor == "sqlite"
        and conn.connection is not None
        and not conn.errors_occurred
        and not conn.in_atomic_block
    ):
        conn.close_at = None  # not obsolete: close_old_connections keeps it
        return
    close_old_connections()


def load_key(raw: str) -> KeyEntry | None:
    close_old_connections()
    try:
        auth = api_key_authenticate(raw)
        if auth is None:
            return None
        rate = (
            Organization.objects.filter(pk=auth.organization_id)
            .values_list("discount_rate", flat=True)
            .first()
        )
        return KeyEntry(
            auth=auth,
            networks=ipnet.parse(auth.ip_allowlist),
            discount_ppm=discount_ppm_for(rate if rate is not None else 1),
            expires_ts=auth.expires_at.timestamp() if auth.expires_at else None,
            loaded_at=time.monotonic(),
            grace_ends_ts=auth.grace_ends_at.timestamp() if auth.grace_ends_at else None,
        )
    finally:
        db_done()


# The keys a change message concerns, by the model field that names them.
KEYS_OF = {"key": "pk", "sub": "sub_account_id", "org": "organization_id"}


def key_hashes(kind: str, ident: int) -> list[str]:
    """The keyed hashes (current and previous secret) of the keys a ``key:``,
    ``sub:`` or ``org:`` change concerns: the negative entries it may void."""
    close_old_connections()
    try:
        rows = ApiKey.objects.filter(**{KEYS_OF[kind]: ident}).values_list(
            "secret_hash", "previous_secret_hash"
        )
        return [h for row in rows for h in row if h]
    finally:
        db_done()


def load_catalog() -> tuple[PriceBook, dict[str, CatalogInfo]]:
    close_old_connections()
    try:
        book = PriceBook.load()
        catalog = {
            m.name: CatalogInfo(
                name=m.name,
                display_name=m.display_name,
                kind=m.kind,
                context_window=m.context_window,
                fallbacks=m.fallbacks,
                enabled=m.enabled,
                created=int(m.created_at.timestamp()),
                modality=m.modality,
            )
            for m in catalog_models()
        }
        return book, catalog
    finally:
        db_done()


def load_nodes() -> NodeSnapshot:
    close_old_connections()
    try:
        return build_routing_snapshot()
    finally:
        db_done()
