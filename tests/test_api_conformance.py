"""The REST API's answers as its OpenAPI description states them (issue 19's
schemathesis findings, one by one; tests/test_api_fuzz.py sweeps the rest)."""

from __future__ import annotations

import pytest
import yaml

from accounts.actors import Actor
from accounts.models import Role
from tests.factories import MembershipFactory, issue_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner_client(client):
    owner = MembershipFactory(role=Role.OWNER)
    client.force_login(owner.user)
    client.owner = owner
    return client


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        return yaml.safe_load(Client().get("/api/v1/schema/").content)


def test_a_key_without_a_sub_account_reads_null_and_the_schema_allows_it(owner_client, schema):
    issue_key(Actor(owner_client.owner, "203.0.113.5"), name="plain")
    listed = owner_client.get("/api/v1/keys/").json()["results"]
    assert listed[0]["sub_account"] is None
    field = schema["components"]["schemas"]["ApiKey"]["properties"]["sub_account"]
    assert field["nullable"] is True


def test_a_page_size_that_is_not_a_whole_number_in_range_is_refused(owner_client):
    for bad in ("abc", "true", "0", "501", "-3"):
        response = owner_client.get("/api/v1/keys/", {"page_size": bad})
        assert response.status_code == 400, bad
        assert "page_size" in response.json()["error"]["fields"]
    assert owner_client.get("/api/v1/keys/", {"page_size": "2"}).status_code == 200


def test_a_query_parameter_given_twice_is_refused(owner_client):
    response = owner_client.get("/api/v1/invoices/?status=draft&status=paid")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"status": ["Give this parameter once."]}


def test_an_unmatched_api_path_answers_json_and_console_pages_html(owner_client):
    response = owner_client.get("/api/v1/keys/not-a-number/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"
    page = owner_client.get("/no-such-console-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_the_api_reads_json_only(owner_client):
    response = owner_client.post("/api/v1/sub-accounts/", {"name": "team"})  # multipart
    assert response.status_code == 415
    assert (
        owner_client.post(
            "/api/v1/sub-accounts/", {"name": "team"}, content_type="application/json"
        ).status_code
        == 201
    )


def test_every_operation_documents_its_error_answers(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            codes = set(operation["responses"])
            assert {"401", "403"} <= codes, (method, path)
            if "{" in path:
                assert "404" in codes, (method, path)
            if method != "get":
                assert "409" in codes, (method, path)
            error = operation["responses"]["403"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}
    members_delete = schema["paths"]["/api/v1/members/{id}/"]["delete"]
    assert {p["name"] for p in members_delete["parameters"]} >= {"keys", "hand_over_to"}
