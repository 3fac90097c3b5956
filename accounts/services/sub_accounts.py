"""Sub-accounts: a team or customer inside an organization, whose limits are
a ceiling for the keys issued under it."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _

from accounts.actors import Actor
from accounts.audit import audit_record
from accounts.errors import NotFound, ValidationFailed
from accounts.models import Membership, SubAccount, SubAccountStatus
from accounts.permissions import Perm
from accounts.services._common import (
    CAP_FIELDS,
    LIMIT_FIELDS,
    RATE_FIELDS,
    FieldErrors,
    changed,
    clean_limits,
    clean_unique_name,
)


def _clean(actor: Actor, data: dict, *, instance: SubAccount | None = None) -> dict:
    errors = FieldErrors()
    out = clean_limits(data, errors, org_models=actor.organization.allowed_models)
    if "name" in data:
        out["name"] = clean_unique_name(
            errors,
            data["name"],
            SubAccount.objects.filter(organization_id=actor.organization_id),
            noun="sub-account",
            instance=instance,
        )
    if "status" in data:
        if data["status"] not in SubAccountStatus.values:
            errors.add("status", _("Choose active or suspended."))
        out["status"] = data["status"]
    if instance is not None:
        # Tightening a sub-account below its existing keys' limits is a clear error.
        for key in instance.api_keys.exclude(status="revoked"):
            for field in (*CAP_FIELDS, *RATE_FIELDS):
                new, own = out.get(field, getattr(instance, field)), getattr(key, field)
                if new is not None and own is not None and own > new:
                    errors.add(
                        field,
                        _("Key '%(name)s' has a higher limit; lower it first.")
                        % {"name": key.name},
                    )
                    break
            # An empty list allows every model; a key's own list must stay inside.
            models = out.get("allowed_models", instance.allowed_models)
            outside = sorted(set(key.allowed_models) - set(models)) if models else []
            if outside:
                errors.add(
                    "allowed_models",
                    _("Key '%(name)s' allows %(models)s; narrow the key first.")
                    % {"name": key.name, "models": ", ".join(outside)},
                )
    errors.raise_if_any()
    return out


def get_sub_account(actor: Actor, sub_account_id, *, lock: bool = False) -> SubAccount:
    qs = SubAccount.objects.filter(organization_id=actor.organization_id)
    if lock:
        qs = qs.select_for_update()
    try:
        return qs.get(pk=sub_account_id)
    except (SubAccount.DoesNotExist, ValueError, TypeError):
        raise NotFound(_("No such sub-account in this organization.")) from None


def sub_account_create(*, actor: Actor, name: str, **limits) -> SubAccount:
    actor.require(Perm.SUBACCOUNTS_MANAGE)
    unknown = set(limits) - set(LIMIT_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), _("Unknown field.")))
    values = _clean(actor, {"name": name, **limits})
    with transaction.atomic():
        sub = SubAccount.objects.create(organization_id=actor.organization_id, **values)
        audit_record(actor=actor, action="sub_account.create", target=sub, params=_public(values))
    return sub


def sub_account_update(*, actor: Actor, sub_account_id: int, **fields) -> SubAccount:
    actor.require(Perm.SUBACCOUNTS_MANAGE)
    unknown = set(fields) - {*LIMIT_FIELDS, "name", "status"}
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), _("Unknown field.")))
    with transaction.atomic():
        sub = get_sub_account(actor, sub_account_id, lock=True)
        values = _clean(actor, fields, instance=sub)
        diff = changed(sub, values)
        if diff:
            sub.save()
            audit_record(actor=actor, action="sub_account.update", target=sub, params=diff)
    return sub


def sub_account_set_members(
    *, actor: Actor, sub_account_id: int, membership_ids: list[int]
) -> SubAccount:
    actor.require(Perm.SUBACCOUNTS_MANAGE)
    with transaction.atomic():
        sub = get_sub_account(actor, sub_account_id, lock=True)
        wanted = set(membership_ids)
        members = list(
            Membership.objects.filter(organization_id=actor.organization_id, pk__in=wanted)
        )
        if len(members) != len(wanted):
            raise ValidationFailed.from_fields(
                {"members": _("Some of the chosen members are not in this organization.")}
            )
        before = set(sub.members.values_list("pk", flat=True))
        sub.members.set(members)
        if before != wanted:
            audit_record(
                actor=actor,
                action="sub_account.members",
                target=sub,
                params={
                    "added": sorted(m.user.email for m in members if m.pk not in before),
                    "removed_ids": sorted(before - wanted),
                },
            )
    return sub


def _public(values: dict) -> dict:
    return {k: v for k, v in values.items() if v not in (None, [], "")}
