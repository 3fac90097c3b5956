from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from accounts import keys
from accounts.keys import api_key_authenticate
from accounts.models import ApiKey, AuditEvent, SubAccountStatus
from accounts.services import api_key_revoke, api_key_rotate, api_key_update, sub_account_update
from tests.factories import SubAccountFactory, issue_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_actor(admin, actor_for):
    return actor_for(admin)


def test_valid_key_authenticates_with_its_restrictions(org, admin_actor):
    sub = SubAccountFactory(
        organization=org,
        allowed_models=["gpt-a", "gpt-b"],
        spend_cap_daily=5_000_000,
        rpm_limit=100,
    )
    key, raw = issue_key(
        admin_actor,
        "prod",
        sub_account_id=sub.pk,
        allowed_models=["gpt-a"],
        spend_cap_daily=1_000_000,
        ip_allowlist=["10.0.0.0/8"],
        priority="high",
        rpm_limit=10,
    )
    auth = api_key_authenticate(raw)
    assert auth is not None
    assert auth.key_id == key.pk
    assert auth.public_id == key.public_id
    assert auth.organization_id == org.pk
    assert auth.organization_slug == "acme"
    assert auth.sub_account_id == sub.pk
    assert auth.owner_id == admin_actor.user.pk
    assert auth.allowed_models_key == ("gpt-a",)
    assert auth.allowed_models_sub_account == ("gpt-a", "gpt-b")
    assert auth.key_caps == (1_000_000, None, None)
    assert auth.sub_account_caps == (5_000_000, None, None)
    assert (auth.key_rpm, auth.sub_account_rpm) == (10, 100)
    assert auth.priority == "high"
    assert auth.model_allowed("gpt-a")
    assert not auth.model_allowed("gpt-b")
    assert auth.ip_allowed("10.1.2.3")
    assert not auth.ip_allowed("192.168.0.1")


def test_raw_key_format(admin_actor):
    key, raw = issue_key(admin_actor)
    assert raw.startswith(f"sk-{key.public_id}_")
    assert keys.split_public_id(raw, keys.KEY_PREFIX) == key.public_id
    assert key.prefix == f"sk-{key.public_id}"


def test_wrong_secret_is_refused(admin_actor):
    _, raw = issue_key(admin_actor)
    head, _, secret = raw.partition("_")
    tampered = f"{head}_{'A' if secret[0] != 'A' else 'B'}{secret[1:]}"
    assert api_key_authenticate(tampered) is None


def test_unknown_prefix_returns_none(admin_actor):
    issue_key(admin_actor)
    _, raw, _ = keys.new_secret(keys.KEY_PREFIX)
    assert api_key_authenticate(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "sk-",
        "sk-short_x",
        "pat_abcdefghij_" + "x" * 40,
        "sk-abcdefghijX" + "x" * 40,  # no underscore after the id
        "sk-abcdefghij_" + "x" * 300,  # too long
        None,
        12345,
    ],
)
def test_malformed_key_returns_none(admin_actor, raw):
    issue_key(admin_actor)
    assert api_key_authenticate(raw) is None


def test_revoked_key_is_refused(admin_actor):
    key, raw = issue_key(admin_actor)
    api_key_revoke(actor=admin_actor, key_id=key.pk)
    assert api_key_authenticate(raw) is None


def test_expired_key_is_refused(admin_actor):
    key, raw = issue_key(admin_actor, expires_at=timezone.now() + timedelta(hours=1))
    assert api_key_authenticate(raw) is not None
    assert api_key_authenticate(raw, now=timezone.now() + timedelta(hours=2)) is None
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_key_authenticate(raw) is None


def test_key_of_suspended_sub_account_is_refused(org, admin_actor):
    sub = SubAccountFactory(organization=org)
    _, raw = issue_key(admin_actor, sub_account_id=sub.pk)
    assert api_key_authenticate(raw) is not None
    sub_account_update(actor=admin_actor, sub_account_id=sub.pk, status=SubAccountStatus.SUSPENDED)
    assert api_key_authenticate(raw) is None
    sub_account_update(actor=admin_actor, sub_account_id=sub.pk, status=SubAccountStatus.ACTIVE)
    assert api_key_authenticate(raw) is not None


def test_key_of_inactive_organization_is_refused(org, admin_actor):
    _, raw = issue_key(admin_actor)
    org.is_active = False
    org.save()
    assert api_key_authenticate(raw) is None


def test_rotation_without_grace_stops_old_secret_at_once(admin_actor):
    key, old_raw = issue_key(admin_actor)
    old_public_id = key.public_id
    key, new_raw = api_key_rotate(actor=admin_actor, key_id=key.pk)
    assert new_raw != old_raw
    assert key.public_id != old_public_id
    assert key.previous_public_id is None
    assert key.previous_secret_hash == ""
    assert api_key_authenticate(old_raw) is None
    auth = api_key_authenticate(new_raw)
    assert auth is not None
    assert auth.key_id == key.pk


