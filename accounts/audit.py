"""Writing the audit trail. Parameters describe what changed; they never
contain a secret (the tests grep for that)."""

from __future__ import annotations

from django.db import models

from accounts.models import AuditEvent


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
