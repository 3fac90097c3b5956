"""REST API for vendor channels: creating one with its first keys, the key
pool endpoints, the same errors as the console in the API's error shape, and
no secret in any answer."""

from __future__ import annotations

import pytest

from inference_node.models import Credential, CredentialStatus, Node
from tests.inference_node.factories import CredentialFactory, vendor_channel

pytestmark = pytest.mark.django_db

KEY = "sk-api-channel-key-00000-aa11"
KEY2 = "sk-api-channel-key-00000-bb22"


@pytest.fixture
def api(client, owner):
    client.force_login(owner.user)
    return client


def _post(c, url, data=None):
    return c.post(url, data or {}, content_type="application/json")


def test_create_a_channel_with_a_preset_and_keys(api):
    response = _post(
        api,
        "/api/v1/nodes/",
        {
            "name": "claude",
            "preset": "anthropic",
            "credentials": [{"secret": KEY, "label": "main", "rpm_limit": 50}, {"secret": KEY2}],
            "models": [
                {
                    "public_name": "claude-sonnet-4",
                    "upstream_name": "claude-sonnet-4-20250514",
                    "tier": 0,
                    "weight": 2,
                    "cost_currency": "USD",
                    "cost_input_per_mtok": 3_000_000,
                    "cost_cache_read_per_mtok": 300_000,
                    "cost_cache_write_per_mtok": 3_750_000,
                    "cost_output_per_mtok": 15_000_000,
                }
            ],
        },
    )
    assert response.status_code == 201, response.content
    text = response.content.decode()
    assert KEY not in text and KEY2 not in text
    data = response.json()
    assert (data["kind"], data["preset"], data["api_path"], data["health_check"]) == (
        "anthropic",
        "anthropic",
        "/v1",
        "models",
    )
    assert data["base_url"] == "https://api.anthropic.com"
    assert [(k["hint"], k["label"], k["rpm_limit"]) for k in data["credentials"]] == [
        ("…aa11", "main", 50),
        ("…bb22", "", None),
    ]
    assert all("secret" not in k for k in data["credentials"])
    assert data["key_pool"] == {"active": 2, "total": 2, "down": False, "down_reason": ""}
    (model,) = data["models"]
    assert model["cost_output_per_mtok"] == 15_000_000 and model["weight"] == 2


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"name": "x", "preset": "openai"}, "credentials", "at least one API key"),
        (
            {
                "name": "x",
                "preset": "openai",
                "base_url": "gopher://x",
                "credentials": [{"secret": KEY}],
            },
            "base_url",
            "http:// or https://",
        ),
        (
            {
                "name": "x",
                "base_url": "http://10.0.0.1:8000",
                "models": [{"public_name": "m"}, {"public_name": "m", "upstream_name": "n"}],
            },
            "models",
            "listed twice",
        ),
        (
            {
                "name": "x",
                "base_url": "http://10.0.0.1:8000",
                "models": [{"public_name": "m", "cost_currency": "USD", "cost_input_per_mtok": -3}],
            },
            "models",
            "cannot be negative",
        ),
        ({"name": "x", "kind": "mistral", "base_url": "http://10.0.0.1"}, "kind", "Choose a kind"),
    ],
)
def test_create_errors_name_their_field(api, body, field, message):
    response = _post(api, "/api/v1/nodes/", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and message in " ".join(error["fields"][field])
    assert not Node.objects.exists() and KEY not in response.content.decode()


def test_key_pool_endpoints(api, org):
    node = vendor_channel(organization=org, keys=(KEY,))
    base = f"/api/v1/nodes/{node.pk}/credentials/"
    listed = api.get(base).json()
    assert [k["hint"] for k in listed] == ["…aa11"]
    added = _post(api, base, {"secret": KEY2, "weight": 3, "max_concurrency": 4})
    assert added.status_code == 201 and KEY2 not in added.content.decode()
    key_id = added.json()["id"]
    assert added.json()["hint"] == "…bb22" and added.json()["status"] == "active"

    patched = api.patch(
        f"{base}{key_id}/", {"label": "spare", "tpm_limit": 100000}, content_type="application/json"
    )
    assert patched.status_code == 200 and patched.json()["label"] == "spare"
    refused = api.patch(f"{base}{key_id}/", {"secret": "sk-new"}, content_type="application/json")
    assert refused.status_code == 400 and "secret" in refused.json()["error"]["fields"]
    assert Credential.objects.get(pk=key_id).secret == KEY2

    disabled = _post(api, f"{base}{key_id}/disable/")
    assert disabled.json()["status"] == "disabled" and disabled.json()["disabled_reason"]
    enabled = _post(api, f"{base}{key_id}/enable/")
    assert enabled.json()["status"] == "active" and enabled.json()["disabled_at"] is None

    assert api.delete(f"{base}{key_id}/").status_code == 204
    last = node.credentials.get()
    response = api.delete(f"{base}{last.pk}/")
    assert response.status_code == 409 and response.json()["error"]["code"] == "last_key"
    detail = api.get(f"/api/v1/nodes/{node.pk}/").json()
    assert detail["key_pool"]["total"] == 1


def test_a_channel_with_every_key_disabled_reads_as_down(api, org):
    node = vendor_channel(organization=org, keys=(KEY,))
    key = node.credentials.get()
    _post(api, f"/api/v1/nodes/{node.pk}/credentials/{key.pk}/disable/")
    data = api.get(f"/api/v1/nodes/{node.pk}/").json()
    assert data["key_pool"] == {
        "active": 0,
        "total": 1,
        "down": True,
        "down_reason": "every API key is disabled",
    }
    assert data["health"]["state"] == "unhealthy"
    assert data["health"]["last_error"] == "every API key is disabled"


@pytest.mark.parametrize("role", ["viewer", "developer", "finance"])
def test_roles_that_cannot_manage_get_403_on_keys(client, members, org, role):
    node = vendor_channel(organization=org, keys=(KEY,))
    key = node.credentials.get()
    client.force_login(members[role].user)
    base = f"/api/v1/nodes/{node.pk}/credentials/"
    for response in (
        _post(client, base, {"secret": KEY2}),
        _post(client, f"{base}{key.pk}/disable/"),
        client.delete(f"{base}{key.pk}/"),
    ):
        assert response.status_code == 403
    key.refresh_from_db()
    assert key.status == CredentialStatus.ACTIVE and node.credentials.count() == 1


def test_shared_channel_keys_are_not_shown_or_changed(api):
    shared = vendor_channel(organization=None, keys=(KEY,))
    key = shared.credentials.get()
    one = api.get(f"/api/v1/nodes/{shared.pk}/").json()
    assert one["credentials"] is None and one["base_url"] is None
    assert api.get(f"/api/v1/nodes/{shared.pk}/credentials/").status_code == 403
    assert _post(api, f"/api/v1/nodes/{shared.pk}/credentials/{key.pk}/disable/").status_code == 403


def test_a_key_is_found_only_under_its_own_node(api, org):
    mine = vendor_channel(organization=org, keys=(KEY,))
    other = vendor_channel(organization=org, keys=(KEY2,))
    foreign_key = CredentialFactory(node=other)
    response = _post(api, f"/api/v1/nodes/{mine.pk}/credentials/{foreign_key.pk}/disable/")
    assert response.status_code == 404
    foreign_key.refresh_from_db()
    assert foreign_key.status == CredentialStatus.ACTIVE
