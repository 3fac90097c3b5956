"""Console pages: role checks, inline errors, secrets shown once, and tenant
isolation on every route of the accounts URL configuration."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.actors import Actor
from accounts.models import ApiKey, AuditEvent, Invitation, Membership, Role, User
from accounts.services import (
    api_key_issue,
    invitation_create,
    organization_create,
    personal_access_token_issue,
    sub_account_create,
)

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery-9"


def _member(org, role, email):
    user = User.objects.create_user(email, PASSWORD)
    return Membership.objects.create(user=user, organization=org, role=role)


@pytest.fixture
def world(monkeypatch):
    monkeypatch.setattr("accounts.tasks.send_invitation_email.delay", lambda *a, **k: None)
    out = {}
    for tag in ("a", "b"):
        owner = User.objects.create_user(f"owner-{tag}@example.com", PASSWORD)
        org = organization_create(name=f"Org {tag.upper()}", owner=owner)
        owner_m = owner.memberships.get()
        actor = Actor(owner_m)
        members = {
            role: _member(org, role, f"{role}-{tag}@example.com")
            for role in Role.values
            if role != "owner"
        }
        members["owner"] = owner_m
        sub = sub_account_create(actor=actor, name=f"team-{tag}")
        sub.members.add(members["developer"])
        key, raw = api_key_issue(actor=actor, name=f"key-{tag}", sub_account_id=sub.pk)
        dev_key, _ = api_key_issue(actor=Actor(members["developer"]), name=f"dev-key-{tag}")
        invitation, _ = invitation_create(
            actor=actor, email=f"new-{tag}@example.com", role="viewer"
        )
        token, _ = personal_access_token_issue(actor=actor, name=f"pat-{tag}")
        out[tag] = {
            "org": org, "members": members, "sub": sub, "key": key, "raw": raw,
            "dev_key": dev_key, "invitation": invitation, "token": token,
        }  # fmt: skip
    return out


def _client(client, membership):
    client.force_login(membership.user)
    return client


# Every console route that takes an object id, with how to fill it from one org.
OBJECT_ROUTES = {
    "accounts:member_role": lambda w: [w["members"]["viewer"].pk],
    "accounts:member_remove": lambda w: [w["members"]["viewer"].pk],
    "accounts:invitation_revoke": lambda w: [w["invitation"].pk],
    "accounts:sub_account_detail": lambda w: [w["sub"].pk],
    "accounts:api_key_detail": lambda w: [w["key"].pk],
    "accounts:api_key_rotate": lambda w: [w["key"].pk],
    "accounts:api_key_revoke": lambda w: [w["key"].pk],
    "accounts:api_key_collect_secret": lambda w: [w["key"].pk],
}
API_OBJECT_ROUTES = {
    "api-key-detail": lambda w: [w["key"].pk],
    "api-key-rotate": lambda w: [w["key"].pk],
    "api-key-revoke": lambda w: [w["key"].pk],
    "api-key-collect-secret": lambda w: [w["key"].pk],
    "sub-account-detail": lambda w: [w["sub"].pk],
    "member-detail": lambda w: [w["members"]["viewer"].pk],
    "invitation-revoke": lambda w: [w["invitation"].pk],
}


# Read by tests/test_route_isolation.py: the object routes this module proves isolated.
# The password reset link's token is bound to its user: another user's id with
# it is refused (tests/accounts/test_password_reset.py).
ISOLATED_ROUTES = (
    set(OBJECT_ROUTES)
    | set(API_OBJECT_ROUTES)
    | {"accounts:invitation_accept", "accounts:password_reset_confirm"}
)


@pytest.mark.parametrize("route", sorted(OBJECT_ROUTES))
@pytest.mark.parametrize("method", ["get", "post"])
def test_other_org_owner_cannot_reach_console_objects(client, world, route, method):
    # Given the owner of org B, when they address org A's objects by id
    c = _client(client, world["b"]["members"]["owner"])
    url = reverse(route, args=OBJECT_ROUTES[route](world["a"]))
    before = (
        ApiKey.objects.filter(status="active").count(),
        Membership.objects.count(),
        Invitation.objects.filter(revoked_at__isnull=True).count(),
    )
    response = getattr(c, method)(url, {"role": "admin", "grace_seconds": 0, "name": "x"})
    # Then nothing of org A is shown or changed
    assert response.status_code in (302, 403, 404, 405)
    if response.status_code == 302:  # POST endpoints redirect with an error message
        follow = c.get(response.url)
        assert "No such" in follow.content.decode()
    assert b"Org A" not in response.content
    after = (
        ApiKey.objects.filter(status="active").count(),
        Membership.objects.count(),
        Invitation.objects.filter(revoked_at__isnull=True).count(),
    )
    assert before == after


@pytest.mark.parametrize("route", sorted(API_OBJECT_ROUTES))
@pytest.mark.parametrize("method", ["get", "post", "patch", "delete"])
def test_other_org_owner_cannot_reach_api_objects(client, world, route, method):
    c = _client(client, world["b"]["members"]["owner"])
    url = reverse(route, args=API_OBJECT_ROUTES[route](world["a"]))
    response = getattr(c, method)(url, {}, content_type="application/json")
    assert response.status_code in (404, 405)
    assert ApiKey.objects.get(pk=world["a"]["key"].pk).status == "active"
    assert Membership.objects.filter(pk=world["a"]["members"]["viewer"].pk).exists()


@pytest.mark.parametrize(
    "url_name",
    [
        "accounts:api_keys",
        "accounts:sub_accounts",
        "accounts:members",
        "accounts:audit",
        "console:overview",
    ],
)
def test_lists_show_only_the_current_org(client, world, url_name):
    c = _client(client, world["b"]["members"]["owner"])
    body = c.get(reverse(url_name)).content.decode()
    assert "key-a" not in body and "team-a" not in body and "owner-a@example.com" not in body


@pytest.mark.parametrize(
    "url", ["/api/v1/keys/", "/api/v1/sub-accounts/", "/api/v1/members/", "/api/v1/invitations/"]
)
def test_api_lists_show_only_the_current_org(client, world, url):
    body = _client(client, world["b"]["members"]["owner"]).get(url).content.decode()
    assert "-a@example.com" not in body and "key-a" not in body and "team-a" not in body


# role -> (page, expected status)
ROLE_PAGES = [
    (
        "accounts:api_keys",
        {"owner": 200, "admin": 200, "finance": 403, "developer": 200, "viewer": 200},
    ),
    (
        "accounts:api_key_create",
        {"owner": 200, "admin": 200, "finance": 403, "developer": 200, "viewer": 403},
    ),
    (
        "accounts:audit",
        {"owner": 200, "admin": 200, "finance": 403, "developer": 403, "viewer": 403},
    ),
    (
        "accounts:members",
        {"owner": 200, "admin": 200, "finance": 200, "developer": 200, "viewer": 200},
    ),
    (
        "accounts:sub_accounts",
        {"owner": 200, "admin": 200, "finance": 200, "developer": 200, "viewer": 200},
    ),
]


@pytest.mark.parametrize(("url_name", "expected"), ROLE_PAGES)
@pytest.mark.parametrize("role", Role.values)
def test_role_matrix_on_pages(client, world, url_name, expected, role):
    response = _client(client, world["a"]["members"][role]).get(reverse(url_name))
    assert response.status_code == expected[role]


def test_developer_sees_only_own_keys_and_cannot_open_colleagues(client, world):
    c = _client(client, world["a"]["members"]["developer"])
    body = c.get(reverse("accounts:api_keys")).content.decode()
    assert "dev-key-a" in body and "key-a<" not in body.replace("dev-key-a<", "")
    assert c.get(reverse("accounts:api_key_detail", args=[world["a"]["key"].pk])).status_code == 404
    assert (
        c.post(reverse("accounts:api_key_revoke", args=[world["a"]["key"].pk])).status_code == 404
    )
    assert ApiKey.objects.get(pk=world["a"]["key"].pk).status == "active"


def test_anonymous_is_sent_to_login(client, world):
    for name in ("console:overview", "accounts:api_keys", "accounts:members", "accounts:audit"):
        response = client.get(reverse(name))
        assert response.status_code == 302 and reverse("accounts:login") in response.url
    assert client.get("/api/v1/keys/").status_code in (401, 403)


def test_key_form_shows_inline_error_naming_bad_cidr_and_saves_nothing(client, world):
    c = _client(client, world["a"]["members"]["owner"])
    count = ApiKey.objects.count()
    events = AuditEvent.objects.count()
    response = c.post(
        reverse("accounts:api_key_create"),
        {"name": "ci", "ip_allowlist": "10.0.0.0/8, 300.1.1.1/33", "priority": "normal"},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "300.1.1.1/33" in body and "field-error" in body
    assert "<html" not in body  # the htmx partial only
    assert ApiKey.objects.count() == count and AuditEvent.objects.count() == events


def test_created_key_is_shown_once_and_works(client, world):
    from accounts.keys import api_key_authenticate

    c = _client(client, world["a"]["members"]["owner"])
    response = c.post(
        reverse("accounts:api_key_create"),
        {
            "name": "shown-once",
            "ip_allowlist": "203.0.113.0/24",
            "spend_cap_daily": "12.50",
            "priority": "high",
        },
    )
    body = response.content.decode()
    key = ApiKey.objects.get(name="shown-once")
    raw = body.split('id="raw-key" type="text" readonly value="')[1].split('"')[0]
    assert "will not be shown again" in body
    auth = api_key_authenticate(raw)
    assert auth is not None and auth.key_id == key.pk
    assert key.spend_cap_daily == 12_500_000 and key.ip_allowlist == ["203.0.113.0/24"]
    # The detail and list pages never show the secret again.
    assert raw not in c.get(reverse("accounts:api_key_detail", args=[key.pk])).content.decode()
    assert raw not in c.get(reverse("accounts:api_keys")).content.decode()


def test_unknown_role_and_last_owner_are_clear_errors(client, world):
    c = _client(client, world["a"]["members"]["owner"])
    owner = world["a"]["members"]["owner"]
    response = c.post(
        reverse("accounts:member_role", args=[owner.pk]), {"role": "emperor"}, follow=True
    )
    assert "Choose one of the listed roles" in response.content.decode()
    response = c.post(
        reverse("accounts:member_role", args=[owner.pk]), {"role": "viewer"}, follow=True
    )
    assert "last owner" in response.content.decode()
    owner.refresh_from_db()
    assert owner.role == "owner"


def test_invitation_link_creates_account_and_membership(client, world, monkeypatch):
    monkeypatch.setattr("accounts.tasks.send_invitation_email.delay", lambda *a, **k: None)
    _, raw = invitation_create(
        actor=Actor(world["a"]["members"]["owner"]), email="joiner@example.com", role="developer"
    )
    url = reverse("accounts:invitation_accept", args=[raw])
    assert "Join Org A" in client.get(url).content.decode()
    response = client.post(url, {"password": "a-long-new-passphrase-7"})
    assert response.status_code == 302
    m = Membership.objects.get(user__email="joiner@example.com")
    assert m.role == "developer" and m.organization == world["a"]["org"]
    # The link works once.
    client.logout()
    again = client.get(url)
    assert again.status_code == 410 and "already been used" in again.content.decode()


def test_api_creates_key_returns_secret_once_and_errors_in_json(client, world):
    c = _client(client, world["a"]["members"]["owner"])
    response = c.post(
        "/api/v1/keys/",
        {"name": "api-key", "ip_allowlist": ["10.1.0.0/16"]},
        content_type="application/json",
    )
    assert response.status_code == 201
    data = response.json()
    assert data["key"].startswith("sk-") and data["prefix"] == data["key"][:13]
    listed = c.get("/api/v1/keys/").json()
    assert "key" not in listed["results"][0]
    bad = c.post(
        "/api/v1/keys/", {"name": "x", "spend_cap_daily": -5}, content_type="application/json"
    )
    assert bad.status_code == 400
    assert (
        bad.json()["error"]["code"] == "invalid"
        and "spend_cap_daily" in bad.json()["error"]["fields"]
    )


def test_personal_access_token_authenticates_api_in_its_org(client, world):
    _, raw = personal_access_token_issue(actor=Actor(world["b"]["members"]["admin"]), name="ci")
    response = client.get("/api/v1/keys/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    names = [k["name"] for k in response.json()["results"]]
    assert "key-b" in names and "key-a" not in names
    assert client.get("/api/v1/keys/", HTTP_AUTHORIZATION="Bearer pat_bogus").status_code == 401


# --- answers that show a secret once are never stored ------------------------------


def _never_stored(response) -> bool:
    return response.get("Cache-Control") == "no-store"


def test_the_new_key_page_and_its_htmx_partial_are_never_stored(client, world):
    c = _client(client, world["a"]["members"]["owner"])
    url = reverse("accounts:api_key_create")
    page = c.post(url, {"name": "page-key", "priority": "normal"})
    assert 'id="raw-key"' in page.content.decode() and _never_stored(page)
    partial = c.post(url, {"name": "htmx-key", "priority": "normal"}, HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert 'id="raw-key"' in body and "<html" not in body and _never_stored(partial)
    # The form, the key list and a key's page show no secret: ordinary pages.
    key = ApiKey.objects.get(name="page-key")
    for ordinary in (
        c.get(url),
        c.get(url, HTTP_HX_REQUEST="true"),
        c.get(reverse("accounts:api_keys")),
        c.get(reverse("accounts:api_key_detail", args=[key.pk])),
    ):
        assert ordinary.status_code == 200 and not _never_stored(ordinary)


def test_the_rotated_and_the_collected_secret_pages_are_never_stored(client, world):
    owner = world["a"]["members"]["owner"]
    key = world["a"]["key"]
    c = _client(client, owner)
    rotated = c.post(reverse("accounts:api_key_rotate", args=[key.pk]), {"grace_seconds": "0"})
    assert 'id="raw-key"' in rotated.content.decode() and _never_stored(rotated)
    assert not _never_stored(c.get(reverse("accounts:api_key_rotate", args=[key.pk])))
    # An admin rotates the owner's key: the owner collects the new secret, once.
    admin = world["a"]["members"]["admin"]
    _client(client, admin).post(
        reverse("accounts:api_key_rotate", args=[key.pk]), {"grace_seconds": "0"}
    )
    c = _client(client, owner)
    collected = c.post(reverse("accounts:api_key_collect_secret", args=[key.pk]))
    assert 'id="raw-key"' in collected.content.decode() and _never_stored(collected)


def test_api_answers_with_a_key_secret_are_never_stored_and_reads_are_ordinary(client, world):
    c = _client(client, world["a"]["members"]["owner"])
    created = c.post("/api/v1/keys/", {"name": "api-secret"}, content_type="application/json")
    assert created.status_code == 201 and created.json()["key"] and _never_stored(created)
    pk = created.json()["id"]
    rotated = c.post(f"/api/v1/keys/{pk}/rotate/", {}, content_type="application/json")
    assert rotated.status_code == 200 and rotated.json()["key"] and _never_stored(rotated)
    collected = c.post(f"/api/v1/keys/{pk}/secret/")
    assert collected.status_code == 200 and _never_stored(collected)
    for ordinary in (c.get("/api/v1/keys/"), c.get(f"/api/v1/keys/{pk}/")):
        assert ordinary.status_code == 200 and not _never_stored(ordinary)


def test_a_new_access_token_is_never_stored_and_the_token_list_is_ordinary(client, world):
    c = _client(client, world["a"]["members"]["owner"])
    url = reverse("accounts:access_tokens")
    created = c.post(url, {"name": "ci-secret", "scope": "read", "expires": "30"})
    assert 'id="raw-token"' in created.content.decode() and _never_stored(created)
    listed = c.get(url)
    assert 'id="raw-token"' not in listed.content.decode() and not _never_stored(listed)
