"""A key pinned to one inference node (platform staff's load test of one
channel): only the key-issuing service pins, and only for staff; no form or
API can set or change it; the key's page shows it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.errors import PermissionDenied, ValidationFailed
from accounts.keys import api_key_authenticate
from accounts.models import ApiKey, AuditEvent
from accounts.services import api_key_issue, api_key_update
from accounts.services.tokens import personal_access_token_issue

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_owner(owner):
    owner.user.is_staff = True
    owner.user.save(update_fields=["is_staff"])
    return owner


def test_staff_pin_a_key_at_issue_and_the_gateway_view_carries_it(staff_owner, actor_for):
    key, raw = api_key_issue(actor=actor_for(staff_owner), name="load", pinned_node_id=7)
    assert key.pinned_node_id == 7
    assert api_key_authenticate(raw).pinned_node_id == 7
    event = AuditEvent.objects.get(action="api_key.issue")
    assert event.params["pinned_node_id"] == 7


def test_a_member_who_is_not_staff_cannot_pin(owner, actor_for):
    with pytest.raises(PermissionDenied):
        api_key_issue(actor=actor_for(owner), name="load", pinned_node_id=7)
    assert not ApiKey.objects.exists()


def test_the_update_service_refuses_a_pin(staff_owner, actor_for):
    actor = actor_for(staff_owner)
    key, _ = api_key_issue(actor=actor, name="plain")
    with pytest.raises(ValidationFailed):
        api_key_update(actor=actor, key_id=key.pk, pinned_node_id=7)
    key.refresh_from_db()
    assert key.pinned_node_id is None


def test_the_key_forms_cannot_set_or_clear_a_pin(client, staff_owner, actor_for):
    client.force_login(staff_owner.user)
    response = client.post(
        reverse("accounts:api_key_create"),
        {"name": "from-the-form", "priority": "normal", "pinned_node_id": "7"},
    )
    assert response.status_code in (200, 302)  # the secret page, or back to the list
    created = ApiKey.objects.get(name="from-the-form")
    assert created.pinned_node_id is None

    pinned, _ = api_key_issue(actor=actor_for(staff_owner), name="load", pinned_node_id=7)
    url = reverse("accounts:api_key_detail", args=[pinned.pk])
    page = client.get(url).content.decode()
    assert "Pinned to node #7" in page
    saved = client.post(url, {"name": "load-renamed", "priority": "normal", "pinned_node_id": ""})
    assert saved.status_code == 302
    pinned.refresh_from_db()
    assert (pinned.name, pinned.pinned_node_id) == ("load-renamed", 7)
    # An unpinned key's page says nothing of pinning.
    assert (
        "Pinned to node"
        not in client.get(reverse("accounts:api_key_detail", args=[created.pk])).content.decode()
    )


def test_the_api_cannot_pin_a_key(client, staff_owner, actor_for):
    _, token = personal_access_token_issue(actor=actor_for(staff_owner), name="script")
    response = client.post(
        "/api/v1/keys/",
        {"name": "from-the-api", "pinned_node_id": 7},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 201
    assert ApiKey.objects.get(name="from-the-api").pinned_node_id is None
    assert "pinned_node_id" not in response.json()
