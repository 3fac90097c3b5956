from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.errors import Conflict, ValidationFailed
from accounts.models import (
    ApiKey,
    ApiKeyStatus,
    AuditEvent,
    SubAccount,
    SubAccountStatus,
)
from accounts.services import (
    api_key_issue,
    api_key_revoke,
    api_key_rotate,
    api_key_update,
    api_keys_expire_due,
    sub_account_create,
    sub_account_set_members,
    sub_account_update,
)
from tests.accounts.conftest import Snapshot
from tests.factories import MembershipFactory, SubAccountFactory

pytestmark = pytest.mark.django_db


# --- API keys: issue --------------------------------------------------------


def test_issue_key_with_restrictions(org, admin_actor, sub):
    expires = timezone.now() + timedelta(days=7)
    key, raw = api_key_issue(
        actor=admin_actor,
        name="  prod backend  ",
        sub_account_id=sub.pk,
        allowed_models="gpt-a",
        spend_cap_daily=5_000_000,
        spend_cap_monthly=None,
        rpm_limit=50,
        tpm_limit=10_000,
        ip_allowlist=["10.0.0.7/8", "2001:DB8::1"],
        priority="low",
        expires_at=expires,
    )
    key.refresh_from_db()
    assert key.name == "prod backend"
    assert key.organization == org
    assert key.sub_account == sub
    assert key.owner == admin_actor.user
    assert key.allowed_models == ["gpt-a"]
    assert key.spend_cap_daily == 5_000_000
    assert key.spend_cap_monthly is None
    assert (key.rpm_limit, key.tpm_limit) == (50, 10_000)
    assert key.ip_allowlist == ["10.0.0.0/8", "2001:db8::1/128"]
    assert key.priority == "low"
    assert key.expires_at == expires
    assert key.status == ApiKeyStatus.ACTIVE
    assert raw.startswith(key.prefix + "_")

    event = AuditEvent.objects.get(action="api_key.issue")
    assert event.organization == org
    assert event.actor == admin_actor.user
    assert event.ip == "203.0.113.5"
    assert event.target_id == str(key.pk)
    assert event.params["prefix"] == key.prefix
    assert event.params["sub_account"] == "team-a"
    assert event.params["spend_cap_daily"] == 5_000_000
    assert "spend_cap_monthly" not in event.params  # None is not recorded
    assert event.params["expires_at"] == expires.isoformat()


def test_issue_key_without_sub_account(org, admin_actor):
    key, _ = api_key_issue(actor=admin_actor, name="plain")
    assert key.sub_account is None
    assert key.ip_allowlist == []
    assert key.priority == "normal"


@pytest.mark.parametrize(
    ("fields", "error_field"),
    [
        ({"spend_cap_daily": 10_000_001}, "spend_cap_daily"),
        ({"spend_cap_monthly": 100_000_001}, "spend_cap_monthly"),
        ({"rpm_limit": 101}, "rpm_limit"),
        ({"tpm_limit": 50_001}, "tpm_limit"),
        ({"allowed_models": ["gpt-a", "gpt-c"]}, "allowed_models"),
    ],
)
def test_key_cannot_exceed_its_sub_account(admin_actor, sub, fields, error_field):
    snap = Snapshot()
    with pytest.raises(ValidationFailed) as exc:
        api_key_issue(actor=admin_actor, name="k", sub_account_id=sub.pk, **fields)
    assert error_field in exc.value.fields
    assert snap.unchanged()


def test_key_at_its_sub_account_ceiling_is_fine(admin_actor, sub):
    key, _ = api_key_issue(
        actor=admin_actor,
        name="k",
        sub_account_id=sub.pk,
        spend_cap_daily=10_000_000,
        rpm_limit=100,
        allowed_models=["gpt-a", "gpt-b"],
    )
    assert key.spend_cap_daily == 10_000_000


def test_lifetime_cap_is_free_when_sub_account_has_none(admin_actor, sub):
    key, _ = api_key_issue(
        actor=admin_actor, name="k", sub_account_id=sub.pk, spend_cap_lifetime=10**12
    )
    assert key.spend_cap_lifetime == 10**12


