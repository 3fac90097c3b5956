"""Organizations, memberships and invitations."""

from __future__ import annotations

import hashlib
import secrets
import zoneinfo
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts import validators
from accounts.actors import Actor
from accounts.audit import audit_record
from accounts.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from accounts.models import (
    BillingMode,
    Invitation,
    Membership,
    Organization,
    Role,
    User,
    role_noun,
)
from accounts.permissions import Perm, can_assign_role
from accounts.services._common import FieldErrors, changed
from accounts.services.api_keys import KeyDisposal, member_keys_dispose
from console.kernel import crypto
from console.kernel.celery import registered_task
from console.kernel.money import CURRENCY_CODES

# An invitation's state as a sentence names it (``Invitation.status`` codes).
_INVITATION_STATES = {
    "accepted": gettext_lazy("accepted"),
    "revoked": gettext_lazy("revoked"),
    "expired": gettext_lazy("expired"),
}


def _clean_org_fields(data: dict, errors: FieldErrors) -> dict:
    out = {}
    if "name" in data:
        name = (data["name"] or "").strip()
        if not name:
            errors.add("name", _("Enter a name."))
        elif len(name) > 120:
            errors.add("name", _("Use at most %(n)d characters.") % {"n": 120})
        out["name"] = name
    if "currency" in data:
        cur = (data["currency"] or "").strip().upper()
        if cur not in CURRENCY_CODES:
            errors.add(
                "currency",
                _("'%(code)s' is not a supported ISO 4217 currency code.") % {"code": cur},
            )
        out["currency"] = cur
    if "timezone" in data:
        tz = (data["timezone"] or "").strip()
        if tz not in zoneinfo.available_timezones():
            errors.add(
                "timezone",
                _("'%(tz)s' is not a known IANA time zone (e.g. Europe/Berlin).") % {"tz": tz},
            )
        out["timezone"] = tz
    if "billing_mode" in data:
        if data["billing_mode"] not in BillingMode.values:
            errors.add("billing_mode", _("Choose prepaid or postpaid."))
        out["billing_mode"] = data["billing_mode"]
    if "developer_key_cap" in data:
        cap = errors.run(
            "developer_key_cap",
            validators.validate_cap,
            data["developer_key_cap"],
            _("Default cap for developer keys"),
        )
        out["developer_key_cap"] = cap
    if "discount_rate" in data:
        try:
            rate = Decimal(str(data["discount_rate"]))
        except InvalidOperation:
            rate = None
        if rate is None or not rate.is_finite() or not (Decimal(0) <= rate <= Decimal(1)):
            errors.add(
                "discount_rate",
                _("Enter the share of list price paid, between 0 and 1 (e.g. 0.85)."),
            )
        elif int(rate.as_tuple().exponent) < -6:  # finite: the exponent is a number
            errors.add("discount_rate", _("Use at most six decimal places."))
        else:
            out["discount_rate"] = rate
    return out


def organization_create(
    *,
    name: str,
    owner: User,
    slug: str | None = None,
    currency: str = "USD",
    timezone_name: str = "UTC",
    billing_mode: str = BillingMode.POSTPAID,
    discount_rate: Decimal | str = Decimal("1"),
    ip: str | None = None,
) -> Organization:
    errors = FieldErrors()
    values = _clean_org_fields(
        {
            "name": name,
            "currency": currency,
            "timezone": timezone_name,
            "billing_mode": billing_mode,
            "discount_rate": discount_rate,
        },
        errors,
    )
    errors.raise_if_any()
    base = slugify(slug or name)[:50] or "org"
    with transaction.atomic():
        candidate, n = base, 1
        while Organization.objects.filter(slug=candidate).exists():
            n += 1
            candidate = f"{base}-{n}"
        org = Organization.objects.create(slug=candidate, **values)
        membership = Membership.objects.create(user=owner, organization=org, role=Role.OWNER)
        audit_record(
            actor=Actor(membership, ip),
            action="organization.create",
            target=org,
            params={"currency": org.currency, "billing_mode": org.billing_mode},
        )
    return org


# Commercial terms are set by the platform's staff, not by the tenant's admins.
COMMERCIAL_FIELDS = frozenset({"currency", "billing_mode", "discount_rate"})
ORG_FIELDS = frozenset({"name", "timezone", "developer_key_cap"}) | COMMERCIAL_FIELDS


def organization_update(*, actor: Actor, **fields) -> Organization:
    actor.require(Perm.ORG_MANAGE)
    unknown = set(fields) - ORG_FIELDS
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), _("Unknown field.")))
    if COMMERCIAL_FIELDS & set(fields) and not actor.user.is_staff:
        raise PermissionDenied(
            _("Currency, billing mode and discount are set by the platform's staff.")
        )
    errors = FieldErrors()
    values = _clean_org_fields(fields, errors)
    errors.raise_if_any()
    with transaction.atomic():
        org = Organization.objects.select_for_update().get(pk=actor.organization_id)
        diff = changed(org, values)
        if diff:
            org.save()
            audit_record(actor=actor, action="organization.update", target=org, params=diff)
    return org


