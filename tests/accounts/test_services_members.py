"""Account services: memberships, invitations, organizations and access tokens."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from accounts.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from accounts.models import (
    AuditEvent,
    Invitation,
    Membership,
    Role,
)
from accounts.services import (
    invitation_accept,
    invitation_accept_new_user,
    invitation_create,
    invitation_lookup,
    invitation_revoke,
    membership_change_role,
    membership_remove,
    organization_create,
    organization_update,
    personal_access_token_authenticate,
    personal_access_token_issue,
    personal_access_token_revoke,
)
from accounts.tasks import send_invitation_email
from console.kernel import crypto
from tests.accounts.conftest import Snapshot
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


# --- memberships --------------------------------------------------------------


def test_unknown_role_is_refused(owner_actor, developer):
    with pytest.raises(ValidationFailed) as exc:
        membership_change_role(actor=owner_actor, membership_id=developer.pk, role="superuser")
    assert "'superuser' is not a role" in exc.value.fields["role"][0]
    developer.refresh_from_db()
    assert developer.role == Role.DEVELOPER


def test_owner_changes_roles_and_it_is_audited(owner_actor, developer):
    membership_change_role(actor=owner_actor, membership_id=developer.pk, role=Role.FINANCE)
    developer.refresh_from_db()
    assert developer.role == Role.FINANCE
    event = AuditEvent.objects.get(action="member.role_change")
    assert event.params == {"email": developer.user.email, "from": "developer", "to": "finance"}
    # No-op change records nothing.
    membership_change_role(actor=owner_actor, membership_id=developer.pk, role=Role.FINANCE)
    assert AuditEvent.objects.filter(action="member.role_change").count() == 1


def test_last_owner_cannot_be_demoted(owner, owner_actor):
    with pytest.raises(Conflict) as exc:
        membership_change_role(actor=owner_actor, membership_id=owner.pk, role=Role.ADMIN)
    assert exc.value.code == "last_owner"
    owner.refresh_from_db()
    assert owner.role == Role.OWNER
    assert not AuditEvent.objects.exists()


def test_last_owner_cannot_be_removed_even_by_themselves(owner, owner_actor):
    with pytest.raises(Conflict) as exc:
        membership_remove(actor=owner_actor, membership_id=owner.pk)
    assert exc.value.code == "last_owner"
    assert Membership.objects.filter(pk=owner.pk).exists()
    assert not AuditEvent.objects.exists()


def test_one_of_two_owners_can_be_demoted_and_removed(org, owner, owner_actor):
    second = MembershipFactory(organization=org, role=Role.OWNER)
    membership_change_role(actor=owner_actor, membership_id=second.pk, role=Role.ADMIN)
    membership_change_role(actor=owner_actor, membership_id=second.pk, role=Role.OWNER)
    membership_remove(actor=owner_actor, membership_id=owner.pk)  # leave
    assert list(Membership.objects.filter(organization=org, role=Role.OWNER)) == [second]
    assert AuditEvent.objects.filter(action="member.remove").count() == 1


def test_admin_cannot_grant_owner(admin_actor, developer, admin):
    with pytest.raises(PermissionDenied):
        membership_change_role(actor=admin_actor, membership_id=developer.pk, role=Role.OWNER)
    with pytest.raises(PermissionDenied):
        membership_change_role(actor=admin_actor, membership_id=admin.pk, role=Role.OWNER)
    developer.refresh_from_db()
    admin.refresh_from_db()
    assert (developer.role, admin.role) == (Role.DEVELOPER, Role.ADMIN)


def test_admin_cannot_change_or_remove_an_owner(admin_actor, owner):
    with pytest.raises(PermissionDenied):
        membership_change_role(actor=admin_actor, membership_id=owner.pk, role=Role.VIEWER)
    with pytest.raises(PermissionDenied):
        membership_remove(actor=admin_actor, membership_id=owner.pk)
    owner.refresh_from_db()
    assert owner.role == Role.OWNER


def test_admin_manages_non_owners(admin_actor, developer, viewer):
    membership_change_role(actor=admin_actor, membership_id=developer.pk, role=Role.ADMIN)
    membership_remove(actor=admin_actor, membership_id=viewer.pk)
    assert not Membership.objects.filter(pk=viewer.pk).exists()
    event = AuditEvent.objects.get(action="member.remove")
    assert event.params == {
        "email": viewer.user.email,
        "role": "viewer",
        "keys": "revoke",
        "key_prefixes": [],
    }


def test_any_member_may_leave(viewer, actor_for, owner):
    membership_remove(actor=actor_for(viewer), membership_id=viewer.pk)
    assert not Membership.objects.filter(pk=viewer.pk).exists()


# --- invitations --------------------------------------------------------------


def test_invitation_create_sends_email_after_commit(
    org, admin_actor, invitation_email_delay, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        invitation, raw = invitation_create(
            actor=admin_actor, email="  New.Person@Example.com ", role=Role.DEVELOPER
        )
    assert len(callbacks) == 1
    # The token goes to the e-mail task sealed: the broker never holds it in clear.
    [(invitation_id, sealed)] = [c.args for c in invitation_email_delay.call_args_list]
    assert invitation_id == invitation.pk and raw not in sealed
    assert crypto.unseal(sealed) == raw
    assert invitation.email == "new.person@example.com"
    assert invitation.status == "pending"
    assert invitation.invited_by == admin_actor.user
    assert invitation.token_hash != raw
    assert raw not in repr(AuditEvent.objects.get(action="invitation.create").params)
    expected_expiry = timezone.now() + timedelta(hours=72)
    assert abs((invitation.expires_at - expected_expiry).total_seconds()) < 60


def test_invitation_email_task_sends_the_link(org, admin_actor, settings):
    invitation, raw = invitation_create(actor=admin_actor, email="a@example.com", role="viewer")
    send_invitation_email(invitation.pk, crypto.seal(raw))
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["a@example.com"]
    assert "Acme" in message.subject
    assert f"/invite/{raw}/" in message.body
    # A revoked invitation sends nothing.
    invitation_revoke(actor=admin_actor, invitation_id=invitation.pk)
    send_invitation_email(invitation.pk, raw)
    assert len(mail.outbox) == 1


def test_invitation_create_validation(org, admin_actor, developer, invitation_email_delay):
    with pytest.raises(ValidationFailed) as exc:
        invitation_create(actor=admin_actor, email="not-an-email", role="boss")
    assert set(exc.value.fields) == {"email", "role"}
    with pytest.raises(ValidationFailed, match="cannot invite with the owner role"):
        invitation_create(actor=admin_actor, email="x@example.com", role=Role.OWNER)
    with pytest.raises(ValidationFailed, match="already a member"):
        invitation_create(actor=admin_actor, email=developer.user.email.upper(), role="viewer")
    assert not Invitation.objects.exists()
    assert not AuditEvent.objects.exists()
    invitation_email_delay.assert_not_called()


def test_owner_may_invite_an_owner(owner_actor):
    invitation, _ = invitation_create(actor=owner_actor, email="co@example.com", role=Role.OWNER)
    assert invitation.role == Role.OWNER


def test_new_invitation_replaces_pending_one(org, admin_actor):
    first, first_raw = invitation_create(actor=admin_actor, email="a@example.com", role="viewer")
    second, second_raw = invitation_create(actor=admin_actor, email="a@example.com", role="admin")
    first.refresh_from_db()
    assert first.status == "revoked"
    with pytest.raises(Conflict):
        invitation_lookup(first_raw)
    assert invitation_lookup(second_raw) == second


def test_invitation_accept(org, admin_actor):
    invitation, raw = invitation_create(actor=admin_actor, email="a@example.com", role="finance")
    user = UserFactory(email="a@example.com")
    membership = invitation_accept(raw_token=raw, user=user, ip="198.51.100.1")
    assert membership.organization == org
    assert membership.role == Role.FINANCE
    invitation.refresh_from_db()
    assert invitation.status == "accepted"
    assert invitation.accepted_by == user
    event = AuditEvent.objects.get(action="invitation.accept")
    assert event.actor == user
    assert event.ip == "198.51.100.1"


def test_used_invitation_cannot_be_reused(org, admin_actor):
    _, raw = invitation_create(actor=admin_actor, email="a@example.com", role="viewer")
    user = UserFactory(email="a@example.com")
    invitation_accept(raw_token=raw, user=user)
    with pytest.raises(Conflict) as exc:
        invitation_accept(raw_token=raw, user=user)
    assert exc.value.code == "invitation_used"
    assert Membership.objects.filter(user=user).count() == 1


def test_expired_invitation(org, admin_actor):
    invitation, raw = invitation_create(actor=admin_actor, email="a@example.com", role="viewer")
    Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now())
    user = UserFactory(email="a@example.com")
    before = AuditEvent.objects.count()
    with pytest.raises(Conflict) as exc:
        invitation_accept(raw_token=raw, user=user)
    assert exc.value.code == "invitation_expired"
    assert not Membership.objects.filter(user=user).exists()
    assert AuditEvent.objects.count() == before
    with pytest.raises(Conflict):
        invitation_revoke(actor=admin_actor, invitation_id=invitation.pk)


def test_revoked_invitation(org, admin_actor):
    invitation, raw = invitation_create(actor=admin_actor, email="a@example.com", role="viewer")
    invitation_revoke(actor=admin_actor, invitation_id=invitation.pk)
    assert AuditEvent.objects.filter(action="invitation.revoke").count() == 1
    user = UserFactory(email="a@example.com")
    with pytest.raises(Conflict) as exc:
        invitation_accept(raw_token=raw, user=user)
    assert exc.value.code == "invitation_revoked"
    with pytest.raises(Conflict, match="already revoked"):
        invitation_revoke(actor=admin_actor, invitation_id=invitation.pk)
    assert not Membership.objects.filter(user=user).exists()


def test_invalid_invitation_token(db):
    for token in ("", "nope", None):
        with pytest.raises(NotFound) as exc:
            invitation_lookup(token)
        assert exc.value.code == "invitation_invalid"


def test_invitation_for_someone_else(org, admin_actor):
    invitation, raw = invitation_create(actor=admin_actor, email="a@example.com", role="admin")
    intruder = UserFactory(email="b@example.com")
    snap = Snapshot()
    with pytest.raises(PermissionDenied) as exc:
        invitation_accept(raw_token=raw, user=intruder)
    assert exc.value.code == "invitation_wrong_user"
    assert snap.unchanged()
    invitation.refresh_from_db()
    assert invitation.status == "pending"


def test_invitation_email_match_is_case_insensitive(org, admin_actor):
    _, raw = invitation_create(actor=admin_actor, email="A@Example.com", role="viewer")
    user = UserFactory(email="a@example.com")
    assert invitation_accept(raw_token=raw, user=user).user == user


def test_accepting_when_already_a_member(org, admin_actor):
    invitation, raw = invitation_create(actor=admin_actor, email="a@example.com", role="viewer")
    user = UserFactory(email="a@example.com")
    Membership.objects.create(user=user, organization=org, role=Role.VIEWER)
    with pytest.raises(Conflict, match="already a member"):
        invitation_accept(raw_token=raw, user=user)
    invitation.refresh_from_db()
    assert invitation.status == "pending"
    assert not AuditEvent.objects.filter(action="invitation.accept").exists()


def test_accept_as_new_user(org, admin_actor):
    _, raw = invitation_create(actor=admin_actor, email="new@example.com", role="developer")
    with pytest.raises(ValidationFailed) as exc:
        invitation_accept_new_user(raw_token=raw, password="123")
    assert "password" in exc.value.fields
    membership = invitation_accept_new_user(
        raw_token=raw, password="a-Long-and-Unusual-passphrase-9", full_name=" Nia "
    )
    assert membership.user.email == "new@example.com"
    assert membership.user.full_name == "Nia"
    assert membership.user.check_password("a-Long-and-Unusual-passphrase-9")
    assert membership.role == Role.DEVELOPER


def test_accept_as_new_user_when_account_exists(org, admin_actor):
    _, raw = invitation_create(actor=admin_actor, email="a@example.com", role="viewer")
    UserFactory(email="a@example.com")
    with pytest.raises(Conflict) as exc:
        invitation_accept_new_user(raw_token=raw, password="a-Long-and-Unusual-passphrase-9")
    assert exc.value.code == "user_exists"


# --- organizations and access tokens ------------------------------------------


def test_organization_create_makes_owner_and_unique_slug(db):
    user = UserFactory()
    first = organization_create(name="Acme Corp", owner=user)
    second = organization_create(name="Acme Corp", owner=user)
    assert (first.slug, second.slug) == ("acme-corp", "acme-corp-2")
    assert Membership.objects.get(user=user, organization=first).role == Role.OWNER
    with pytest.raises(ValidationFailed) as exc:
        organization_create(name="", owner=user, currency="XXX", timezone_name="Mars/Base")
    assert set(exc.value.fields) == {"name", "currency", "timezone"}


def test_organization_commercial_terms_are_staff_only(org, owner, owner_actor):
    with pytest.raises(PermissionDenied):
        organization_update(actor=owner_actor, discount_rate="0.5")
    organization_update(actor=owner_actor, name="Acme Two", timezone="Europe/Berlin")
    org.refresh_from_db()
    assert (org.name, org.timezone) == ("Acme Two", "Europe/Berlin")
    owner.user.is_staff = True
    owner.user.save()
    with pytest.raises(ValidationFailed):
        organization_update(actor=owner_actor, discount_rate="1.5")
    organization_update(actor=owner_actor, discount_rate="0.85")
    org.refresh_from_db()
    assert str(org.discount_rate) == "0.850000"


def test_personal_access_tokens(developer, viewer, actor_for):
    dev = actor_for(developer)
    token, raw = personal_access_token_issue(actor=dev, name="ci")
    assert raw.startswith(token.prefix + "_")
    assert personal_access_token_authenticate(raw) == token
    assert personal_access_token_authenticate(raw[:-1] + ("x" if raw[-1] != "x" else "y")) is None
    assert personal_access_token_authenticate("pat_nonsense") is None
    with pytest.raises(NotFound):
        personal_access_token_revoke(actor=actor_for(viewer), token_id=token.pk)
    personal_access_token_revoke(actor=dev, token_id=token.pk)
    assert personal_access_token_authenticate(raw) is None
    with pytest.raises(Conflict):
        personal_access_token_revoke(actor=dev, token_id=token.pk)
    assert raw not in repr(list(AuditEvent.objects.values_list("params", flat=True)))
