"""Call logs people can work in: model, key, sub-account and node chosen from
what the organization has, sorting by time (the one order an index serves),
a call detail page the side panel links to, and costs that line up."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.usage.log_fixtures import T0, call, login, save
from usage.models import Grain, Rollup

pytestmark = pytest.mark.django_db

URL = "/usage/calls/"


def shown_ids(html: str) -> list[str]:
    return re.findall(r'<tr id="call-([^"]+)"', html)


def options(html: str, name: str) -> list[str]:
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert select, f"no <select> for {name}"
    return re.findall(r"<option[^>]*>([^<]*)</option>", select.group(1))


def test_model_key_sub_account_and_node_are_choices_from_what_the_org_has(client, catalog, a, b):
    # Given a model the organization has called (its rollups say so) and one
    # only another organization has...
    Rollup.objects.create(
        organization_id=a.org.pk, grain=Grain.MODEL, model="acme-only-model", hour=T0
    )
    Rollup.objects.create(
        organization_id=b.org.pk, grain=Grain.MODEL, model="globex-only-model", hour=T0
    )
    html = login(client, a).get(URL).content.decode()

    models = options(html, "model")
    assert models[0] == "All models"
    assert "acme-only-model" in models and "sim-chat-small" in models  # called; catalogue
    assert "globex-only-model" not in models
    keys = options(html, "key")
    assert any(a.key.name in k for k in keys) and not any(b.key.name in k for k in keys)
    assert a.sub.name in options(html, "sub_account")
    assert "gpu-a" in options(html, "node") and "gpu-b" not in options(html, "node")


def test_choosing_a_model_lists_only_its_calls_and_keeps_it_selected(client, a):
    html = login(client, a).get(URL, {"model": "llama-70b"}).content.decode()
    ids = shown_ids(html)
    assert ids and set(ids) == {c.request_id for c in a.calls if c.model == "llama-70b"}
    # llama-70b is neither in the catalogue nor rolled up: still offered, selected.
    assert re.search(r'<option value="llama-70b" selected>llama-70b</option>', html)


def test_the_time_column_sorts_oldest_first_and_back(client, a):
    c = login(client, a)
    newest_first = c.get(URL).content.decode()
    assert 'aria-sort="descending"' in newest_first
    link = re.search(r'<a id="sort-time" href="\?([^"]*)"', newest_first).group(1)
    assert "sort=time" in link

    oldest_first = c.get(URL, {"sort": "time"}).content.decode()
    by_time = [x.request_id for x in sorted(a.calls, key=lambda x: x.started_at)]
    assert shown_ids(oldest_first) == by_time
    assert 'aria-sort="ascending"' in oldest_first
    assert shown_ids(newest_first) == by_time[::-1]


def test_oldest_first_pages_walk_forward_and_back(client, a):
    c = login(client, a)
    by_time = [x.request_id for x in sorted(a.calls, key=lambda x: x.started_at)]
    first = c.get(URL, {"sort": "time", "limit": 3}).content.decode()
    assert shown_ids(first) == by_time[:3]
    assert 'id="older"' not in first
    later = re.search(r'<a id="newer" href="\?([^"]*)">Newer →</a>', first).group(1)
    second = c.get(URL + "?" + later.replace("&amp;", "&")).content.decode()
    assert shown_ids(second) == by_time[3:6]
    back = re.search(r'<a id="older" href="\?([^"]*)">← Older</a>', second).group(1)
    assert shown_ids(c.get(URL + "?" + back.replace("&amp;", "&")).content.decode()) == by_time[:3]


def test_the_filters_keep_the_sort(client, a):
    html = login(client, a).get(URL, {"sort": "time"}).content.decode()
    assert '<input type="hidden" name="sort" value="time">' in html


def test_costs_on_a_page_have_the_same_decimals_and_are_right_aligned(client, a):
    save([call(a.org, a.key, started_at=T0 + timedelta(hours=1), cost=1_500_000)])
    html = login(client, a).get(URL).content.decode()
    costs = re.findall(r'<td class="num">([0-9.,]+) USD</td>', html)
    assert "1.500000" in costs  # not "1.50": the page's other costs need six decimals
    assert len(costs) == len(a.calls) + 1
    assert {len(c.split(".")[1]) for c in costs} == {6}


def test_a_page_of_round_costs_shows_cents(client, a):
    (round_call,) = save([call(a.org, a.key, started_at=T0 + timedelta(hours=1), cost=1_500_000)])
    html = login(client, a).get(URL, {"request_id": round_call.request_id}).content.decode()
    assert re.findall(r'<td class="num">([0-9.,]+) USD</td>', html) == ["1.50"]


def test_the_side_panel_links_to_the_calls_own_page(client, a):
    target = a.calls[2]
    c = login(client, a)
    url = f"/usage/calls/{target.request_id}/"
    panel = c.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in panel
    assert f'<a id="call-page-link" href="{url}">Open as a page</a>' in panel
    assert "Close (Esc)" in panel
    page = c.get(url)
    body = page.content.decode()
    assert page.status_code == 200 and "<html" in body and target.request_id in body
    assert "Open as a page" not in body  # it is the page


def test_the_tail_formats_costs_with_the_pages_decimals(client, a):
    c = login(client, a)
    newest = min(a.calls, key=lambda x: x.started_at)
    from usage.logs import Cursor

    rows = c.get(
        "/usage/calls/tail/", {"after": Cursor.of(newest).encode(), "places": "6"}
    ).content.decode()
    costs = re.findall(r'<td class="num">([0-9.,]+) USD</td>', rows)
    assert costs and {len(x.split(".")[1]) for x in costs} == {6}


def test_the_api_walks_oldest_first_too(client, a):
    from accounts.facade import Actor
    from accounts.models import Role
    from accounts.services import personal_access_token_issue

    _, raw = personal_access_token_issue(actor=Actor(a.members[Role.OWNER]), name="ci")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    by_time = [x.request_id for x in sorted(a.calls, key=lambda x: x.started_at)]
    first = client.get("/api/v1/calls/", {"sort": "time", "limit": 5}, **auth).json()
    assert [r["request_id"] for r in first["results"]] == by_time[:5]
    assert first["previous"] is None
    second = client.get(first["next"], **auth).json()
    assert [r["request_id"] for r in second["results"]] == by_time[5:]
