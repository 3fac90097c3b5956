"""Reads for the accounts app, always scoped to the caller's organization
and what the caller's role may see."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.actors import Actor
from accounts.errors import PermissionDenied
from accounts.models import (
    ApiKey,
    ApiKeyStatus,
    AuditEvent,
    Invitation,
    Membership,
    PersonalAccessToken,
    SubAccount,
)
from accounts.permissions import Perm, can_view_keys


def memberships_for_user(user) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(user=user, organization__is_active=True)
        .select_related("organization")
        .order_by("organization__name")
    )


def member_list(*, actor: Actor) -> QuerySet[Membership]:
    actor.require(Perm.MEMBERS_VIEW)
    return (
        Membership.objects.filter(organization_id=actor.organization_id)
        .select_related("user")
        .order_by("user__email")
    )


def invitation_list(*, actor: Actor) -> QuerySet[Invitation]:
    actor.require(Perm.MEMBERS_MANAGE)
    return Invitation.objects.filter(organization_id=actor.organization_id).select_related(
        "invited_by"
    )


def sub_account_list(*, actor: Actor) -> QuerySet[SubAccount]:
    actor.require(Perm.SUBACCOUNTS_VIEW)
    return SubAccount.objects.filter(organization_id=actor.organization_id).prefetch_related(
        "members__user"
    )


def api_key_list(
    *, actor: Actor, sub_account_id: int | None = None, status: str | None = None
) -> QuerySet[ApiKey]:
    """All the org's keys for roles that see them all; a developer's own keys otherwise."""
    if not can_view_keys(actor.role):
        raise PermissionDenied("Your role cannot see API keys.")
    qs = ApiKey.objects.filter(organization_id=actor.organization_id).select_related(
        "sub_account", "owner"
    )
    if not (actor.can(Perm.KEYS_VIEW_ALL) or actor.can(Perm.KEYS_MANAGE_ALL)):
        qs = qs.filter(owner_id=actor.user.pk)
    if sub_account_id:
        qs = qs.filter(sub_account_id=sub_account_id)
    if status:
        qs = qs.filter(status=status)
    return qs


def audit_event_list(*, actor: Actor, action_prefix: str | None = None) -> QuerySet[AuditEvent]:
    actor.require(Perm.AUDIT_VIEW)
    qs = AuditEvent.objects.filter(organization_id=actor.organization_id)
    if action_prefix:
        qs = qs.filter(action__startswith=action_prefix)
    return qs


def access_token_list(*, actor: Actor) -> QuerySet[PersonalAccessToken]:
    actor.require(Perm.TOKENS_MANAGE_OWN)
    return PersonalAccessToken.objects.filter(membership=actor.membership)


def sub_accounts_for_key_form(*, actor: Actor) -> QuerySet[SubAccount]:
    """Sub-accounts the actor may issue keys under."""
    qs = SubAccount.objects.filter(organization_id=actor.organization_id, status="active")
    if not actor.can(Perm.KEYS_MANAGE_ALL):
        qs = qs.filter(members=actor.membership)
    return qs


def member_keys(*, actor: Actor, user_id: int) -> QuerySet[ApiKey]:
    """A member's keys in the actor's organization that still matter (not
    revoked): what removing the member revokes or hands over."""
    return (
        ApiKey.objects.filter(organization_id=actor.organization_id, owner_id=user_id)
        .exclude(status=ApiKeyStatus.REVOKED)
        .select_related("sub_account")
        .order_by("name", "pk")
    )
