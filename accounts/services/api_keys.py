"""Gateway API keys: issue (secret shown once), update, rotate, revoke, expire."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts import keys as key_secrets
from accounts import validators
from accounts.actors import Actor
from accounts.audit import audit_record
from accounts.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from accounts.models import ApiKey, ApiKeyStatus, Priority, SubAccount, SubAccountStatus
from accounts.permissions import Perm
from accounts.services._common import LIMIT_FIELDS, FieldErrors, changed, clean_limits

KEY_FIELDS = (*LIMIT_FIELDS, "name", "ip_allowlist", "priority", "expires_at")
MAX_GRACE = timedelta(days=30)


def _require_key_management(actor: Actor) -> None:
    if not (actor.can(Perm.KEYS_MANAGE_ALL) or actor.can(Perm.KEYS_MANAGE_OWN)):
        actor.require(Perm.KEYS_MANAGE_ALL)


def get_api_key(actor: Actor, key_id, *, lock: bool = False, for_change: bool = True) -> ApiKey:
    """A key of the actor's organization that the actor may see (and, with
    ``for_change``, manage). Anything else is "not found", never "forbidden",
    so ids of other tenants' or colleagues' keys reveal nothing."""
    qs = ApiKey.objects.select_related("sub_account", "owner").filter(
        organization_id=actor.organization_id
    )
    manage_all = actor.can(Perm.KEYS_MANAGE_ALL)
    see_all = manage_all or (actor.can(Perm.KEYS_VIEW_ALL) and not for_change)
    if not see_all:
        qs = qs.filter(owner_id=actor.user.pk)
    if lock:
        qs = qs.select_for_update(of=("self",))
    try:
        key = qs.get(pk=key_id)
    except (ApiKey.DoesNotExist, ValueError, TypeError):
        raise NotFound("No such API key in this organization.") from None
    if for_change and not (manage_all or actor.can(Perm.KEYS_MANAGE_OWN)):
        raise PermissionDenied("Your role cannot manage API keys.")
    return key


def _resolve_sub_account(actor: Actor, sub_account_id) -> SubAccount | None:
    if sub_account_id in (None, ""):
        return None
    try:
        sub = SubAccount.objects.get(pk=sub_account_id, organization_id=actor.organization_id)
    except (SubAccount.DoesNotExist, ValueError, TypeError):
        raise ValidationFailed.from_fields(
            {"sub_account": "No such sub-account in this organization."}
        ) from None
    if sub.status != SubAccountStatus.ACTIVE:
        raise ValidationFailed.from_fields(
            {"sub_account": f"Sub-account '{sub.name}' is suspended."}
        )
    if (
        not actor.can(Perm.KEYS_MANAGE_ALL)
        and not sub.members.filter(pk=actor.membership.pk).exists()
    ):
        raise ValidationFailed.from_fields(
            {"sub_account": f"You are not a member of sub-account '{sub.name}'."}
        )
    return sub


def _clean(
    actor: Actor, data: dict, *, sub: SubAccount | None, instance: ApiKey | None = None
) -> dict:
    errors = FieldErrors()
    out = clean_limits(data, errors, ceiling=sub, org_models=actor.organization.allowed_models)
    if "name" in data:
        name = (data["name"] or "").strip()
        if not name:
            errors.add("name", "Enter a name.")
        elif len(name) > 120:
            errors.add("name", "Use at most 120 characters.")
        else:
            clash = ApiKey.objects.filter(
                organization_id=actor.organization_id, sub_account=sub, name=name
            ).exclude(status=ApiKeyStatus.REVOKED)
            if instance is not None:
                clash = clash.exclude(pk=instance.pk)
            if clash.exists():
                where = f"sub-account '{sub.name}'" if sub else "this organization"
                errors.add("name", f"A key named '{name}' already exists in {where}.")
        out["name"] = name
    if "ip_allowlist" in data:
        ips = errors.run(
            "ip_allowlist", validators.normalize_ip_allowlist, data["ip_allowlist"] or []
        )
        out["ip_allowlist"] = ips or []
    if "priority" in data:
        if data["priority"] not in Priority.values:
            errors.add("priority", "Choose high, normal or low.")
        out["priority"] = data["priority"]
    if "expires_at" in data:
        out["expires_at"] = errors.run("expires_at", validators.validate_future, data["expires_at"])
    errors.raise_if_any()
    return out


def _audit_params(values: dict) -> dict:
    return {
        k: (v.isoformat() if isinstance(v, datetime) else v)
        for k, v in values.items()
        if v not in (None, [], "")
    }


def api_key_issue(
    *, actor: Actor, name: str, sub_account_id: int | None = None, **fields
) -> tuple[ApiKey, str]:
    """Create a key; returns it with the raw secret, which is never retrievable again."""
    _require_key_management(actor)
    unknown = set(fields) - set(KEY_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), "Unknown field."))
    sub = _resolve_sub_account(actor, sub_account_id)
    values = _clean(actor, {"name": name, **fields}, sub=sub)
    public_id, raw, digest = key_secrets.new_secret(key_secrets.KEY_PREFIX)
    try:
        with transaction.atomic():
            key = ApiKey.objects.create(
                organization_id=actor.organization_id,
                sub_account=sub,
                owner=actor.user,
                public_id=public_id,
                secret_hash=digest,
                **values,
            )
            params = _audit_params(values) | {"prefix": key.prefix}
            if sub:
                params["sub_account"] = sub.name
            audit_record(actor=actor, action="api_key.issue", target=key, params=params)
    except IntegrityError:
        raise ValidationFailed.from_fields(
            {"name": f"A key named '{values['name']}' already exists."}
        ) from None
    return key, raw


def api_key_update(*, actor: Actor, key_id: int, **fields) -> ApiKey:
    _require_key_management(actor)
    unknown = set(fields) - set(KEY_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), "Unknown field."))
    with transaction.atomic():
        key = get_api_key(actor, key_id, lock=True)
        if key.status == ApiKeyStatus.REVOKED:
            raise Conflict("A revoked key cannot be changed.", code="key_revoked")
        values = _clean(actor, fields, sub=key.sub_account, instance=key)
        diff = changed(key, values)
        if diff:
            key.save()
            audit_record(actor=actor, action="api_key.update", target=key, params=diff)
    return key


def api_key_rotate(*, actor: Actor, key_id: int, grace_seconds: int = 0) -> tuple[ApiKey, str]:
    """Give the key a new secret (and prefix). With a grace period the old
    secret keeps working until it ends; otherwise it stops at once."""
    _require_key_management(actor)
    if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int) or grace_seconds < 0:
        raise ValidationFailed.from_fields(
            {"grace_seconds": "Enter a whole number of seconds, 0 or more."}
        )
    if timedelta(seconds=grace_seconds) > MAX_GRACE:
        raise ValidationFailed.from_fields(
            {"grace_seconds": "The grace period can be at most 30 days."}
        )
    with transaction.atomic():
        key = get_api_key(actor, key_id, lock=True)
        if not key.is_usable:
            raise Conflict(
                f"This key is {key.effective_status}; it cannot be rotated.", code="key_not_active"
            )
        now = timezone.now()
        old_prefix = key.prefix
        public_id, raw, digest = key_secrets.new_secret(key_secrets.KEY_PREFIX)
        if grace_seconds:
            key.previous_public_id = key.public_id
            key.previous_secret_hash = key.secret_hash
            key.previous_valid_until = now + timedelta(seconds=grace_seconds)
        else:
            key.previous_public_id, key.previous_secret_hash, key.previous_valid_until = (
                None,
                "",
                None,
            )
        key.public_id, key.secret_hash, key.rotated_at = public_id, digest, now
        key.save()
        audit_record(
            actor=actor,
            action="api_key.rotate",
            target=key,
            params={
                "old_prefix": old_prefix,
                "new_prefix": key.prefix,
                "grace_seconds": grace_seconds,
            },
        )
    return key, raw


def api_key_revoke(*, actor: Actor, key_id: int) -> ApiKey:
    _require_key_management(actor)
    with transaction.atomic():
        key = get_api_key(actor, key_id, lock=True)
        if key.status == ApiKeyStatus.REVOKED:
            raise Conflict("This key is already revoked.", code="key_revoked")
        key.status = ApiKeyStatus.REVOKED
        key.revoked_at = timezone.now()
        key.previous_valid_until = None
        key.save(update_fields=["status", "revoked_at", "previous_valid_until"])
        audit_record(
            actor=actor, action="api_key.revoke", target=key, params={"prefix": key.prefix}
        )
    return key


def api_keys_expire_due(*, now: datetime | None = None) -> int:
    """Mark active keys past their expiry as expired (authentication already
    refuses them; this makes the status and the audit trail say so)."""
    now = now or timezone.now()
    count = 0
    with transaction.atomic():
        due = (
            ApiKey.objects.select_for_update()
            .select_related("organization")
            .filter(Q(status=ApiKeyStatus.ACTIVE) & Q(expires_at__lte=now))
        )
        for key in due:
            key.status = ApiKeyStatus.EXPIRED
            key.save(update_fields=["status"])
            audit_record(
                actor=None,
                organization=key.organization,
                action="api_key.expire",
                target=key,
                params={"prefix": key.prefix, "expires_at": key.expires_at.isoformat()},
            )
            count += 1
    return count
