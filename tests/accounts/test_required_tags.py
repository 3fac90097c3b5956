"""Required tag keys: a key or sub-account can require tag keys of every call
(``x-gateway-tags``). They are set in the console forms and the REST API,
checked by the tag-key rule, audited, shown on the detail pages, carried to
the gateway as the union of the key's and its sub-account's, and out of
another organization's reach."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.actors import Actor
from accounts.errors import ValidationFailed
from accounts.keys import authenticated_view
from accounts.models import ApiKey, AuditEvent, SubAccount
from accounts.services import api_key_update
from tests.accounts import test_views

_client = test_views._client
world = test_views.world  # the two-organization fixture of the accounts view tests

pytestmark = pytest.mark.django_db


def test_the_key_form_saves_required_tags_audits_them_and_the_gateway_gets_the_union(client, world):
    a = world["a"]
    c = _client(client, a["members"]["owner"])
    # Given a sub-account requiring "project"
    response = c.post(
        reverse("accounts:sub_account_detail", args=[a["sub"].pk]),
        {"name": a["sub"].name, "status": "active", "required_tag_keys": "project"},
    )
    assert response.status_code == 302
    # When the owner requires "team, env" of a key in it
    response = c.post(
        reverse("accounts:api_key_detail", args=[a["key"].pk]),
        {"name": a["key"].name, "priority": "normal", "required_tag_keys": "team, env team"},
    )
    assert response.status_code == 302
    key = ApiKey.objects.get(pk=a["key"].pk)
    assert key.required_tag_keys == ["team", "env"]
    event = AuditEvent.objects.filter(action="api_key.update").latest("pk")
    assert event.params["required_tag_keys"] == [[], ["team", "env"]]
    assert AuditEvent.objects.filter(action="sub_account.update").latest("pk").params[
        "required_tag_keys"
    ] == [[], ["project"]]
    # Then the form shows them, and the gateway's view of the key carries both levels'
    page = c.get(reverse("accounts:api_key_detail", args=[key.pk])).content.decode()
    assert 'value="team, env"' in page
    assert "must also carry the tags sub-account 'team-a' requires: project" in page
    assert authenticated_view(key).required_tag_keys == ("team", "env", "project")


def test_a_viewer_sees_the_required_tags_on_the_detail_pages(client, world):
    a = world["a"]
    Actor(a["members"]["owner"])
    ApiKey.objects.filter(pk=a["key"].pk).update(required_tag_keys=["team"])
    SubAccount.objects.filter(pk=a["sub"].pk).update(required_tag_keys=["project"])
    c = _client(client, a["members"]["viewer"])
    key_page = c.get(reverse("accounts:api_key_detail", args=[a["key"].pk])).content.decode()
    assert "Required tags" in key_page
    assert "Required tags</dt><dd>team (and the sub-account's: project)</dd>" in key_page
    sub_page = c.get(reverse("accounts:sub_account_detail", args=[a["sub"].pk])).content.decode()
    assert "Required tags</dt><dd>project</dd>" in sub_page


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("team, ba/d key!", "&#x27;ba/d&#x27;, &#x27;key!&#x27; are not valid tag keys"),
        ("é", "&#x27;é&#x27; is not a valid tag key"),
        ("k" * 33, "use 1 to 32 letters"),
        (", ".join(f"k{i}" for i in range(11)), "At most 10 required tag keys are allowed."),
    ],
)
def test_the_forms_refuse_a_bad_required_tag_key_and_save_nothing(client, world, value, problem):
    a = world["a"]
    c = _client(client, a["members"]["owner"])
    events = AuditEvent.objects.count()
    for url, data in (
        (
            reverse("accounts:api_key_detail", args=[a["key"].pk]),
            {"name": a["key"].name, "priority": "normal"},
        ),
        (
            reverse("accounts:sub_account_detail", args=[a["sub"].pk]),
            {"name": a["sub"].name, "status": "active"},
        ),
        (reverse("accounts:sub_accounts"), {"name": "new-team"}),
    ):
        response = c.post(url, {**data, "required_tag_keys": value})
        assert response.status_code == 200
        body = response.content.decode()
        assert problem in body and "field-error" in body
    assert ApiKey.objects.get(pk=a["key"].pk).required_tag_keys == []
    assert SubAccount.objects.get(pk=a["sub"].pk).required_tag_keys == []
    assert not SubAccount.objects.filter(name="new-team").exists()
    assert AuditEvent.objects.count() == events


def test_the_form_error_reads_chinese(client, world):
    owner = world["a"]["members"]["owner"]
    owner.user.language = "zh-hans"
    owner.user.save(update_fields=["language"])
    c = _client(client, owner)
    response = c.post(
        reverse("accounts:api_key_detail", args=[world["a"]["key"].pk]),
        {"name": world["a"]["key"].name, "priority": "normal", "required_tag_keys": "a b!"},
    )
    body = response.content.decode()
    assert "不是有效的标签键" in body and "必需标签" in body


def test_the_api_sets_and_shows_required_tags_and_refuses_bad_ones(client, world):
    a = world["a"]
    c = _client(client, a["members"]["owner"])
    url = f"/api/v1/keys/{a['key'].pk}/"
    response = c.patch(url, {"required_tag_keys": ["team", "cost.center"]}, "application/json")
    assert response.status_code == 200, response.content
    assert response.json()["required_tag_keys"] == ["team", "cost.center"]
    assert c.get(url).json()["required_tag_keys"] == ["team", "cost.center"]
    bad = c.patch(url, {"required_tag_keys": ["no spaces"]}, "application/json")
    assert bad.status_code == 400
    assert "required_tag_keys" in bad.json()["error"]["fields"]
    sub_url = f"/api/v1/sub-accounts/{a['sub'].pk}/"
    response = c.patch(sub_url, {"required_tag_keys": ["project"]}, "application/json")
    assert response.status_code == 200 and response.json()["required_tag_keys"] == ["project"]
    too_many = c.patch(
        sub_url, {"required_tag_keys": [f"k{i}" for i in range(11)]}, "application/json"
    )
    assert too_many.status_code == 400
    assert SubAccount.objects.get(pk=a["sub"].pk).required_tag_keys == ["project"]


def test_another_org_can_neither_see_nor_change_required_tags(client, world):
    a = world["a"]
    ApiKey.objects.filter(pk=a["key"].pk).update(required_tag_keys=["secret-team"])
    c = _client(client, world["b"]["members"]["owner"])
    page = c.get(reverse("accounts:api_key_detail", args=[a["key"].pk]))
    assert page.status_code == 404 and b"secret-team" not in page.content
    listed = c.get("/api/v1/keys/").content
    assert b"secret-team" not in listed
    for url in (f"/api/v1/keys/{a['key'].pk}/", f"/api/v1/sub-accounts/{a['sub'].pk}/"):
        response = c.patch(url, {"required_tag_keys": ["x"]}, "application/json")
        assert response.status_code == 404
    response = c.post(
        reverse("accounts:sub_account_detail", args=[a["sub"].pk]),
        {"name": "hijack", "status": "active", "required_tag_keys": "x"},
    )
    assert response.status_code in (403, 404)
    assert ApiKey.objects.get(pk=a["key"].pk).required_tag_keys == ["secret-team"]
    assert SubAccount.objects.get(pk=a["sub"].pk).required_tag_keys == []


def test_a_developer_may_add_required_tags_an_admin_set_but_not_remove_them(world):
    a = world["a"]
    admin = Actor(a["members"]["admin"])
    developer = Actor(a["members"]["developer"])
    dev_key = a["dev_key"]
    api_key_update(actor=admin, key_id=dev_key.pk, required_tag_keys=["team"])
    api_key_update(actor=developer, key_id=dev_key.pk, required_tag_keys=["team", "feature"])
    with pytest.raises(ValidationFailed) as refused:
        api_key_update(actor=developer, key_id=dev_key.pk, required_tag_keys=["feature"])
    assert "An admin requires the tag keys team" in str(refused.value.fields)
    assert ApiKey.objects.get(pk=dev_key.pk).required_tag_keys == ["team", "feature"]