# --- memberships -------------------------------------------------------------


def _get_membership(
    actor: Actor, membership_id: int | None, *, lock: bool = False
) -> Membership:
    qs = Membership.objects.select_related("user").filter(organization_id=actor.organization_id)
    if lock:
        qs = qs.select_for_update()
    try:
        return qs.get(pk=membership_id)
    except (Membership.DoesNotExist, ValueError, TypeError):
        raise NotFound(_("No such member in this organization.")) from None


def _lock_owners(org_id: int) -> list[Membership]:
    return list(
        Membership.objects.select_for_update()
        .filter(organization_id=org_id, role=Role.OWNER)
        .order_by("pk")
    )


def _check_may_manage(actor: Actor, target: Membership) -> None:
    actor.require(Perm.MEMBERS_MANAGE)
    if target.role == Role.OWNER and actor.role != Role.OWNER:
        raise PermissionDenied(_("Only an owner can change or remove another owner."))


def membership_change_role(*, actor: Actor, membership_id: int, role: str) -> Membership:
    if role not in Role.values:
        raise ValidationFailed.from_fields(
            {
                "role": _("'%(role)s' is not a role; choose one of %(roles)s.")
                % {"role": role, "roles": ", ".join(Role.values)}
            }
        )
    with transaction.atomic():
        owners = _lock_owners(actor.organization_id)
        target = _get_membership(actor, membership_id, lock=True)
        _check_may_manage(actor, target)
        if not can_assign_role(actor.role, role):
            raise PermissionDenied(
                _("Your role (%(mine)s) cannot grant the %(role)s role.")
                % {"mine": role_noun(actor.role), "role": role_noun(role)}
            )
        if target.role == role:
            return target
        if target.role == Role.OWNER and len(owners) <= 1:
            raise Conflict(
                _("This is the organization's last owner; make someone else owner first."),
                code="last_owner",
            )
        old = target.role
        target.role = role
        target.save(update_fields=["role"])
        audit_record(
            actor=actor,
            action="member.role_change",
            target=target,
            label=target.user.email,
            params={"email": target.user.email, "from": old, "to": role},
        )
    return target


def membership_remove(
    *,
    actor: Actor,
    membership_id: int,
    keys: str = KeyDisposal.REVOKE,
    hand_over_to: int | None = None,
) -> None:
    """Remove a member (or leave). Their gateway keys in this organization are
    revoked (``keys="revoke"``, the default) or handed over to the member
    ``hand_over_to`` (``keys="hand_over"``), in the same transaction: a
    removed member's keys never keep working."""
    if keys not in {d.value for d in KeyDisposal}:
        raise ValidationFailed.from_fields({"keys": _("Choose revoke or hand_over.")})
    with transaction.atomic():
        owners = _lock_owners(actor.organization_id)
        target = _get_membership(actor, membership_id, lock=True)
        if target.pk != actor.membership.pk:
            _check_may_manage(actor, target)
        if target.role == Role.OWNER and len(owners) <= 1:
            raise Conflict(
                _("This is the organization's last owner and cannot be removed."),
                code="last_owner",
            )
        recipient = None
        if keys == KeyDisposal.HAND_OVER:
            try:
                recipient = _get_membership(actor, hand_over_to)
            except NotFound:
                recipient = None
        prefixes = member_keys_dispose(
            actor=actor, member=target, disposal=keys, recipient=recipient
        )
        email = target.user.email
        params = {"email": email, "role": target.role, "keys": keys, "key_prefixes": prefixes}
        if recipient is not None:
            params["hand_over_to"] = recipient.user.email
        audit_record(actor=actor, action="member.remove", target=target, label=email, params=params)
        target.delete()


# --- invitations -------------------------------------------------------------


