"""The one permission layer. Console views, htmx partials, the REST API and
the services themselves all ask ``has_perm(role, perm)`` — nothing else
decides who may do what."""

from __future__ import annotations

from enum import StrEnum

from accounts.models import Role


class Perm(StrEnum):
    ORG_VIEW = "org.view"
    ORG_MANAGE = "org.manage"
    MEMBERS_VIEW = "members.view"
    MEMBERS_MANAGE = "members.manage"
    SUBACCOUNTS_VIEW = "subaccounts.view"
    SUBACCOUNTS_MANAGE = "subaccounts.manage"
    KEYS_VIEW_ALL = "keys.view_all"
    KEYS_MANAGE_ALL = "keys.manage_all"
    KEYS_MANAGE_OWN = "keys.manage_own"
    USAGE_VIEW_ALL = "usage.view_all"
    USAGE_VIEW_OWN = "usage.view_own"
    BILLING_VIEW = "billing.view"
    BILLING_MANAGE = "billing.manage"
    AUDIT_VIEW = "audit.view"
    NODES_VIEW = "nodes.view"
    NODES_MANAGE = "nodes.manage"
    TOKENS_MANAGE_OWN = "tokens.manage_own"


_EVERYONE = {Perm.ORG_VIEW, Perm.MEMBERS_VIEW, Perm.SUBACCOUNTS_VIEW, Perm.TOKENS_MANAGE_OWN}

ROLE_PERMS: dict[str, frozenset[Perm]] = {
    Role.OWNER: frozenset(Perm),
    Role.ADMIN: frozenset(Perm),
    # Finance sees billing and usage, never key management.
    Role.FINANCE: frozenset(
        _EVERYONE | {Perm.USAGE_VIEW_ALL, Perm.BILLING_VIEW, Perm.BILLING_MANAGE}
    ),
    # Developers manage their own keys and see their own keys' usage.
    Role.DEVELOPER: frozenset(_EVERYONE | {Perm.KEYS_MANAGE_OWN, Perm.USAGE_VIEW_OWN}),
    # Viewers read what is not money or secrets-adjacent management.
    Role.VIEWER: frozenset(_EVERYONE | {Perm.KEYS_VIEW_ALL, Perm.USAGE_VIEW_ALL, Perm.NODES_VIEW}),
}

# Roles a member of a given role may hand out (invite with, or change to).
ASSIGNABLE_ROLES: dict[str, frozenset[str]] = {
    Role.OWNER: frozenset(Role.values),
    Role.ADMIN: frozenset(set(Role.values) - {Role.OWNER}),
}


def has_perm(role: str | None, perm: Perm) -> bool:
    return role is not None and perm in ROLE_PERMS.get(role, frozenset())


def can_assign_role(actor_role: str, role: str) -> bool:
    return role in ASSIGNABLE_ROLES.get(actor_role, frozenset())


def can_view_keys(role: str) -> bool:
    return has_perm(role, Perm.KEYS_VIEW_ALL) or has_perm(role, Perm.KEYS_MANAGE_OWN)


def can_receive_key_secret(
    actor_role: str, *, own_key: bool, owner_role: str | None, has_owner: bool
) -> bool:
    """Whether whoever rotates a key is shown its new secret. The key's owner
    always is. Someone else only with ``KEYS_MANAGE_ALL`` and only when the
    owner's role is one they could hand out (``ASSIGNABLE_ROLES``): an admin
    rotating a developer's key sees it, an admin rotating an owner's key does
    not (the owner collects it). A key whose owner has left (``has_owner``
    false, or no role here any more) goes to whoever may manage every key."""
    if own_key:
        return True
    if not has_perm(actor_role, Perm.KEYS_MANAGE_ALL):
        return False
    if not has_owner or owner_role is None:
        return True
    return can_assign_role(actor_role, owner_role)
