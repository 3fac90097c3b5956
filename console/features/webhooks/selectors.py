"""Reads of destinations, events and the delivery log, scoped to the actor's
organization and role."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.facade import Actor, Perm, PermissionDenied
from console.features.webhooks.models import Delivery, Destination, OutboundEvent


def _require_log(actor: Actor) -> None:
    if not (actor.can(Perm.ORG_MANAGE) or actor.can(Perm.BILLING_VIEW)):
        actor.require(Perm.BILLING_VIEW)


def destination_list(*, actor: Actor) -> QuerySet[Destination]:
    _require_log(actor)
    return Destination.objects.filter(organization_id=actor.organization_id)


def event_list(*, actor: Actor) -> QuerySet[OutboundEvent]:
    _require_log(actor)
    return OutboundEvent.objects.filter(organization_id=actor.organization_id)


def delivery_list(
    *, actor: Actor, destination_id: int | None = None, status: str = ""
) -> QuerySet[Delivery]:
    _require_log(actor)
    qs = Delivery.objects.filter(destination__organization_id=actor.organization_id).select_related(
        "event", "destination"
    )
    if destination_id is not None:
        qs = qs.filter(destination_id=destination_id)
    if status:
        qs = qs.filter(status=status)
    return qs


__all__ = ["PermissionDenied", "delivery_list", "destination_list", "event_list"]
