"""Reads for the accounts app, always scoped to the caller's organization
and what the caller's role may see."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

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
from console.kernel import hooks
from console.kernel.timezones import day_and_month


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
        raise PermissionDenied(_("Your role cannot see API keys."))
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


@dataclass(frozen=True)
class SpendBar:
    """What a key spent in one period against its cap there (``cap`` None: no
    cap, the figure alone). ``percent`` is how full the cap is, 0-100."""

    period: str  # "today" | "this month" | "lifetime"
    spent: int  # micro-units
    cap: int | None  # micro-units

    @property
    def percent(self) -> int:
        if not self.cap:
            return 100 if self.cap == 0 and self.spent > 0 else 0
        return min(100, self.spent * 100 // self.cap)

    @property
    def level(self) -> str:
        """``ok``, ``warn`` (80 % or more) or ``full`` (the cap is reached)."""
        if self.cap is None:
            return "ok"
        if self.spent >= self.cap:
            return "full"
        return "warn" if self.percent >= 80 else "ok"


_PERIODS = (("d", "today", "spend_cap_daily"), ("m", "this month", "spend_cap_monthly"))


def api_key_spend(
    *, actor: Actor, keys, now: datetime | None = None
) -> dict[int, tuple[SpendBar, ...]]:
    """Each key's spend today, this month (in the organization's time zone, the
    periods its caps count) and in its lifetime, beside its caps:
    ``{key id: (today, this month, lifetime)}``. The figures are the ingested
    calls, what the gateway seeds its cap counters from (a call settles into
    them within the ingest delay, a few seconds)."""
    keys = [k for k in keys if k.organization_id == actor.organization_id]
    if not keys:
        return {}
    bounds = day_and_month(actor.organization.timezone, now or timezone.now())
    spent = hooks.KEY_SPEND.ask(
        organization_id=actor.organization_id,
        key_ids=[k.pk for k in keys],
        periods=bounds,
    )
    out = {}
    for k in keys:
        mine = spent.get(k.pk, {})
        bars = [SpendBar(label, mine.get(p, 0), getattr(k, field)) for p, label, field in _PERIODS]
        bars.append(SpendBar("lifetime", mine.get("life", 0), k.spend_cap_lifetime))
        out[k.pk] = tuple(bars)
    return out


def model_choices(*, actor: Actor, sub_account=None) -> list[str]:
    """The catalogue's enabled models a key of the actor's organization (under
    ``sub_account``, when given) may be allowed: what the allow-list offers."""
    names = [e.name for e in hooks.MODEL_CATALOGUE.ask() if e.enabled]
    for rule in (actor.organization.allowed_models, getattr(sub_account, "allowed_models", None)):
        if rule:
            names = [n for n in names if n in rule]
    return names
