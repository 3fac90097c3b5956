"""Call logs by tag and end user: the console page, the REST API and the
CSV export filter on them, show them, and never reach another org's."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.conf import settings

from accounts.models import Role
from tests.usage.log_fixtures import T0, call, login, save
from usage import logs
from usage.logs import CallFilters

pytestmark = pytest.mark.django_db
LIST = "/api/v1/calls/"
PAGE = "/usage/calls/"
EXPORT = "/usage/calls/export.csv"


def tagged(t):
    """Four calls of tenant ``t`` with tags and end users (and its untagged mix)."""
    specs = [
        ({"team": "search", "env": "prod"}, "alice"),
        ({"team": "search", "env": "dev"}, "bob"),
        ({"team": "ads"}, "alice"),
        ({"a__b": "x:y"}, ""),
    ]
    out = [
        call(t.org, t.org_key, started_at=T0 + timedelta(hours=1, minutes=i), tags=tg, end_user=u)
        for i, (tg, u) in enumerate(specs)
    ]
    return save(out)


@pytest.fixture
def ta(a):
    a.tagged = tagged(a)
    return a


@pytest.fixture
def tb(b):
    b.tagged = tagged(b)
    return b


def ids(qs) -> set[str]:
    return set(qs.values_list("request_id", flat=True))


@pytest.mark.parametrize(
    ("filters", "wanted"),
    [
        ({"tags": (("team", "search"),)}, [0, 1]),
        ({"tags": (("team", "search"), ("env", "prod"))}, [0]),
        ({"tags": (("team", "nobody"),)}, []),
        ({"tags": (("a__b", "x:y"),)}, [3]),
        ({"end_user": "alice"}, [0, 2]),
        ({"end_user": "alice", "tags": (("team", "ads"),)}, [2]),
    ],
)
def test_tag_and_end_user_filters_narrow_to_the_orgs_matching_calls(ta, tb, filters, wanted):
    got = ids(logs.call_list(actor=ta.actor(), filters=CallFilters(**filters)))
    assert got == {ta.tagged[i].request_id for i in wanted}


def test_the_page_filters_by_repeated_tags_and_keeps_them_in_its_links(client, ta, tb):
    c = login(client, ta)
    response = c.get(PAGE, {"tag": ["team:search", "env:prod"]})
    assert response.status_code == 200
    body = response.content.decode()
    assert ta.tagged[0].request_id in body
    assert ta.tagged[1].request_id not in body and tb.tagged[0].request_id not in body
    # Both tags are in the boxes and in the export link, and one more box is empty.
    assert body.count('name="tag"') == 3
    assert "tag=team%3Asearch&amp;tag=env%3Aprod" in body


def test_a_malformed_tag_filter_is_a_form_error(client, ta):
    response = login(client, ta).get(PAGE, {"tag": "no-colon"})
    assert response.status_code == 200
    assert "Give a tag as key:value" in response.content.decode()
    for bad in ("bad key:1", "team:a\x00b", "team:"):
        api = login(client, ta).get(LIST, {"tag": bad})
        assert api.status_code == 400
        assert "tag" in json.dumps(api.json())


def test_the_api_filters_by_tag_and_end_user_and_returns_them(client, ta, tb):
    c = login(client, ta)
    body = c.get(LIST, {"tag": ["team:search"], "end_user": "bob"}).json()
    assert [r["request_id"] for r in body["results"]] == [ta.tagged[1].request_id]
    row = body["results"][0]
    assert row["end_user"] == "bob" and row["tags"] == {"team": "search", "env": "dev"}
    untagged = c.get(LIST, {"request_id": ta.calls[0].request_id}).json()["results"][0]
    assert (untagged["end_user"], untagged["tags"]) == ("", {})


def test_the_api_takes_repeated_tags_but_no_other_repeated_parameter(client, ta):
    c = login(client, ta)
    body = c.get(f"{LIST}?tag=team:search&tag=env:prod").json()
    assert [r["request_id"] for r in body["results"]] == [ta.tagged[0].request_id]
    again = c.get(f"{LIST}?end_user=alice&end_user=bob")
    assert again.status_code == 400
    assert again.json()["error"]["fields"] == {"end_user": ["Give this parameter once."]}


def test_paging_links_keep_every_tag(client, ta):
    save(
        [
            call(ta.org, ta.key, started_at=T0 + timedelta(hours=2, minutes=i), tags={"team": "x"})
            for i in range(5)
        ]
    )
    body = login(client, ta).get(LIST, {"tag": "team:x", "limit": 2}).json()
    assert "tag=team%3Ax" in body["next"]
    seen = []
    url = f"{LIST}?tag=team:x&limit=2"
    while url:
        page = client.get(url).json()
        seen += [r["request_id"] for r in page["results"]]
        url = page["next"]
    assert len(seen) == len(set(seen)) == 5


def test_another_orgs_tags_are_unreachable(client, ta, tb):
    c = login(client, ta)
    body = c.get(LIST, {"end_user": "alice"}).json()
    assert {r["request_id"] for r in body["results"]} == {
        ta.tagged[0].request_id,
        ta.tagged[2].request_id,
    }
    assert c.get(f"{PAGE}{tb.tagged[0].request_id}/").status_code == 404


def test_a_developer_filters_only_their_own_keys_calls(client, ta):
    save([call(ta.org, ta.dev_key, started_at=T0 + timedelta(hours=3), tags={"team": "search"})])
    body = login(client, ta, Role.DEVELOPER).get(LIST, {"tag": "team:search"}).json()
    assert len(body["results"]) == 1
    assert body["results"][0]["key"]["id"] == ta.dev_key.pk


def test_the_detail_shows_tags_and_end_user_linked_to_their_calls(client, ta):
    response = login(client, ta).get(f"{PAGE}{ta.tagged[0].request_id}/")
    body = response.content.decode()
    assert 'href="/usage/calls/?end_user=alice"' in body
    assert 'href="/usage/calls/?tag=env%3Aprod"' in body
    assert 'href="/usage/calls/?tag=team%3Asearch"' in body


def test_csv_exports_carry_end_user_and_tags_columns(client, ta):
    c = login(client, ta)
    for url in (EXPORT, "/api/v1/calls/export.csv"):
        response = c.get(url, {"tag": "team:search"})
        raw = b"".join(response.streaming_content).decode("utf-8-sig")
        rows = list(csv.DictReader(io.StringIO(raw)))
        assert {r["request_id"] for r in rows} == {x.request_id for x in ta.tagged[:2]}
        first = next(r for r in rows if r["request_id"] == ta.tagged[0].request_id)
        assert first["end_user"] == "alice"
        assert json.loads(first["tags"]) == {"team": "search", "env": "prod"}
    everything = b"".join(c.get(EXPORT).streaming_content).decode("utf-8-sig")
    untagged = next(
        r
        for r in csv.DictReader(io.StringIO(everything))
        if r["request_id"] == ta.calls[0].request_id
    )
    assert (untagged["end_user"], untagged["tags"]) == ("", "{}")


def test_the_chinese_csv_header_names_the_new_columns(client, ta):
    user = ta.members[Role.OWNER].user
    user.language = "zh-hans"
    user.save(update_fields=["language"])
    client.force_login(user)
    client.cookies.pop(settings.LANGUAGE_COOKIE_NAME, None)
    raw = b"".join(client.get(EXPORT).streaming_content).decode("utf-8-sig")
    header = next(csv.reader(io.StringIO(raw)))
    assert header[-2:] == ["终端用户", "标签"]
