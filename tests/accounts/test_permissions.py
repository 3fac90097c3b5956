"""Role x action matrix over the services, and tenant isolation."""

from __future__ import annotations

import pytest

from accounts import selectors
from accounts.errors import NotFound, PermissionDenied
from accounts.models import ApiKey, Invitation, Membership, Role, SubAccount
from accounts.permissions import ROLE_PERMS, Perm, can_assign_role, has_perm
from accounts.services import (
    api_key_issue,
    api_key_revoke,
    api_key_rotate,
    api_key_update,
    get_api_key,
    invitation_create,
    invitation_revoke,
    membership_change_role,
    membership_remove,
    organization_update,
    personal_access_token_issue,
    sub_account_create,
    sub_account_set_members,
    sub_account_update,
)
from tests.factories import MembershipFactory, SubAccountFactory, issue_key

pytestmark = pytest.mark.django_db

OWNER, ADMIN, FINANCE, DEVELOPER, VIEWER = (
    Role.OWNER,
    Role.ADMIN,
    Role.FINANCE,
    Role.DEVELOPER,
    Role.VIEWER,
)
ALL = (OWNER, ADMIN, FINANCE, DEVELOPER, VIEWER)
MANAGERS = (OWNER, ADMIN)


@pytest.fixture
def world(org, members, actor_for):
    """Things in ``org`` to act on: an admin's key, a sub-account, a spare
    member and a pending invitation."""
    admin_actor = actor_for(members[ADMIN])
    key, _ = issue_key(admin_actor, "admins-key")
    sub = SubAccountFactory(organization=org, name="team")
    spare = MembershipFactory(organization=org, role=VIEWER)
    invitation, _ = invitation_create(actor=admin_actor, email="inv@example.com", role=VIEWER)
    return {"key": key, "sub": sub, "spare": spare, "invitation": invitation}


# Each action: (callable(actor, world), roles that succeed, error for the others)
ACTIONS = {
    "api_key_issue": (lambda a, w: issue_key(a), (OWNER, ADMIN, DEVELOPER), PermissionDenied),
    "api_key_update_others": (
        lambda a, w: api_key_update(actor=a, key_id=w["key"].pk, rpm_limit=9),
        MANAGERS,
        {DEVELOPER: NotFound, FINANCE: PermissionDenied, VIEWER: PermissionDenied},
    ),
    "api_key_rotate_others": (
        lambda a, w: api_key_rotate(actor=a, key_id=w["key"].pk),
        MANAGERS,
        {DEVELOPER: NotFound, FINANCE: PermissionDenied, VIEWER: PermissionDenied},
    ),
    "api_key_revoke_others": (
        lambda a, w: api_key_revoke(actor=a, key_id=w["key"].pk),
        MANAGERS,
        {DEVELOPER: NotFound, FINANCE: PermissionDenied, VIEWER: PermissionDenied},
    ),
    "get_api_key_for_view": (
        lambda a, w: get_api_key(a, w["key"].pk, for_change=False),
        (OWNER, ADMIN, VIEWER),
        NotFound,
    ),
    "sub_account_create": (
        lambda a, w: sub_account_create(actor=a, name="new team"),
        MANAGERS,
        PermissionDenied,
    ),
    "sub_account_update": (
        lambda a, w: sub_account_update(actor=a, sub_account_id=w["sub"].pk, rpm_limit=5),
        MANAGERS,
        PermissionDenied,
    ),
    "sub_account_set_members": (
        lambda a, w: sub_account_set_members(
            actor=a, sub_account_id=w["sub"].pk, membership_ids=[w["spare"].pk]
        ),
        MANAGERS,
        PermissionDenied,
    ),
    "membership_change_role": (
        lambda a, w: membership_change_role(actor=a, membership_id=w["spare"].pk, role=FINANCE),
        MANAGERS,
        PermissionDenied,
    ),
    "membership_remove_other": (
        lambda a, w: membership_remove(actor=a, membership_id=w["spare"].pk),
        MANAGERS,
        PermissionDenied,
    ),
    "invitation_create": (
        lambda a, w: invitation_create(actor=a, email="x@example.com", role=VIEWER),
        MANAGERS,
        PermissionDenied,
    ),
    "invitation_revoke": (
        lambda a, w: invitation_revoke(actor=a, invitation_id=w["invitation"].pk),
        MANAGERS,
        PermissionDenied,
    ),
    "organization_update": (
        lambda a, w: organization_update(actor=a, name="Renamed"),
        MANAGERS,
        PermissionDenied,
    ),
    "personal_access_token_issue": (
        lambda a, w: personal_access_token_issue(actor=a, name="ci"),
        ALL,
        PermissionDenied,
    ),
    "member_list": (lambda a, w: list(selectors.member_list(actor=a)), ALL, PermissionDenied),
    "invitation_list": (
        lambda a, w: list(selectors.invitation_list(actor=a)),
        MANAGERS,
        PermissionDenied,
    ),
    "api_key_list": (
        lambda a, w: list(selectors.api_key_list(actor=a)),
        (OWNER, ADMIN, DEVELOPER, VIEWER),
        PermissionDenied,
    ),
    "audit_event_list": (
        lambda a, w: list(selectors.audit_event_list(actor=a)),
        MANAGERS,
        PermissionDenied,
    ),
}

