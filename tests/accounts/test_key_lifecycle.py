"""A key's life across people: a removed member's keys are revoked or handed
over; limits an admin set are a ceiling for the key's owner; developers' keys
are capped by the organization's default; a rotated secret goes to whoever may
see it by the permission matrix, the key's owner otherwise."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.errors import ValidationFailed
from accounts.keys import api_key_authenticate
from accounts.models import ApiKey, ApiKeyStatus, AuditEvent, Membership, Role
from accounts.services import (
    api_key_collect_secret,
    api_key_rotate,
    api_key_update,
    membership_remove,
    organization_update,
    personal_access_token_issue,
)
from tests.factories import MembershipFactory, SubAccountFactory, issue_key

pytestmark = pytest.mark.django_db


# --- removing a member --------------------------------------------------------------


def test_removing_a_member_revokes_their_keys_by_default(
    org, other_org, members, actor_for, admin_actor
):
    dev = members[Role.DEVELOPER]
    mine, raw = issue_key(actor_for(dev), "mine")
    # The same person's key in another organization is not this one's business.
    elsewhere = MembershipFactory(organization=other_org, user=dev.user, role=Role.DEVELOPER)
    _, other_raw = issue_key(actor_for(elsewhere), "elsewhere")
    _, colleague_raw = issue_key(admin_actor, "admins")

    membership_remove(actor=admin_actor, membership_id=dev.pk)

    assert api_key_authenticate(raw) is None
    mine.refresh_from_db()
    assert mine.status == ApiKeyStatus.REVOKED and mine.revoked_at is not None
    assert api_key_authenticate(other_raw) is not None
    assert api_key_authenticate(colleague_raw) is not None
    revoke = AuditEvent.objects.get(action="api_key.revoke")
    assert revoke.params == {"prefix": mine.prefix, "reason": "member_removed"}
    removal = AuditEvent.objects.get(action="member.remove")
    assert removal.params["keys"] == "revoke" and removal.params["key_prefixes"] == [mine.prefix]


def test_removing_a_member_can_hand_their_keys_over(members, actor_for, admin_actor):
    dev = members[Role.DEVELOPER]
    key, raw = issue_key(actor_for(dev), "shared-service")
    heir = MembershipFactory(organization=dev.organization, role=Role.DEVELOPER)

    membership_remove(
        actor=admin_actor, membership_id=dev.pk, keys="hand_over", hand_over_to=heir.pk
    )

    key.refresh_from_db()
    assert key.owner_id == heir.user_id and key.status == ApiKeyStatus.ACTIVE
    assert api_key_authenticate(raw) is not None
    event = AuditEvent.objects.get(action="api_key.hand_over")
    assert event.params == {"prefix": key.prefix, "from": dev.user.email, "to": heir.user.email}
    assert AuditEvent.objects.get(action="member.remove").params["hand_over_to"] == heir.user.email
    # The heir manages it now.
    api_key_update(actor=actor_for(heir), key_id=key.pk, rpm_limit=5)


@pytest.mark.parametrize("case", ["viewer", "not_in_sub_account", "nobody", "themselves"])
def test_keys_go_only_to_someone_who_may_hold_them(org, members, actor_for, admin_actor, case):
    dev = members[Role.DEVELOPER]
    sub = SubAccountFactory(organization=org, name="team")
    sub.members.add(dev)
    key, raw = issue_key(actor_for(dev), "team-key", sub_account_id=sub.pk)
    recipient = {
        "viewer": members[Role.VIEWER].pk,
        "not_in_sub_account": MembershipFactory(organization=org, role=Role.DEVELOPER).pk,
        "nobody": 987654,
        "themselves": dev.pk,
    }[case]
    with pytest.raises(ValidationFailed) as refused:
        membership_remove(
            actor=admin_actor, membership_id=dev.pk, keys="hand_over", hand_over_to=recipient
        )
    assert "hand_over_to" in refused.value.fields
    # Nothing happened: still a member, the key still theirs and working.
    assert Membership.objects.filter(pk=dev.pk).exists()
    key.refresh_from_db()
    assert key.owner_id == dev.user_id and api_key_authenticate(raw) is not None


def test_the_remove_page_offers_revoke_or_hand_over(client, org, members, actor_for):
    dev = members[Role.DEVELOPER]
    key, raw = issue_key(actor_for(dev), "ci-runner")
    client.force_login(members[Role.ADMIN].user)
    url = reverse("accounts:member_remove", args=[dev.pk])
    page = client.get(url).content.decode()
    assert "ci-runner" in page and key.prefix in page
    assert 'value="revoke"' in page and "checked" in page.split('value="revoke"')[1][:40]
    assert members[Role.OWNER].user.email in page  # a possible heir
    assert members[Role.VIEWER].user.email not in page.split("hand_over_to")[-1]
    # Choosing to hand over without saying to whom keeps everything as it was.
    response = client.post(url, {"keys": "hand_over"})
    assert response.status_code == 200 and "Choose a member" in response.content.decode()
    assert Membership.objects.filter(pk=dev.pk).exists()
    response = client.post(url, {"keys": "hand_over", "hand_over_to": members[Role.OWNER].pk})
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.owner_id == members[Role.OWNER].user_id
    assert api_key_authenticate(raw) is not None
    assert not Membership.objects.filter(pk=dev.pk).exists()


def _api_token(actor) -> str:
    return personal_access_token_issue(actor=actor, name="ci")[1]


def test_removing_through_the_api_revokes_unless_told_otherwise(
    client, members, actor_for, admin_actor
):
    dev, other = (
        members[Role.DEVELOPER],
        MembershipFactory(organization=members[Role.ADMIN].organization, role=Role.DEVELOPER),
    )
    _, raw = issue_key(actor_for(dev), "api-made")
    _, kept = issue_key(actor_for(other), "handed")
    token = _api_token(admin_actor)
    response = client.delete(f"/api/v1/members/{dev.pk}/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 204
    assert api_key_authenticate(raw) is None
    response = client.delete(
        f"/api/v1/members/{other.pk}/?keys=hand_over&hand_over_to={members[Role.OWNER].pk}",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 204
    assert api_key_authenticate(kept).owner_id == members[Role.OWNER].user_id


# --- an admin's limits are a ceiling ------------------------------------------------------


@pytest.fixture
def capped(members, actor_for, admin_actor):
    """A developer's key on which an admin set every kind of limit."""
    dev = actor_for(members[Role.DEVELOPER])
    key, _ = issue_key(dev, "capped")
    api_key_update(
        actor=admin_actor,
        key_id=key.pk,
        spend_cap_monthly=50_000_000,
        rpm_limit=60,
        allowed_models=["m-small", "m-large"],
        ip_allowlist=["203.0.113.0/24"],
        expires_at=timezone.now() + timedelta(days=30),
    )
    key.refresh_from_db()
    return dev, key


