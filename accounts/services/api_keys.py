"""Gateway API keys: issue (secret shown once), update, rotate, revoke, expire.

Who decides a key's limits: a key manager (``KEYS_MANAGE_ALL``: owners and
admins) sets limits on any key, and what they set becomes the key's
``ceiling``; the key's owner without that permission (a developer) may
tighten a limit under its ceiling but not loosen or clear it. A developer's
keys are also capped by the organization's ``developer_key_cap`` (monthly
spend): it is their default monthly cap and they cannot go above it.

Who sees a new secret: the rotator, if ``can_receive_key_secret`` (the
permission matrix) says so; otherwise it waits, sealed, for the key's owner
to collect once (``api_key_collect_secret``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts import keys as key_secrets
from accounts import validators
from accounts.actors import Actor
from accounts.audit import audit_record
from accounts.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from accounts.models import (
    ApiKey,
    ApiKeyStatus,
    Membership,
    Priority,
    SubAccount,
    SubAccountStatus,
    role_noun,
)
from accounts.permissions import Perm, can_receive_key_secret, has_perm
from accounts.services._common import LIMIT_FIELDS, FieldErrors, changed, clean_limits
from accounts.services.key_ceiling import (
    ceiling_after,
    check_ceiling,
    developer_cap,
    manages_all_keys,
)

KEY_FIELDS = (*LIMIT_FIELDS, "name", "ip_allowlist", "priority", "expires_at")
MAX_GRACE = timedelta(days=30)
# A key's state as a sentence names it (``ApiKey.effective_status`` codes).
_STATUS_WORDS = {
    "active": gettext_lazy("active"),
    "revoked": gettext_lazy("revoked"),
    "expired": gettext_lazy("expired"),
}


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
        raise NotFound(_("No such API key in this organization.")) from None
    if for_change and not (manage_all or actor.can(Perm.KEYS_MANAGE_OWN)):
        raise PermissionDenied(_("Your role cannot manage API keys."))
    return key


def _resolve_sub_account(actor: Actor, sub_account_id) -> SubAccount | None:
    if sub_account_id in (None, ""):
        return None
    try:
        sub = SubAccount.objects.get(pk=sub_account_id, organization_id=actor.organization_id)
    except (SubAccount.DoesNotExist, ValueError, TypeError):
        raise ValidationFailed.from_fields(
            {"sub_account": _("No such sub-account in this organization.")}
        ) from None
    if sub.status != SubAccountStatus.ACTIVE:
        raise ValidationFailed.from_fields(
            {"sub_account": _("Sub-account '%(name)s' is suspended.") % {"name": sub.name}}
        )
    if (
        not actor.can(Perm.KEYS_MANAGE_ALL)
        and not sub.members.filter(pk=actor.membership.pk).exists()
    ):
        raise ValidationFailed.from_fields(
            {
                "sub_account": _("You are not a member of sub-account '%(name)s'.")
                % {"name": sub.name}
            }
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
            errors.add("name", _("Enter a name."))
        elif len(name) > 120:
            errors.add("name", _("Use at most %(n)d characters.") % {"n": 120})
        else:
            clash = ApiKey.objects.filter(
                organization_id=actor.organization_id, sub_account=sub, name=name
            ).exclude(status=ApiKeyStatus.REVOKED)
            if instance is not None:
                clash = clash.exclude(pk=instance.pk)
            if clash.exists():
                if sub:
                    message = _("A key named '%(name)s' already exists in sub-account '%(sub)s'.")
                else:
                    message = _("A key named '%(name)s' already exists in this organization.")
                errors.add("name", message % {"name": name, "sub": sub.name if sub else ""})
        out["name"] = name
    if "ip_allowlist" in data:
        ips = errors.run(
            "ip_allowlist", validators.normalize_ip_allowlist, data["ip_allowlist"] or []
        )
        out["ip_allowlist"] = ips or []
    if "priority" in data:
        if data["priority"] not in Priority.values:
            errors.add("priority", _("Choose high, normal or low."))
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


def _check_pin(actor: Actor, pinned_node_id: int) -> None:
    """Only platform staff pin a key to a node, and to a node's id."""
    user = actor.user
    if not (user.is_active and user.is_staff):
        raise PermissionDenied(_("Only platform staff may pin a key to a node."))
    if not isinstance(pinned_node_id, int) or pinned_node_id <= 0:
        raise ValidationFailed.from_fields({"pinned_node_id": _("Give a node's id.")})


def _issue_params(key: ApiKey, values: dict[str, Any]) -> dict[str, Any]:
    """The audit trail's record of a new key: its limits, prefix and how it was made."""
    params = _audit_params(values) | {"prefix": key.prefix}
    if key.test_traffic:
        params["test_traffic"] = True
    if key.pinned_node_id is not None:
        params["pinned_node_id"] = key.pinned_node_id
    if key.sub_account:
        params["sub_account"] = key.sub_account.name
    return params