MATRIX = [(name, role) for name in ACTIONS for role in ALL]


@pytest.mark.parametrize(("action", "role"), MATRIX, ids=[f"{a}-{r}" for a, r in MATRIX])
def test_role_action_matrix(action, role, world, members, actor_for):
    call, allowed, error = ACTIONS[action]
    actor = actor_for(members[role])
    if role in allowed:
        call(actor, world)
    else:
        expected = error[role] if isinstance(error, dict) else error
        with pytest.raises(expected):
            call(actor, world)


def test_developer_manages_own_keys_only(world, members, actor_for):
    dev = actor_for(members[DEVELOPER])
    key, _ = issue_key(dev, "mine")
    api_key_update(actor=dev, key_id=key.pk, rpm_limit=3)
    key, _ = api_key_rotate(actor=dev, key_id=key.pk, grace_seconds=10)
    api_key_revoke(actor=dev, key_id=key.pk)
    assert [k.name for k in selectors.api_key_list(actor=dev)] == ["mine"]
    # The admin sees (and may revoke) the developer's key too.
    admin = actor_for(members[ADMIN])
    assert {k.name for k in selectors.api_key_list(actor=admin)} == {"mine", "admins-key"}


def test_viewer_and_finance_cannot_touch_a_developers_key(members, actor_for):
    key, _ = issue_key(actor_for(members[DEVELOPER]), "mine")
    for role in (VIEWER, FINANCE):
        with pytest.raises(PermissionDenied):
            api_key_revoke(actor=actor_for(members[role]), key_id=key.pk)
    key.refresh_from_db()
    assert key.status == "active"


def test_only_owner_may_grant_owner(members, world, actor_for):
    with pytest.raises(PermissionDenied):
        membership_change_role(
            actor=actor_for(members[ADMIN]), membership_id=world["spare"].pk, role=OWNER
        )
    membership_change_role(
        actor=actor_for(members[OWNER]), membership_id=world["spare"].pk, role=OWNER
    )
    world["spare"].refresh_from_db()
    assert world["spare"].role == OWNER


def test_permission_tables():
    assert ROLE_PERMS[OWNER] == ROLE_PERMS[ADMIN] == frozenset(Perm)
    assert not has_perm(None, Perm.ORG_VIEW)
    assert not has_perm("intruder", Perm.ORG_VIEW)
    assert not has_perm(FINANCE, Perm.KEYS_MANAGE_OWN)
    assert has_perm(DEVELOPER, Perm.KEYS_MANAGE_OWN)
    assert not has_perm(DEVELOPER, Perm.KEYS_MANAGE_ALL)
    assert not has_perm(VIEWER, Perm.BILLING_VIEW)
    assert can_assign_role(OWNER, OWNER)
    assert not can_assign_role(ADMIN, OWNER)
    assert can_assign_role(ADMIN, ADMIN)
    for role in (FINANCE, DEVELOPER, VIEWER):
        assert not any(can_assign_role(role, r) for r in ALL)


# --- tenant isolation ----------------------------------------------------------