LOOSER = {
    "spend_cap_monthly": [60_000_000, None],
    "rpm_limit": [61, None],
    "allowed_models": [["m-small", "m-huge"], []],
    "ip_allowlist": [["203.0.0.0/16"], ["198.51.100.1"], []],
    "expires_at": ["later", None],
}


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in LOOSER.items() for v in values]
)
def test_a_developer_cannot_loosen_or_clear_what_an_admin_set(capped, field, value):
    dev, key = capped
    if value == "later":
        value = key.expires_at + timedelta(days=1)
    with pytest.raises(ValidationFailed) as refused:
        api_key_update(actor=dev, key_id=key.pk, **{field: value})
    assert field in refused.value.fields
    assert "admin" in " ".join(refused.value.fields[field])
    before = getattr(key, field)
    key.refresh_from_db()
    assert getattr(key, field) == before


def test_a_developer_can_tighten_what_an_admin_set(capped):
    dev, key = capped
    sooner = key.expires_at - timedelta(days=10)
    api_key_update(
        actor=dev,
        key_id=key.pk,
        spend_cap_monthly=10_000_000,
        rpm_limit=30,
        allowed_models=["m-small"],
        ip_allowlist=["203.0.113.128/25"],
        expires_at=sooner,
        name="tighter",
    )
    key.refresh_from_db()
    assert (key.spend_cap_monthly, key.rpm_limit, key.allowed_models) == (
        10_000_000,
        30,
        ["m-small"],
    )
    # ...and loosen again, up to the admin's ceiling (not beyond).
    api_key_update(actor=dev, key_id=key.pk, spend_cap_monthly=50_000_000, rpm_limit=60)
    with pytest.raises(ValidationFailed):
        api_key_update(actor=dev, key_id=key.pk, spend_cap_monthly=50_000_001)


def test_an_admin_lifting_a_limit_lifts_the_ceiling(capped, admin_actor):
    dev, key = capped
    api_key_update(actor=admin_actor, key_id=key.pk, rpm_limit=None)
    api_key_update(actor=dev, key_id=key.pk, rpm_limit=500)
    key.refresh_from_db()
    assert key.rpm_limit == 500
    # The limits the admin did not touch are still a ceiling.
    with pytest.raises(ValidationFailed):
        api_key_update(actor=dev, key_id=key.pk, spend_cap_monthly=None)


def test_the_developer_edit_form_refuses_a_looser_cap(client, capped, members):
    _, key = capped
    client.force_login(members[Role.DEVELOPER].user)
    url = reverse("accounts:api_key_detail", args=[key.pk])
    data = {
        "name": key.name,
        "allowed_models": "m-small, m-large",
        "ip_allowlist": "203.0.113.0/24",
        "spend_cap_monthly": "",  # cleared
        "rpm_limit": "60",
        "priority": "normal",
        "expires_at": key.expires_at.strftime("%Y-%m-%d %H:%M"),
    }
    response = client.post(url, data)
    assert response.status_code == 200
    assert "you may lower it, not raise or remove it" in response.content.decode()
    key.refresh_from_db()
    assert key.spend_cap_monthly == 50_000_000