def _token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def invitation_create(*, actor: Actor, email: str, role: str) -> tuple[Invitation, str]:
    """Invite ``email`` with ``role``; returns the invitation and its one-time token.
    The e-mail goes out from a Celery worker after the transaction commits."""
    actor.require(Perm.MEMBERS_MANAGE)
    errors = FieldErrors()
    email = (email or "").strip().lower()
    if "@" not in email or len(email) > 254 or " " in email:
        errors.add("email", _("Enter a valid e-mail address."))
    if role not in Role.values:
        errors.add(
            "role",
            _("'%(role)s' is not a role; choose one of %(roles)s.")
            % {"role": role, "roles": ", ".join(Role.values)},
        )
    elif not can_assign_role(actor.role, role):
        errors.add(
            "role",
            _("Your role (%(mine)s) cannot invite with the %(role)s role.")
            % {"mine": role_noun(actor.role), "role": role_noun(role)},
        )
    errors.raise_if_any()
    if Membership.objects.filter(organization_id=actor.organization_id, user__email=email).exists():
        raise ValidationFailed.from_fields(
            {"email": _("%(email)s is already a member.") % {"email": email}}
        )
    raw = secrets.token_urlsafe(32)
    now = timezone.now()
    with transaction.atomic():
        # A new invitation replaces any pending one for the same address.
        Invitation.objects.filter(
            organization_id=actor.organization_id,
            email=email,
            accepted_at__isnull=True,
            revoked_at__isnull=True,
        ).update(revoked_at=now)
        invitation = Invitation.objects.create(
            organization_id=actor.organization_id,
            email=email,
            role=role,
            token_hash=_token_hash(raw),
            invited_by=actor.user,
            expires_at=now + timedelta(hours=settings.INVITATION_TTL_HOURS),
        )
        audit_record(
            actor=actor,
            action="invitation.create",
            target=invitation,
            label=email,
            params={"email": email, "role": role, "expires_at": invitation.expires_at.isoformat()},
        )
        email_task = registered_task("accounts.send_invitation_email")
        # Sealed: the broker (a file, a Redis list) and any log of the task's
        # arguments only ever hold ciphertext; the task unseals it to write the link.
        sealed = crypto.seal(raw)
        transaction.on_commit(lambda: email_task.delay(invitation.pk, sealed))
    return invitation, raw


def invitation_lookup(raw_token: str) -> Invitation:
    """The pending invitation for a token, or a clear error saying why not."""
    try:
        invitation = Invitation.objects.select_related("organization").get(
            token_hash=_token_hash(raw_token or "")
        )
    except Invitation.DoesNotExist:
        raise NotFound(_("This invitation link is not valid."), code="invitation_invalid") from None
    status = invitation.status
    if status == "accepted":
        raise Conflict(_("This invitation has already been used."), code="invitation_used")
    if status == "revoked":
        raise Conflict(_("This invitation was withdrawn."), code="invitation_revoked")
    if status == "expired":
        raise Conflict(
            _("This invitation has expired; ask an admin for a new one."),
            code="invitation_expired",
        )
    return invitation


def invitation_accept(*, raw_token: str, user: User, ip: str | None = None) -> Membership:
    with transaction.atomic():
        invitation = invitation_lookup(raw_token)
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.accepted_at:
            raise Conflict(_("This invitation has already been used."), code="invitation_used")
        if invitation.email.lower() != user.email.lower():
            raise PermissionDenied(
                _("This invitation is for %(email)s; sign in with that address.")
                % {"email": invitation.email},
                code="invitation_wrong_user",
            )
        try:
            with transaction.atomic():
                membership = Membership.objects.create(
                    user=user, organization_id=invitation.organization_id, role=invitation.role
                )
        except IntegrityError:
            raise Conflict(_("You are already a member of this organization.")) from None
        invitation.accepted_at = timezone.now()
        invitation.accepted_by = user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        audit_record(
            actor=Actor(membership, ip),
            action="invitation.accept",
            target=membership,
            label=user.email,
            params={"email": user.email, "role": membership.role},
        )
    return membership


def invitation_accept_new_user(
    *, raw_token: str, password: str, full_name: str = "", ip: str | None = None
) -> Membership:
    """Accept an invitation for an address with no account yet: create the user."""
    invitation = invitation_lookup(raw_token)
    if User.objects.filter(email__iexact=invitation.email).exists():
        raise Conflict(
            _("An account with this address exists; sign in to accept."), code="user_exists"
        )
    candidate = User(email=invitation.email, full_name=full_name)
    try:
        validate_password(password, candidate)
    except ValidationError as exc:
        raise ValidationFailed.from_fields({"password": list(exc.messages)}) from None
    with transaction.atomic():
        user = User.objects.create_user(invitation.email, password, full_name=full_name.strip())
        return invitation_accept(raw_token=raw_token, user=user, ip=ip)


def invitation_revoke(*, actor: Actor, invitation_id: int) -> Invitation:
    actor.require(Perm.MEMBERS_MANAGE)
    with transaction.atomic():
        try:
            invitation = Invitation.objects.select_for_update().get(
                pk=invitation_id, organization_id=actor.organization_id
            )
        except (Invitation.DoesNotExist, ValueError, TypeError):
            raise NotFound(_("No such invitation in this organization.")) from None
        if invitation.status != "pending":
            raise Conflict(
                _("This invitation is already %(status)s.")
                % {"status": _INVITATION_STATES.get(invitation.status, invitation.status)}
            )
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action="invitation.revoke",
            target=invitation,
            label=invitation.email,
            params={"email": invitation.email},
        )
    return invitation