ISOLATION_ACTIONS = {
    "api_key_update": lambda a, w: api_key_update(actor=a, key_id=w["key"].pk, name="pwned"),
    "api_key_rotate": lambda a, w: api_key_rotate(actor=a, key_id=w["key"].pk, grace_seconds=60),
    "api_key_revoke": lambda a, w: api_key_revoke(actor=a, key_id=w["key"].pk),
    "get_api_key": lambda a, w: get_api_key(a, w["key"].pk, for_change=False),
    "sub_account_update": lambda a, w: sub_account_update(
        actor=a, sub_account_id=w["sub"].pk, status="suspended"
    ),
    "sub_account_set_members": lambda a, w: sub_account_set_members(
        actor=a, sub_account_id=w["sub"].pk, membership_ids=[]
    ),
    "membership_change_role": lambda a, w: membership_change_role(
        actor=a, membership_id=w["spare"].pk, role=ADMIN
    ),
    "membership_remove": lambda a, w: membership_remove(actor=a, membership_id=w["spare"].pk),
    "invitation_revoke": lambda a, w: invitation_revoke(actor=a, invitation_id=w["invitation"].pk),
}

# Roles of org B that hold the permission for each action: they must get NotFound.
# The others lack the permission in any organization and are stopped earlier
# by PermissionDenied, which says nothing about org A either.
_PRIVILEGED = {
    "api_key_update": (OWNER, ADMIN, DEVELOPER),
    "api_key_rotate": (OWNER, ADMIN, DEVELOPER),
    "api_key_revoke": (OWNER, ADMIN, DEVELOPER),
    "get_api_key": ALL,
    "membership_change_role": ALL,
    "membership_remove": ALL,
}

ISOLATION = [(name, role) for name in ISOLATION_ACTIONS for role in ALL]


def _fingerprint(world):
    key = ApiKey.objects.get(pk=world["key"].pk)
    sub = SubAccount.objects.get(pk=world["sub"].pk)
    spare = Membership.objects.filter(pk=world["spare"].pk).first()
    inv = Invitation.objects.get(pk=world["invitation"].pk)
    return (
        key.name,
        key.status,
        key.public_id,
        key.previous_public_id,
        sub.status,
        sorted(sub.members.values_list("pk", flat=True)),
        spare and spare.role,
        inv.status,
    )


@pytest.mark.parametrize(("action", "role"), ISOLATION, ids=[f"{a}-{r}" for a, r in ISOLATION])
def test_other_tenant_cannot_reach_org_a(action, role, world, other_members, actor_for):
    world["sub"].members.add(world["spare"])
    before = _fingerprint(world)
    outsider = actor_for(other_members[role])
    privileged = _PRIVILEGED.get(action, MANAGERS)
    expected = NotFound if role in privileged else (NotFound, PermissionDenied)
    with pytest.raises(expected):
        ISOLATION_ACTIONS[action](outsider, world)
    assert _fingerprint(world) == before


def test_other_tenant_cannot_use_org_a_resources_in_its_own_calls(world, other_members, actor_for):
    outsider = actor_for(other_members[ADMIN])
    from accounts.errors import ValidationFailed

    with pytest.raises(ValidationFailed):
        api_key_issue(actor=outsider, name="k", sub_account_id=world["sub"].pk)
    own_sub = SubAccountFactory(organization=other_members[ADMIN].organization)
    with pytest.raises(ValidationFailed):
        sub_account_set_members(
            actor=outsider, sub_account_id=own_sub.pk, membership_ids=[world["spare"].pk]
        )
    assert not own_sub.members.exists()


def test_selectors_are_tenant_scoped(world, members, other_members, actor_for):
    outsider = actor_for(other_members[OWNER])
    issue_key(outsider, "theirs")
    assert [k.name for k in selectors.api_key_list(actor=outsider)] == ["theirs"]
    assert world["key"] not in selectors.api_key_list(actor=actor_for(other_members[VIEWER]))
    assert not selectors.invitation_list(actor=outsider).exists()
    assert set(selectors.member_list(actor=outsider)) == set(other_members.values())
    assert not selectors.sub_account_list(actor=outsider).exists()
    org_ids = set(selectors.audit_event_list(actor=outsider).values_list("organization", flat=True))
    assert org_ids == {other_members[OWNER].organization_id}