# --- the organization's cap on developers' keys -------------------------------------------


@pytest.fixture
def org_cap(owner_actor):
    organization_update(actor=owner_actor, developer_key_cap=20_000_000)
    return 20_000_000


def test_developer_keys_get_the_organization_cap_and_cannot_exceed_it(members, actor_for, org_cap):
    dev = actor_for(members[Role.DEVELOPER])
    key, _ = issue_key(dev, "defaulted")  # org-wide, no cap asked for
    assert key.spend_cap_monthly == org_cap
    with pytest.raises(ValidationFailed) as refused:
        issue_key(dev, "too-big", spend_cap_monthly=org_cap + 1)
    assert "spend_cap_monthly" in refused.value.fields
    assert not ApiKey.objects.filter(name="too-big").exists()
    # Nor can it be cleared or raised afterwards.
    for value in (None, org_cap * 2):
        with pytest.raises(ValidationFailed):
            api_key_update(actor=dev, key_id=key.pk, spend_cap_monthly=value)
    # Lower is fine.
    smaller, _ = issue_key(dev, "smaller", spend_cap_monthly=5_000_000)
    assert smaller.spend_cap_monthly == 5_000_000


def test_admins_are_not_bound_by_the_developer_cap(admin_actor, org_cap):
    key, _ = issue_key(admin_actor, "big", spend_cap_monthly=org_cap * 10)
    assert key.spend_cap_monthly == org_cap * 10


def test_the_settings_page_sets_the_developer_cap(client, org, members):
    client.force_login(members[Role.OWNER].user)
    url = reverse("accounts:organization_settings")
    response = client.post(
        url, {"name": org.name, "timezone": org.timezone, "developer_key_cap": "25.50"}
    )
    assert response.status_code == 302
    org.refresh_from_db()
    assert org.developer_key_cap == 25_500_000
    assert 'value="25.5"' in client.get(url).content.decode()


# --- who sees a rotated secret --------------------------------------------------------------


def test_an_admin_rotating_an_owners_key_does_not_get_its_secret(members, actor_for, admin_actor):
    owner = actor_for(members[Role.OWNER])
    key, _ = issue_key(owner, "owners")
    key, shown = api_key_rotate(actor=admin_actor, key_id=key.pk)
    assert shown == ""
    assert AuditEvent.objects.get(action="api_key.rotate").params["secret_shown_to"] == "owner"
    # The admin cannot collect it either (it is not their key).
    assert api_key_collect_secret(actor=admin_actor, key_id=key.pk) == ""
    # The owner collects it, once, and it works.
    secret = api_key_collect_secret(actor=owner, key_id=key.pk)
    assert secret.startswith("sk-") and api_key_authenticate(secret).key_id == key.pk
    assert api_key_collect_secret(actor=owner, key_id=key.pk) == ""
    assert AuditEvent.objects.filter(action="api_key.secret_collect").count() == 1


def test_a_rotated_secret_goes_to_the_rotator_when_the_matrix_allows(
    members, actor_for, admin_actor
):
    dev = actor_for(members[Role.DEVELOPER])
    key, _ = issue_key(dev, "devs")
    # An admin may see a developer's secret (they could grant that role).
    key, shown = api_key_rotate(actor=admin_actor, key_id=key.pk)
    assert shown and api_key_authenticate(shown).key_id == key.pk
    # Its owner always sees their own.
    key, shown = api_key_rotate(actor=dev, key_id=key.pk)
    assert shown and api_key_authenticate(shown).key_id == key.pk
    key.refresh_from_db()
    assert key.pending_secret == ""


def test_the_rotate_page_and_api_withhold_an_owners_secret_from_an_admin(
    client, members, actor_for
):
    owner = actor_for(members[Role.OWNER])
    key, _ = issue_key(owner, "owners")
    client.force_login(members[Role.ADMIN].user)
    response = client.post(
        reverse("accounts:api_key_rotate", args=[key.pk]), {"grace_seconds": "0"}
    )
    page = response.content.decode()
    key.refresh_from_db()
    assert key.pending_secret and key.pending_secret not in page
    assert "shown only to the key's owner" in page
    token = _api_token(actor_for(members[Role.ADMIN]))
    body = client.post(
        f"/api/v1/keys/{key.pk}/rotate/",
        {},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    ).json()
    assert body["key"] is None and body["prefix"] != key.prefix
    # The owner's key page offers it once.
    client.force_login(members[Role.OWNER].user)
    assert (
        "Show the new secret"
        in client.get(reverse("accounts:api_key_detail", args=[key.pk])).content.decode()
    )
    key.refresh_from_db()
    waiting = key.pending_secret
    page = client.post(reverse("accounts:api_key_collect_secret", args=[key.pk])).content.decode()
    assert waiting in page
    key.refresh_from_db()
    assert key.pending_secret == ""