def test_key_models_must_be_within_the_organization(org, admin_actor):
    org.allowed_models = ["gpt-a"]
    org.save()
    with pytest.raises(ValidationFailed) as exc:
        api_key_issue(actor=admin_actor, name="k", allowed_models=["gpt-z"])
    assert "gpt-z" in exc.value.fields["allowed_models"][0]


def test_update_respects_the_sub_account_ceiling(admin_actor, sub):
    key, _ = api_key_issue(actor=admin_actor, name="k", sub_account_id=sub.pk, rpm_limit=10)
    with pytest.raises(ValidationFailed) as exc:
        api_key_update(actor=admin_actor, key_id=key.pk, rpm_limit=1000)
    assert "rpm_limit" in exc.value.fields
    key.refresh_from_db()
    assert key.rpm_limit == 10


def test_issue_into_suspended_or_foreign_sub_account(org, other_org, admin_actor):
    suspended = SubAccountFactory(organization=org, status=SubAccountStatus.SUSPENDED)
    foreign = SubAccountFactory(organization=other_org)
    for sub_id in (suspended.pk, foreign.pk, 999_999, "abc"):
        with pytest.raises(ValidationFailed) as exc:
            api_key_issue(actor=admin_actor, name="k", sub_account_id=sub_id)
        assert "sub_account" in exc.value.fields
    assert not ApiKey.objects.exists()


def test_duplicate_key_name_in_sub_account(org, admin_actor, sub):
    api_key_issue(actor=admin_actor, name="prod", sub_account_id=sub.pk)
    snap = Snapshot()
    with pytest.raises(ValidationFailed) as exc:
        api_key_issue(actor=admin_actor, name=" prod ", sub_account_id=sub.pk)
    assert "already exists in sub-account 'team-a'" in exc.value.fields["name"][0]
    assert snap.unchanged()
    # Same name elsewhere is fine: another sub-account, or the org level.
    other = SubAccountFactory(organization=org)
    api_key_issue(actor=admin_actor, name="prod", sub_account_id=other.pk)
    api_key_issue(actor=admin_actor, name="prod")
    with pytest.raises(ValidationFailed, match="already exists in this organization"):
        api_key_issue(actor=admin_actor, name="prod")


def test_name_of_revoked_key_can_be_reused(admin_actor, sub):
    key, _ = api_key_issue(actor=admin_actor, name="prod", sub_account_id=sub.pk)
    api_key_revoke(actor=admin_actor, key_id=key.pk)
    again, _ = api_key_issue(actor=admin_actor, name="prod", sub_account_id=sub.pk)
    assert again.pk != key.pk


def test_rename_to_existing_name_is_refused(admin_actor):
    a, _ = api_key_issue(actor=admin_actor, name="a")
    b, _ = api_key_issue(actor=admin_actor, name="b")
    with pytest.raises(ValidationFailed):
        api_key_update(actor=admin_actor, key_id=b.pk, name="a")
    api_key_update(actor=admin_actor, key_id=a.pk, name="a")  # its own name is no clash


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"spend_cap_daily": -1}, "spend_cap_daily", "cannot be negative"),
        ({"spend_cap_monthly": 10**16}, "spend_cap_monthly", "absurdly large"),
        ({"spend_cap_lifetime": 1.5}, "spend_cap_lifetime", "whole number"),
        ({"rpm_limit": 0}, "rpm_limit", "at least 1"),
        ({"tpm_limit": 10**11}, "tpm_limit", "cannot exceed"),
        ({"priority": "urgent"}, "priority", "high, normal or low"),
        ({"ip_allowlist": ["10.0.0.1", "bogus"]}, "ip_allowlist", "'bogus'"),
        ({"allowed_models": ["bad model"]}, "allowed_models", "not a valid model name"),
        ({"name": ""}, "name", "Enter a name"),
        ({"name": "x" * 121}, "name", "at most 120"),
    ],
)
def test_issue_rejects_bad_values(admin_actor, fields, field, message):
    data = {"name": "k", **fields}
    snap = Snapshot()
    with pytest.raises(ValidationFailed) as exc:
        api_key_issue(actor=admin_actor, **data)
    assert message in " ".join(exc.value.fields[field])
    assert snap.unchanged()


def test_all_field_errors_are_reported_together(admin_actor):
    with pytest.raises(ValidationFailed) as exc:
        api_key_issue(actor=admin_actor, name="", spend_cap_daily=-1, rpm_limit=0)
    assert set(exc.value.fields) == {"name", "spend_cap_daily", "rpm_limit"}


