"""The call-log REST API: filters, cursor pages, errors in the project's
format, role scoping and tenant isolation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from accounts.actors import Actor
from accounts.models import Role
from accounts.services import personal_access_token_issue
from tests.usage.log_fixtures import T0, call, login, save

pytestmark = pytest.mark.django_db
LIST = "/api/v1/calls/"


def ids(body) -> list[str]:
    return [r["request_id"] for r in body["results"]]


def test_list_returns_calls_newest_first_with_names(client, a):
    response = login(client, a).get(LIST)
    assert response.status_code == 200
    body = response.json()
    assert ids(body) == [c.request_id for c in reversed(a.calls)]
    first = next(r for r in body["results"] if r["request_id"] == a.calls[0].request_id)
    assert first["key"] == {"id": a.key.pk, "prefix": a.key.prefix, "name": a.key.name}
    assert first["sub_account"] == {"id": a.sub.pk, "name": a.sub.name}
    assert first["node"] == {"id": a.node.pk, "name": "gpu-a"}
    assert first["cost"] == 1_000 and first["currency"] == "USD"
    assert first["latency_us"] == 300_000 and first["ttft_us"] == 95_500
    assert first["input_tokens"] == 1200 and first["reasoning_tokens"] == 40
    assert body["next"] is None and body["previous"] is None


def test_list_accepts_the_page_filters(client, a):
    c = login(client, a)
    got = ids(c.get(LIST, {"status": "5xx", "model": "gpt-test"}).json())
    assert got == [x.request_id for x in reversed(a.calls)
                   if x.status_code >= 500 and x.model == "gpt-test"]  # fmt: skip
    got = ids(c.get(LIST, {"key": a.dev_key.pk, "min_latency_ms": 500}).json())
    assert set(got) == {x.request_id for x in a.calls
                        if x.api_key_id == a.dev_key.pk and x.latency_us >= 500_000}  # fmt: skip
    got = ids(c.get(LIST, {"request_id": a.calls[2].request_id}).json())
    assert got == [a.calls[2].request_id]


def test_cursor_pages_walk_everything_once(client, a):
    save([call(a.org, a.key, started_at=T0 + timedelta(hours=1)) for _ in range(7)])
    c = login(client, a)
    seen, url = [], f"{LIST}?limit=4&status=ok"
    while url:
        body = c.get(url).json()
        seen += ids(body)
        url = body["next"]
    assert len(seen) == len(set(seen)) == 7 + 4
    assert "status=ok" in c.get(f"{LIST}?limit=4&status=ok").json()["next"]
    # previous leads back from the second page to the first.
    first = c.get(f"{LIST}?limit=4").json()
    second = c.get(first["next"]).json()
    assert ids(c.get(second["previous"]).json()) == ids(first)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "nope"}, "status"),
        ({"limit": "1000000"}, "limit"),
        ({"from": "2026-11-21T00:00Z", "to": "2026-11-20T00:00Z"}, "to"),
        ({"min_latency_ms": "x"}, "min_latency_ms"),
        ({"before": "!!"}, "before"),
        ({"key": "999999"}, "key"),
    ],
)
def test_invalid_filters_are_400_naming_the_field(client, a, params, field):
    response = login(client, a).get(LIST, params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["fields"]
    assert error["message"].startswith(f"{field}: ")


def test_another_organizations_key_is_an_invalid_choice(client, a, b):
    response = login(client, a).get(LIST, {"key": b.key.pk})
    assert response.status_code == 400
    assert "valid choice" in response.json()["error"]["fields"]["key"][0]
    response = login(client, a).get(LIST, {"sub_account": b.sub.pk})
    assert "sub_account" in response.json()["error"]["fields"]


def test_developer_sees_only_their_own_keys(client, a):
    c = login(client, a, Role.DEVELOPER)
    got = ids(c.get(LIST).json())
    assert set(got) == {x.request_id for x in a.calls if x.api_key_id == a.dev_key.pk}
    colleague = next(x for x in a.calls if x.api_key_id == a.key.pk)
    assert c.get(reverse("call-detail", args=[colleague.request_id])).status_code == 404
    assert c.get(LIST, {"key": a.key.pk}).status_code == 400


def test_detail_returns_one_call(client, a):
    target = a.calls[3]
    body = (
        login(client, a, Role.FINANCE).get(reverse("call-detail", args=[target.request_id])).json()
    )
    assert body["request_id"] == target.request_id
    assert body["status_code"] == 500 and body["error_type"] == "upstream_error"
    assert body["upstream_us"] == target.upstream_us and body["priced"] is True


def test_personal_access_tokens_work_and_pin_the_organization(client, a, b):
    _, raw = personal_access_token_issue(actor=Actor(b.members[Role.VIEWER]), name="ci")
    headers = {"Authorization": f"Bearer {raw}"}
    body = client.get(LIST, headers=headers).json()
    assert set(ids(body)) == {x.request_id for x in b.calls}
    detail = client.get(reverse("call-detail", args=[a.calls[0].request_id]), headers=headers)
    assert detail.status_code == 404
    assert detail.json() == {
        "error": {"code": "not_found", "message": "No such call in this organization."}
    }


def test_anonymous_requests_are_refused(client, a):
    assert client.get(LIST).status_code in (401, 403)
    assert client.get(reverse("call-detail", args=[a.calls[0].request_id])).status_code in (
        401,
        403,
    )


# --- tenant isolation --------------------------------------------------------


def test_another_organizations_calls_are_not_listed(client, a, b):
    c = login(client, b)
    assert set(ids(c.get(LIST).json())) == {x.request_id for x in b.calls}
    assert ids(c.get(LIST, {"request_id": a.calls[0].request_id}).json()) == []


@pytest.mark.parametrize("method", ["get", "post", "patch", "delete"])
def test_another_organizations_call_detail_is_404(client, a, b, method):
    url = reverse("call-detail", args=[a.calls[0].request_id])
    response = getattr(login(client, b), method)(url, {}, content_type="application/json")
    assert response.status_code in (404, 405)
    assert a.calls[0].request_id.encode() not in response.content


def test_csv_through_the_api_is_scoped_too(client, a, b):
    c = login(client, b)
    for response in (c.get("/api/v1/calls/export.csv"), c.get(LIST, {"format": "csv"})):
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/csv")
        text = b"".join(response.streaming_content).decode("utf-8-sig")
        assert all(x.request_id in text for x in b.calls)
        assert all(x.request_id not in text for x in a.calls)


def test_csv_export_errors_are_json(client, a):
    response = login(client, a).get("/api/v1/calls/export.csv", {"status": "bad"})
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["status"]
    response = login(client, a).get(LIST, {"format": "csv", "limit": "0"})
    assert response.status_code == 400
    assert "limit" in response.json()["error"]["fields"]
