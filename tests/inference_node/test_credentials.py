"""Key-pool services: adding, editing, disabling and removing a channel's API
keys (by a person), and ``credential_refused`` (by the gateway): audit events
carry the hint only, the last active key's loss takes a channel down, the
change reaches the routing snapshot and the gateways."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from accounts.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from accounts.models import AuditEvent
from gateway_bridge import notify
from inference_node import services
from inference_node.facade import credential_refused
from inference_node.models import Credential, CredentialStatus, NodeHealth
from inference_node.selectors import build_routing_snapshot
from tests.inference_node.factories import CredentialFactory, NodeFactory, vendor_channel

pytestmark = pytest.mark.django_db

SECRET = "sk-live-abcdefghijklmnop-9f2c"


@pytest.fixture
def actor(owner, actor_for):
    return actor_for(owner)


@pytest.fixture
def channel(org):
    return vendor_channel(organization=org, name="deepseek", keys=(), serves=["deepseek-chat"])


def _events(action):
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def _routable_keys(org_id, model="deepseek-chat"):
    nodes = build_routing_snapshot().for_model(model, org_id)
    return [c.credential_id for n in nodes for c in n.credentials]


def test_add_stores_the_key_sealed_and_audits_its_hint_only(
    org, actor, channel, django_capture_on_commit_callbacks
):
    heard: list[str] = []
    unsubscribe = notify.subscribe(heard.append)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            key = services.credential_add(
                actor=actor, node_id=channel.pk, secret=f"  {SECRET} ", label="main", weight=3
            )
    finally:
        unsubscribe()
    key.refresh_from_db()
    assert (key.secret, key.secret_hint, key.label, key.weight) == (SECRET, "…9f2c", "main", 3)
    assert key.status == CredentialStatus.ACTIVE
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM inference_node_credential WHERE id = %s", [key.pk])
        (stored,) = cursor.fetchone()
    assert SECRET not in stored and stored.startswith("gAAAAA")
    (event,) = _events("credential.add")
    assert event.organization == org and event.actor == actor.user
    assert event.params["hint"] == "…9f2c" and SECRET not in str(event.params)
    assert SECRET not in event.target_label
    # The gateways hear of it and the channel is routable with the new key.
    assert "nodes" in heard
    assert _routable_keys(org.pk) == [key.pk]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"secret": ""}, "secret", "Enter the API key"),
        ({"secret": "sk has spaces 12345"}, "secret", "no spaces"),
        ({"weight": 0}, "weight", "between 1 and"),
        ({"rpm_limit": -5}, "rpm_limit", "between 1 and"),
        ({"tpm_limit": "lots"}, "tpm_limit", "whole number"),
        ({"label": "x" * 81}, "label", "at most 80"),
    ],
)
def test_add_reports_bad_fields_without_echoing_the_key(actor, channel, fields, field, message):
    data = {"secret": SECRET, **fields}
    with pytest.raises(ValidationFailed) as exc:
        services.credential_add(actor=actor, node_id=channel.pk, **data)
    assert message in " ".join(exc.value.fields[field])
    assert SECRET not in str(exc.value.fields) and "sk has spaces" not in str(exc.value.fields)
    assert not Credential.objects.exists()


def test_the_same_key_cannot_be_added_twice(actor, channel):
    services.credential_add(actor=actor, node_id=channel.pk, secret=SECRET)
    with pytest.raises(Conflict) as exc:  # 409 from the API: the pool, not the input
        services.credential_add(actor=actor, node_id=channel.pk, secret=SECRET)
    assert "already in the pool" in exc.value.fields["secret"][0]
    assert exc.value.code == "duplicate_key"
    assert channel.credentials.count() == 1


def test_update_changes_limits_but_never_the_secret(actor, channel):
    key = services.credential_add(actor=actor, node_id=channel.pk, secret=SECRET)
    services.credential_update(
        actor=actor, credential_id=key.pk, label="backup", rpm_limit=60, tpm_limit=None
    )
    key.refresh_from_db()
    assert (key.label, key.rpm_limit, key.tpm_limit) == ("backup", 60, None)
    event = _events("credential.update")[-1]
    assert event.params["rpm_limit"] == [None, 60] and event.params["hint"] == "…9f2c"
    with pytest.raises(ValidationFailed) as exc:
        services.credential_update(actor=actor, credential_id=key.pk, secret="sk-other-123456789")
    assert "add a new key and remove" in exc.value.fields["secret"][0]
    key.refresh_from_db()
    assert key.secret == SECRET


def test_disabling_the_last_active_key_takes_the_channel_down_and_enabling_revives_it(
    org, actor, channel
):
    first = services.credential_add(actor=actor, node_id=channel.pk, secret=SECRET)
    second = services.credential_add(actor=actor, node_id=channel.pk, secret=SECRET + "x")
    services.credential_set_status(actor=actor, credential_id=first.pk, status="disabled")
    channel.refresh_from_db()
    assert channel.health == NodeHealth.HEALTHY  # one key left
    first.refresh_from_db()
    assert first.disabled_reason == f"disabled by {actor.user.email}" and first.disabled_at
    assert _routable_keys(org.pk) == [second.pk]

    services.credential_set_status(actor=actor, credential_id=second.pk, status="disabled")
    channel.refresh_from_db()
    assert channel.health == NodeHealth.UNHEALTHY
    assert channel.last_error == "every API key is disabled"
    assert _routable_keys(org.pk) == []
    (down,) = _events("node.unhealthy")
    assert down.actor_label == "system" and down.params["error"] == "every API key is disabled"

    services.credential_set_status(actor=actor, credential_id=first.pk, status="active")
    channel.refresh_from_db()
    first.refresh_from_db()
    assert channel.health == NodeHealth.UNKNOWN and channel.last_error == ""
    assert first.disabled_reason == "" and first.disabled_at is None
    assert _routable_keys(org.pk) == [first.pk]  # a vendor channel: routable unless down
    assert [e.params["status"] for e in _events("credential.enable")] == [["disabled", "active"]]


def test_a_vendor_channel_keeps_its_last_key_a_self_hosted_node_need_not(org, actor, channel):
    key = services.credential_add(actor=actor, node_id=channel.pk, secret=SECRET)
    with pytest.raises(Conflict) as exc:
        services.credential_remove(actor=actor, credential_id=key.pk)
    assert exc.value.code == "last_key" and "add the new key" in exc.value.message
    newer = services.credential_add(actor=actor, node_id=channel.pk, secret=SECRET + "2")
    services.credential_remove(actor=actor, credential_id=key.pk)
    assert list(channel.credentials.all()) == [newer]
    (event,) = _events("credential.remove")
    assert event.params["hint"] == "…9f2c" and SECRET not in str(event.params)

    gpu = NodeFactory(organization=org)
    own = services.credential_add(actor=actor, node_id=gpu.pk, secret=SECRET)
    services.credential_remove(actor=actor, credential_id=own.pk)
    assert not gpu.credentials.exists()
    gpu.refresh_from_db()
    assert gpu.health == NodeHealth.HEALTHY  # falls back to its own token


@pytest.mark.parametrize("role", ["viewer", "developer", "finance"])
def test_only_managers_touch_key_pools(members, actor_for, channel, role):
    key = CredentialFactory(node=channel)
    other = actor_for(members[role])
    with pytest.raises(PermissionDenied):
        services.credential_add(actor=other, node_id=channel.pk, secret=SECRET)
    with pytest.raises(PermissionDenied):
        services.credential_set_status(actor=other, credential_id=key.pk, status="disabled")
    with pytest.raises(PermissionDenied):
        services.credential_remove(actor=other, credential_id=key.pk)
    key.refresh_from_db()
    assert key.status == CredentialStatus.ACTIVE and channel.credentials.count() == 1


def test_other_orgs_keys_are_not_found_and_shared_ones_are_staffs(actor, other_org):
    foreign = CredentialFactory(node=vendor_channel(organization=other_org, keys=()))
    shared = CredentialFactory(node=vendor_channel(organization=None, keys=()))
    for key_id in (foreign.pk, 999_999):
        with pytest.raises(NotFound):
            services.credential_update(actor=actor, credential_id=key_id, weight=5)
        with pytest.raises(NotFound):
            services.credential_remove(actor=actor, credential_id=key_id)
    with pytest.raises(NotFound):
        services.credential_add(actor=actor, node_id=foreign.node_id, secret=SECRET)
    with pytest.raises(PermissionDenied):
        services.credential_set_status(actor=actor, credential_id=shared.pk, status="disabled")
    with pytest.raises(PermissionDenied):
        services.credential_add(actor=actor, node_id=shared.node_id, secret=SECRET)
    foreign.refresh_from_db()
    shared.refresh_from_db()
    assert foreign.weight == 1 and shared.status == CredentialStatus.ACTIVE


# --- the gateway's report: a vendor refused a key ---------------------------------------


def test_refused_key_is_disabled_with_the_vendors_reason_and_a_system_audit_event(org, channel):
    first = CredentialFactory(node=channel, secret="sk-first-key-000000-aaaa")
    second = CredentialFactory(node=channel, secret="sk-second-key-00000-bbbb")
    message = "Incorrect API key provided. " + "x" * 400
    assert credential_refused(credential_id=first.pk, status=401, message=message) is True
    first.refresh_from_db()
    assert first.status == CredentialStatus.DISABLED and first.disabled_at is not None
    assert first.disabled_reason == f"401: {message[:200]}"
    (event,) = _events("credential.disable")
    assert event.actor is None and event.actor_label == "system"
    assert event.organization == org and event.target_id == str(first.pk)
    assert event.params["hint"] == "…aaaa" and event.params["by"] == "gateway"
    assert "sk-first-key" not in str(event.params)
    channel.refresh_from_db()
    assert channel.health == NodeHealth.HEALTHY  # the other key still works
    assert _routable_keys(org.pk) == [second.pk]


def test_refusing_the_last_key_takes_the_channel_down_once(
    org, channel, django_capture_on_commit_callbacks
):
    key = CredentialFactory(node=channel)
    heard: list[str] = []
    unsubscribe = notify.subscribe(heard.append)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert credential_refused(credential_id=key.pk, status=403, message="denied")
    finally:
        unsubscribe()
    channel.refresh_from_db()
    assert channel.health == NodeHealth.UNHEALTHY
    assert channel.last_error == "every API key is disabled"
    assert "nodes" in heard and _routable_keys(org.pk) == []
    # Repeats (the gateway retrying, another worker seeing the same 401) change nothing.
    assert credential_refused(credential_id=key.pk, status=401, message="again") is False
    assert credential_refused(credential_id=999_999, status=401, message="gone") is False
    key.refresh_from_db()
    assert key.disabled_reason == "403: denied"
    assert len(_events("credential.disable")) == 1 and len(_events("node.unhealthy")) == 1


def test_a_shared_channels_refusal_is_audited_without_an_organization():
    channel = vendor_channel(organization=None, keys=())
    key = CredentialFactory(node=channel)
    assert credential_refused(credential_id=key.pk, status=401, message="invalid x-api-key")
    (event,) = _events("credential.disable")
    assert event.organization is None and event.params["reason"] == "401: invalid x-api-key"


@pytest.mark.django_db(transaction=True)
def test_concurrent_refusals_from_worker_threads_disable_once(org):
    channel = vendor_channel(organization=org, keys=())
    key = CredentialFactory(node=channel)
    results: list[bool] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker():
        try:
            start.wait()
            results.append(credential_refused(credential_id=key.pk, status=401, message="bad"))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [] and sorted(results) == [False, False, False, True]
    assert AuditEvent.objects.filter(action="credential.disable").count() == 1
    channel.refresh_from_db()
    assert channel.health == NodeHealth.UNHEALTHY


def test_a_vendor_quoting_the_refused_key_does_not_get_it_stored(org, channel):
    key = CredentialFactory(node=channel, secret=SECRET)
    credential_refused(
        credential_id=key.pk, status=401, message=f"Incorrect API key provided: {SECRET}."
    )
    key.refresh_from_db()
    assert key.disabled_reason == "401: Incorrect API key provided: …9f2c."
    (event,) = _events("credential.disable")
    assert SECRET not in str(event.params)
