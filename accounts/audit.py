"""Writing the audit trail. Parameters describe what changed; they never
contain a secret (the tests grep for that)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import models
from django.db.models import Q

from accounts.models import AuditEvent


class AuditRow(NamedTuple):
    """One event of the trail, as other apps read it."""

    action: str
    target_id: str
    created_at: datetime
    params: dict[str, Any]


def audit_record(
    *,
    actor,
    action: str,
    target: models.Model | None = None,
    params: dict | None = None,
    organization=None,
    label: str | None = None,
    at=None,
) -> AuditEvent:
    org = organization if organization is not None else getattr(actor, "organization", None)
    user = getattr(actor, "user", None)
    return AuditEvent.objects.create(
        organization=org,
        actor=user,
        actor_label=(user.email if user else "system"),
        action=action,
        target_type=target._meta.model_name if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        target_label=label
        if label is not None
        else (str(target)[:254] if target is not None else ""),
        params=params or {},
        ip=getattr(actor, "ip", None),
        **({"created_at": at} if at is not None else {}),
    )


def audit_trail(
    *,
    organization_id: int | None,
    target_type: str,
    target_ids: Iterable[str],
    actions: Iterable[str],
    since: datetime | None = None,
    before: datetime | None = None,
) -> list[AuditRow]:
    """The events of these actions on these targets, oldest first: the
    organization's and those of no organization (the system's), recorded at
    ``since`` or later and before ``before`` where given."""
    events = AuditEvent.objects.filter(
        Q(organization_id=organization_id) | Q(organization__isnull=True),
        action__in=list(actions),
        target_type=target_type,
        target_id__in=list(target_ids),
    )
    if since is not None:
        events = events.filter(created_at__gte=since)
    if before is not None:
        events = events.filter(created_at__lt=before)
    rows = events.order_by("created_at", "id").values_list(
        "action", "target_id", "created_at", "params"
    )
    return [AuditRow(*row) for row in rows]


def audit_recorded(*, action: str, target_type: str, target_id: str, event_id: str) -> bool:
    """Whether the event of this id (``params["id"]``) is already in the trail."""
    return AuditEvent.objects.filter(
        action=action, target_type=target_type, target_id=target_id, params__id=event_id
    ).exists()