def api_key_issue(
    *,
    actor: Actor,
    name: str,
    sub_account_id: int | None = None,
    test_traffic: bool = False,
    pinned_node_id: int | None = None,
    **fields,
) -> tuple[ApiKey, str]:
    """Create a key; returns it with the raw secret, which is never retrievable again.

    ``test_traffic``: a load test's key whose calls are not billed (see
    ``ApiKey.test_traffic``); only console.features.capacity passes it, and no form
    or API field reaches it.

    ``pinned_node_id`` (platform staff only, for a load test of one channel)
    pins every call of the key to that inference node: no other node, no
    fallback model. It is no key field: no form or API can set or change it.
    The caller checks that the node exists (accounts cannot see nodes)."""
    _require_key_management(actor)
    if pinned_node_id is not None:
        _check_pin(actor, pinned_node_id)
    unknown = set(fields) - set(KEY_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), _("Unknown field.")))
    sub = _resolve_sub_account(actor, sub_account_id)
    org_cap = None if manages_all_keys(actor) else developer_cap(actor)
    if org_cap is not None and fields.get("spend_cap_monthly") in (None, ""):
        fields["spend_cap_monthly"] = org_cap  # the organization's default for developers
    values = _clean(actor, {"name": name, **fields}, sub=sub)
    check_ceiling(actor, values, key=None)
    public_id, raw, digest = key_secrets.new_secret(key_secrets.KEY_PREFIX)
    try:
        with transaction.atomic():
            key = ApiKey(
                organization_id=actor.organization_id,
                sub_account=sub,
                owner=actor.user,
                public_id=public_id,
                secret_hash=digest,
                test_traffic=bool(test_traffic),
                pinned_node_id=pinned_node_id,
                **values,
            )
            key.ceiling = ceiling_after(actor, key, values, issued=True)
            key.save(force_insert=True)
            audit_record(
                actor=actor, action="api_key.issue", target=key, params=_issue_params(key, values)
            )
    except IntegrityError:
        raise ValidationFailed.from_fields(
            {"name": _("A key named '%(name)s' already exists.") % {"name": values["name"]}}
        ) from None
    return key, raw


def api_key_update(*, actor: Actor, key_id: int, **fields) -> ApiKey:
    _require_key_management(actor)
    unknown = set(fields) - set(KEY_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), _("Unknown field.")))
    with transaction.atomic():
        key = get_api_key(actor, key_id, lock=True)
        if key.status == ApiKeyStatus.REVOKED:
            raise Conflict(_("A revoked key cannot be changed."), code="key_revoked")
        values = _clean(actor, fields, sub=key.sub_account, instance=key)
        check_ceiling(actor, values, key=key)
        ceiling = ceiling_after(actor, key, values, issued=False)
        diff = changed(key, values)
        if diff or ceiling != key.ceiling:
            key.ceiling = ceiling
            key.save()
        if diff:
            audit_record(actor=actor, action="api_key.update", target=key, params=diff)
    return key


def _may_receive_secret(actor: Actor, key: ApiKey) -> bool:
    owner_role = None
    if key.owner_id is not None:
        owner_role = (
            Membership.objects.filter(organization_id=key.organization_id, user_id=key.owner_id)
            .values_list("role", flat=True)
            .first()
        )
    return can_receive_key_secret(
        actor.role,
        own_key=key.owner_id == actor.user.pk,
        owner_role=owner_role,
        has_owner=key.owner_id is not None,
    )


