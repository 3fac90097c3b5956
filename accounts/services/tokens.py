"""Personal access tokens for the REST API (automation), distinct from gateway keys."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts import keys as key_secrets
from accounts import validators
from accounts.actors import Actor
from accounts.audit import audit_record
from accounts.errors import Conflict, NotFound
from accounts.models import PersonalAccessToken, TokenScope
from accounts.permissions import Perm
from accounts.services._common import FieldErrors


def personal_access_token_issue(
    *, actor: Actor, name: str, expires_at=None, scope: str = TokenScope.READ_WRITE
) -> tuple[PersonalAccessToken, str]:
    """A new token acting as the actor; ``scope`` read-only tokens may only
    read, ``expires_at`` (None: never) ends it."""
    actor.require(Perm.TOKENS_MANAGE_OWN)
    errors = FieldErrors()
    if scope not in TokenScope.values:
        errors.add("scope", _("Choose read only or read and write."))
    name = (name or "").strip()
    if not name:
        errors.add("name", _("Enter a name."))
    elif len(name) > 120:
        errors.add("name", _("Use at most %(n)d characters.") % {"n": 120})
    expires_at = errors.run("expires_at", validators.validate_future, expires_at)
    errors.raise_if_any()
    public_id, raw, digest = key_secrets.new_secret(key_secrets.TOKEN_PREFIX)
    with transaction.atomic():
        token = PersonalAccessToken.objects.create(
            membership=actor.membership,
            name=name,
            public_id=public_id,
            token_hash=digest,
            expires_at=expires_at,
            scope=scope,
        )
        audit_record(
            actor=actor,
            action="access_token.issue",
            target=token,
            label=name,
            params={
                "prefix": token.prefix,
                "scope": token.scope,
                "expires_at": expires_at.isoformat() if expires_at else None,
            },
        )
    return token, raw


def personal_access_token_revoke(*, actor: Actor, token_id: int) -> PersonalAccessToken:
    actor.require(Perm.TOKENS_MANAGE_OWN)
    with transaction.atomic():
        try:
            token = PersonalAccessToken.objects.select_for_update().get(
                pk=token_id, membership=actor.membership
            )
        except (PersonalAccessToken.DoesNotExist, ValueError, TypeError):
            raise NotFound(_("No such access token.")) from None
        if token.revoked_at:
            raise Conflict(_("This token is already revoked."))
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action="access_token.revoke",
            target=token,
            label=token.name,
            params={"prefix": token.prefix},
        )
    return token


def personal_access_token_authenticate(raw: str) -> PersonalAccessToken | None:
    public_id = key_secrets.split_public_id(raw, key_secrets.TOKEN_PREFIX)
    presented = key_secrets.keyed_hash(raw if isinstance(raw, str) else "")
    token = None
    if public_id:
        token = (
            PersonalAccessToken.objects.select_related(
                "membership__user", "membership__organization"
            )
            .filter(public_id=public_id)
            .first()
        )
    if token is None:
        key_secrets.hashes_match(presented, "")
        return None
    if not key_secrets.hashes_match(presented, token.token_hash):
        return None
    now = timezone.now()
    if token.revoked_at or (token.expires_at and token.expires_at <= now):
        return None
    if not token.membership.user.is_active:
        return None
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        PersonalAccessToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