def test_expiry_in_the_past_is_refused(admin_actor):
    with pytest.raises(ValidationFailed) as exc:
        api_key_issue(actor=admin_actor, name="k", expires_at=timezone.now() - timedelta(minutes=1))
    assert "future" in exc.value.fields["expires_at"][0]
    assert not ApiKey.objects.exists()
    assert not AuditEvent.objects.exists()


def test_unknown_key_field_is_refused(admin_actor):
    with pytest.raises(ValidationFailed) as exc:
        api_key_issue(actor=admin_actor, name="k", status="revoked", secret_hash="x")
    assert set(exc.value.fields) == {"secret_hash", "status"}


# --- API keys: update / rotate / revoke / expire ----------------------------


def test_update_audits_only_the_diff(admin_actor):
    key, _ = api_key_issue(actor=admin_actor, name="k", rpm_limit=5)
    api_key_update(actor=admin_actor, key_id=key.pk, rpm_limit=5, name="k")
    assert not AuditEvent.objects.filter(action="api_key.update").exists()
    api_key_update(actor=admin_actor, key_id=key.pk, rpm_limit=7, name="k")
    event = AuditEvent.objects.get(action="api_key.update")
    assert event.params == {"rpm_limit": [5, 7]}


def test_revoked_key_cannot_be_updated_rotated_or_revoked(admin_actor):
    key, _ = api_key_issue(actor=admin_actor, name="k")
    api_key_revoke(actor=admin_actor, key_id=key.pk)
    key.refresh_from_db()
    assert key.status == ApiKeyStatus.REVOKED
    assert key.revoked_at is not None
    with pytest.raises(Conflict):
        api_key_update(actor=admin_actor, key_id=key.pk, name="x")
    with pytest.raises(Conflict):
        api_key_rotate(actor=admin_actor, key_id=key.pk)
    with pytest.raises(Conflict):
        api_key_revoke(actor=admin_actor, key_id=key.pk)
    assert AuditEvent.objects.filter(action="api_key.revoke").count() == 1


@pytest.mark.parametrize("grace", [-1, True, 1.5, "60", 30 * 86400 + 1])
def test_rotate_rejects_bad_grace(admin_actor, grace):
    key, _ = api_key_issue(actor=admin_actor, name="k")
    with pytest.raises(ValidationFailed) as exc:
        api_key_rotate(actor=admin_actor, key_id=key.pk, grace_seconds=grace)
    assert "grace_seconds" in exc.value.fields
    assert not AuditEvent.objects.filter(action="api_key.rotate").exists()


def test_rotate_audit_names_prefixes(admin_actor):
    key, _ = api_key_issue(actor=admin_actor, name="k")
    old_prefix = key.prefix
    key, _ = api_key_rotate(actor=admin_actor, key_id=key.pk, grace_seconds=60)
    event = AuditEvent.objects.get(action="api_key.rotate")
    assert event.params == {
        "old_prefix": old_prefix,
        "new_prefix": key.prefix,
        "grace_seconds": 60,
        "secret_shown_to": "rotator",
    }
    assert key.previous_public_id == old_prefix.removeprefix("sk-")


def test_expired_key_cannot_be_rotated(admin_actor):
    key, _ = api_key_issue(actor=admin_actor, name="k", expires_at=timezone.now() + timedelta(1))
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(Conflict, match="expired"):
        api_key_rotate(actor=admin_actor, key_id=key.pk)


def test_expire_due_marks_and_audits(admin_actor):
    due, _ = api_key_issue(actor=admin_actor, name="due", expires_at=timezone.now() + timedelta(1))
    later, _ = api_key_issue(
        actor=admin_actor, name="later", expires_at=timezone.now() + timedelta(days=10)
    )
    forever, _ = api_key_issue(actor=admin_actor, name="forever")
    assert api_keys_expire_due(now=timezone.now() + timedelta(days=2)) == 1
    due.refresh_from_db()
    later.refresh_from_db()
    forever.refresh_from_db()
    assert due.status == ApiKeyStatus.EXPIRED
    assert later.status == forever.status == ApiKeyStatus.ACTIVE
    event = AuditEvent.objects.get(action="api_key.expire")
    assert event.actor is None
    assert event.actor_label == "system"
    assert event.organization == due.organization
    assert api_keys_expire_due(now=timezone.now() + timedelta(days=2)) == 0