def test_rotation_with_grace_keeps_old_secret_until_it_ends(admin_actor):
    key, old_raw = issue_key(admin_actor)
    key, new_raw = api_key_rotate(actor=admin_actor, key_id=key.pk, grace_seconds=3600)
    now = timezone.now()
    assert api_key_authenticate(new_raw) is not None
    old_auth = api_key_authenticate(old_raw)
    assert old_auth is not None
    assert old_auth.key_id == key.pk
    assert api_key_authenticate(old_raw, now=now + timedelta(seconds=3601)) is None
    assert api_key_authenticate(new_raw, now=now + timedelta(seconds=3601)) is not None


def test_second_rotation_replaces_the_grace_secret(admin_actor):
    key, first = issue_key(admin_actor)
    key, second = api_key_rotate(actor=admin_actor, key_id=key.pk, grace_seconds=600)
    key, third = api_key_rotate(actor=admin_actor, key_id=key.pk)
    assert api_key_authenticate(first) is None
    assert api_key_authenticate(second) is None
    assert api_key_authenticate(third) is not None


def test_revoking_during_grace_kills_both_secrets(admin_actor):
    key, old_raw = issue_key(admin_actor)
    key, new_raw = api_key_rotate(actor=admin_actor, key_id=key.pk, grace_seconds=600)
    api_key_revoke(actor=admin_actor, key_id=key.pk)
    assert api_key_authenticate(old_raw) is None
    assert api_key_authenticate(new_raw) is None


def test_old_secret_with_wrong_hash_is_refused_during_grace(admin_actor):
    key, old_raw = issue_key(admin_actor)
    key, _ = api_key_rotate(actor=admin_actor, key_id=key.pk, grace_seconds=600)
    head, _, secret = old_raw.partition("_")
    assert api_key_authenticate(f"{head}_{secret[::-1]}") is None


def test_pepper_keys_the_hash(admin_actor, settings):
    _, raw = issue_key(admin_actor)
    settings.API_KEY_PEPPER = "another-pepper"
    assert api_key_authenticate(raw) is None


def _all_stored_text() -> str:
    """Every value of every column of every accounts table, as text."""
    chunks = []
    with connection.cursor() as cursor:
        for model in apps.get_app_config("accounts").get_models(include_auto_created=True):
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"SELECT * FROM {table}")  # noqa: S608 - table names from Django
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def test_secrets_are_never_stored_in_clear(org, admin_actor):
    sub = SubAccountFactory(organization=org)
    key, raw1 = issue_key(admin_actor, sub_account_id=sub.pk)
    api_key_update(actor=admin_actor, key_id=key.pk, name="renamed", rpm_limit=5)
    key, raw2 = api_key_rotate(actor=admin_actor, key_id=key.pk, grace_seconds=60)
    key, raw3 = api_key_rotate(actor=admin_actor, key_id=key.pk)
    api_key_revoke(actor=admin_actor, key_id=key.pk)
    _, raw4 = issue_key(admin_actor, "second")

    stored = _all_stored_text()
    params = [e.params for e in AuditEvent.objects.all()]
    assert params
    for raw in (raw1, raw2, raw3, raw4):
        secret = raw.partition("_")[2]
        assert raw not in stored
        assert secret not in stored
        for p in params:
            assert raw not in repr(p)
            assert secret not in repr(p)
    # The prefix (public id) is what the audit trail names instead.
    issue_event = AuditEvent.objects.filter(action="api_key.issue").order_by("id").first()
    assert issue_event.params["prefix"].startswith("sk-")


def test_stored_hash_is_keyed_hmac_of_the_whole_key(admin_actor):
    key, raw = issue_key(admin_actor)
    key.refresh_from_db()
    assert key.secret_hash == keys.keyed_hash(raw)
    assert len(key.secret_hash) == 64


def test_only_the_issuing_service_marks_a_key_as_load_test_traffic(client, admin, admin_actor):
    """The flag is set at issue by the load test (``test_traffic``), reaches
    the gateway's view of the key, is shown read-only, and neither the key
    form nor the API can set or change it."""
    key, raw = issue_key(admin_actor, "load test #1", test_traffic=True)
    assert key.test_traffic and api_key_authenticate(raw).test_traffic is True
    plain, raw_plain = issue_key(admin_actor, "plain")
    assert api_key_authenticate(raw_plain).test_traffic is False
    client.force_login(admin.user)
    api = client.post(
        "/api/v1/keys/", {"name": "sneaky", "test_traffic": True}, content_type="application/json"
    )
    assert api.status_code == 201 and api.json()["test_traffic"] is False
    assert ApiKey.objects.get(name="sneaky").test_traffic is False
    client.post(f"/keys/{plain.pk}/", {"name": "plain", "priority": "normal", "test_traffic": "on"})
    plain.refresh_from_db()
    assert plain.test_traffic is False
    assert client.get(f"/api/v1/keys/{key.pk}/").json()["test_traffic"] is True
    page = client.get(f"/keys/{key.pk}/").content.decode()
    assert "Load test key — calls not billed" in page
    assert "Load test key" not in client.get(f"/keys/{plain.pk}/").content.decode()
