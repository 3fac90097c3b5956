"""Celery tasks of the accounts app: thin calls into services. Tasks import
services; services enqueue a task by its name (``console.kernel.celery.registered_task``)
and never import this module."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _

from accounts.models import Invitation, User, role_noun
from accounts.services import api_keys_expire_due
from console.kernel import crypto


@shared_task(
    name="accounts.send_invitation_email",
    autoretry_for=(OSError,),
    retry_backoff=True,
    max_retries=5,
)
def send_invitation_email(invitation_id: int, sealed_token: str) -> None:
    """E-mail the invitation link. ``sealed_token`` is the one-time token sealed
    with ``console.kernel.crypto.seal`` (a task queued before sealing began carries it
    in clear; both work)."""
    raw_token = crypto.unseal(sealed_token) if crypto.is_sealed(sealed_token) else sealed_token
    invitation = (
        Invitation.objects.select_related("organization", "invited_by")
        .filter(pk=invitation_id)
        .first()
    )
    if invitation is None or invitation.status != "pending":
        return
    link = settings.CONSOLE_BASE_URL + reverse("accounts:invitation_accept", args=[raw_token])
    with translation.override(_invitation_language(invitation)):
        org = invitation.organization.name
        inviter = invitation.invited_by.display_name if invitation.invited_by else _("An admin")
        send_mail(
            subject=_("You are invited to %(org)s") % {"org": org},
            message=_(
                "%(inviter)s invited you to join %(org)s as %(role)s.\n\n"
                "Accept the invitation here (the link works once and expires "
                "%(expires)s UTC):\n%(link)s\n"
            )
            % {
                "inviter": inviter,
                "org": org,
                "role": role_noun(invitation.role),
                "expires": f"{invitation.expires_at:%Y-%m-%d %H:%M}",
                "link": link,
            },
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[invitation.email],
        )


def _invitation_language(invitation: Invitation) -> str:
    """The language the invited person chose, when they already have an
    account; else the inviter's (a team usually shares one); else the default."""
    languages = dict(settings.LANGUAGES)
    invitee = User.objects.filter(email__iexact=invitation.email).first()
    for person in (invitee, invitation.invited_by):
        language = getattr(person, "language", "")
        if language in languages:
            return language
    return settings.LANGUAGE_CODE


@shared_task(name="accounts.expire_keys")
def expire_keys() -> int:
    return api_keys_expire_due()