def api_key_rotate(*, actor: Actor, key_id: int, grace_seconds: int = 0) -> tuple[ApiKey, str]:
    """Give the key a new secret (and prefix). With a grace period the old
    secret keeps working until it ends; otherwise it stops at once.

    Returns the key and its new secret, or ``""`` in place of the secret when
    the permission matrix does not let ``actor`` see it (an admin rotating an
    owner's key): then it is kept sealed for the key's owner to collect once
    (``api_key_collect_secret``)."""
    _require_key_management(actor)
    if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int) or grace_seconds < 0:
        raise ValidationFailed.from_fields(
            {"grace_seconds": _("Enter a whole number of seconds, 0 or more.")}
        )
    if timedelta(seconds=grace_seconds) > MAX_GRACE:
        raise ValidationFailed.from_fields(
            {"grace_seconds": _("The grace period can be at most 30 days.")}
        )
    with transaction.atomic():
        key = get_api_key(actor, key_id, lock=True)
        if not key.is_usable:
            raise Conflict(
                _("This key is %(status)s; it cannot be rotated.")
                % {"status": _STATUS_WORDS.get(key.effective_status, key.effective_status)},
                code="key_not_active",
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
        shown = _may_receive_secret(actor, key)
        key.pending_secret = "" if shown else raw
        key.save()
        audit_record(
            actor=actor,
            action="api_key.rotate",
            target=key,
            params={
                "old_prefix": old_prefix,
                "new_prefix": key.prefix,
                "grace_seconds": grace_seconds,
                "secret_shown_to": "rotator" if shown else "owner",
            },
        )
    return key, (raw if shown else "")


def api_key_collect_secret(*, actor: Actor, key_id: int) -> str:
    """The new secret someone else's rotation left for the key's owner: shown
    to the owner once, then gone. ``""`` when there is none waiting."""
    _require_key_management(actor)
    with transaction.atomic():
        key = get_api_key(actor, key_id, lock=True)
        if key.owner_id != actor.user.pk or not key.pending_secret:
            return ""
        raw = key.pending_secret
        key.pending_secret = ""
        key.save(update_fields=["pending_secret"])
        audit_record(
            actor=actor,
            action="api_key.secret_collect",
            target=key,
            params={"prefix": key.prefix},
        )
    return raw


def api_key_revoke(*, actor: Actor, key_id: int) -> ApiKey:
    _require_key_management(actor)
    with transaction.atomic():
        key = get_api_key(actor, key_id, lock=True)
        if key.status == ApiKeyStatus.REVOKED:
            raise Conflict(_("This key is already revoked."), code="key_revoked")
        key.status = ApiKeyStatus.REVOKED
        key.revoked_at = timezone.now()
        key.previous_valid_until = None
        key.pending_secret = ""
        key.save(update_fields=["status", "revoked_at", "previous_valid_until", "pending_secret"])
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


class KeyDisposal(StrEnum):
    """What becomes of a departing member's keys."""

    REVOKE = "revoke"
    HAND_OVER = "hand_over"


def member_keys_dispose(
    *, actor: Actor, member: Membership, disposal: str, recipient: Membership | None
) -> list[str]:
    """Revoke a departing member's keys in this organization, or hand them to
    ``recipient``; each key audited. Part of removing the member (the caller's
    transaction and permission check); every gateway hears of each key's change
    when it commits (``gateway_bridge.notify``). Returns the keys' prefixes."""
    keys = list(
        ApiKey.objects.select_for_update(of=("self",))
        .filter(organization_id=member.organization_id, owner_id=member.user_id)
        .exclude(status=ApiKeyStatus.REVOKED)
        .select_related("sub_account")
        .order_by("pk")
    )
    if disposal == KeyDisposal.HAND_OVER and keys:
        _check_recipient(member, recipient, keys)
    now = timezone.now()
    for key in keys:
        key.pending_secret = ""
        if disposal == KeyDisposal.HAND_OVER:
            assert recipient is not None  # _check_recipient refused a hand-over to no one
            key.owner_id = recipient.user_id
            key.save(update_fields=["owner", "pending_secret"])
            audit_record(
                actor=actor,
                action="api_key.hand_over",
                target=key,
                params={
                    "prefix": key.prefix,
                    "from": member.user.email,
                    "to": recipient.user.email,
                },
            )
        else:
            key.status = ApiKeyStatus.REVOKED
            key.revoked_at = now
            key.previous_valid_until = None
            key.save(
                update_fields=["status", "revoked_at", "previous_valid_until", "pending_secret"]
            )
            audit_record(
                actor=actor,
                action="api_key.revoke",
                target=key,
                params={"prefix": key.prefix, "reason": "member_removed"},
            )
    return [key.prefix for key in keys]


def _check_recipient(member: Membership, recipient: Membership | None, keys) -> None:
    if recipient is None or recipient.organization_id != member.organization_id:
        raise ValidationFailed.from_fields(
            {"hand_over_to": _("Choose a member of this organization to take the keys.")}
        )
    if recipient.pk == member.pk:
        raise ValidationFailed.from_fields(
            {"hand_over_to": _("Choose someone other than the member being removed.")}
        )
    if not has_perm(recipient.role, Perm.KEYS_MANAGE_OWN):
        raise ValidationFailed.from_fields(
            {
                "hand_over_to": _(
                    "%(email)s (%(role)s) cannot hold API keys; "
                    "choose an owner, admin or developer."
                )
                % {"email": recipient.user.email, "role": role_noun(recipient.role)}
            }
        )
    if not has_perm(recipient.role, Perm.KEYS_MANAGE_ALL):
        theirs = set(recipient.sub_accounts.values_list("pk", flat=True))
        outside = sorted(
            {k.sub_account.name for k in keys if k.sub_account and k.sub_account_id not in theirs}
        )
        if outside:
            raise ValidationFailed.from_fields(
                {
                    "hand_over_to": _(
                        "%(email)s is not a member of %(subs)s; add them there first "
                        "or choose someone else."
                    )
                    % {"email": recipient.user.email, "subs": ", ".join(outside)}
                }
            )