# --- sub-accounts -------------------------------------------------------------


def test_sub_account_create_and_duplicate(org, admin_actor):
    sub = sub_account_create(actor=admin_actor, name="Team", spend_cap_daily=1_000_000)
    assert sub.organization == org
    assert AuditEvent.objects.get(action="sub_account.create").params == {
        "name": "Team",
        "spend_cap_daily": 1_000_000,
    }
    with pytest.raises(ValidationFailed, match="already exists"):
        sub_account_create(actor=admin_actor, name="Team")
    with pytest.raises(ValidationFailed):
        sub_account_create(actor=admin_actor, name="T2", spend_cap_daily=-5)
    with pytest.raises(ValidationFailed):
        sub_account_create(actor=admin_actor, name="T3", status="active")
    assert SubAccount.objects.count() == 1


def test_sub_account_cannot_be_tightened_below_its_keys(admin_actor, sub):
    api_key_issue(actor=admin_actor, name="k", sub_account_id=sub.pk, rpm_limit=80)
    with pytest.raises(ValidationFailed) as exc:
        sub_account_update(actor=admin_actor, sub_account_id=sub.pk, rpm_limit=50)
    assert "Key 'k'" in exc.value.fields["rpm_limit"][0]
    sub.refresh_from_db()
    assert sub.rpm_limit == 100
    sub_account_update(actor=admin_actor, sub_account_id=sub.pk, rpm_limit=80)
    sub.refresh_from_db()
    assert sub.rpm_limit == 80


def test_sub_account_models_cannot_be_narrowed_below_its_keys(admin_actor, sub):
    sub_account_update(actor=admin_actor, sub_account_id=sub.pk, allowed_models=[])
    api_key_issue(actor=admin_actor, name="k", sub_account_id=sub.pk, allowed_models=["m-a", "m-b"])
    api_key_issue(actor=admin_actor, name="open", sub_account_id=sub.pk)  # inherits
    with pytest.raises(ValidationFailed) as exc:
        sub_account_update(actor=admin_actor, sub_account_id=sub.pk, allowed_models=["m-a"])
    assert exc.value.fields["allowed_models"] == ["Key 'k' allows m-b; narrow the key first."]
    sub.refresh_from_db()
    assert sub.allowed_models == []
    sub_account_update(actor=admin_actor, sub_account_id=sub.pk, allowed_models=["m-a", "m-b"])
    sub.refresh_from_db()
    assert sub.allowed_models == ["m-a", "m-b"]


def test_sub_account_status_must_be_known(admin_actor, sub):
    with pytest.raises(ValidationFailed):
        sub_account_update(actor=admin_actor, sub_account_id=sub.pk, status="paused")


def test_sub_account_set_members(org, other_org, admin_actor, developer, viewer, sub):
    sub_account_set_members(
        actor=admin_actor, sub_account_id=sub.pk, membership_ids=[developer.pk, viewer.pk]
    )
    assert set(sub.members.all()) == {developer, viewer}
    event = AuditEvent.objects.get(action="sub_account.members")
    assert event.params["added"] == sorted([developer.user.email, viewer.user.email])
    outsider = MembershipFactory(organization=other_org)
    with pytest.raises(ValidationFailed):
        sub_account_set_members(
            actor=admin_actor, sub_account_id=sub.pk, membership_ids=[developer.pk, outsider.pk]
        )
    assert set(sub.members.all()) == {developer, viewer}
    # Setting the same members again records nothing.
    sub_account_set_members(
        actor=admin_actor, sub_account_id=sub.pk, membership_ids=[viewer.pk, developer.pk]
    )
    assert AuditEvent.objects.filter(action="sub_account.members").count() == 1


def test_developer_issues_only_in_own_sub_accounts(org, developer, actor_for, sub):
    dev = actor_for(developer)
    with pytest.raises(ValidationFailed, match="not a member"):
        api_key_issue(actor=dev, name="k", sub_account_id=sub.pk)
    sub.members.add(developer)
    key, _ = api_key_issue(actor=dev, name="k", sub_account_id=sub.pk)
    assert key.owner == developer.user
