"""Call-log reads: each filter narrows, keyset pagination walks every row
once, role scoping and tenant isolation, chunked iteration."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.errors import NotFound
from accounts.models import Role
from tests.usage.log_fixtures import T0, call, save
from usage import logs
from usage.logs import CallFilters, Cursor

pytestmark = pytest.mark.django_db


def ids(qs) -> set[str]:
    return set(qs.values_list("request_id", flat=True))


FILTER_CASES = {
    "key": (lambda t: {"api_key_id": t.key.pk}, lambda c, t: c.api_key_id == t.key.pk),
    "sub_account": (
        lambda t: {"sub_account_id": t.sub.pk},
        lambda c, t: c.sub_account_id == t.sub.pk,
    ),
    "model": (lambda t: {"model": "llama-70b"}, lambda c, t: c.model == "llama-70b"),
    "node": (lambda t: {"node_id": t.node.pk}, lambda c, t: c.node_id == t.node.pk),
    "ok": (lambda t: {"status": "ok"}, lambda c, t: c.status_code < 400),
    "errors": (lambda t: {"status": "errors"}, lambda c, t: c.status_code >= 400),
    "4xx": (lambda t: {"status": "4xx"}, lambda c, t: 400 <= c.status_code < 500),
    "429": (lambda t: {"status": "429"}, lambda c, t: c.status_code == 429),
    "5xx": (lambda t: {"status": "5xx"}, lambda c, t: 500 <= c.status_code < 600),
    "exact code": (lambda t: {"status": "404"}, lambda c, t: c.status_code == 404),
    "min latency": (lambda t: {"min_latency_ms": 1500}, lambda c, t: c.latency_us >= 1_500_000),
    "start": (
        lambda t: {"start": T0 + timedelta(minutes=5)},
        lambda c, t: c.started_at >= T0 + timedelta(minutes=5),
    ),
    "end": (
        lambda t: {"end": T0 + timedelta(minutes=2)},
        lambda c, t: c.started_at < T0 + timedelta(minutes=2),
    ),
    "request id": (
        lambda t: {"request_id": t.calls[3].request_id},
        lambda c, t: c.request_id == t.calls[3].request_id,
    ),
    "combined": (
        lambda t: {"model": "gpt-test", "status": "errors", "api_key_id": t.dev_key.pk},
        lambda c, t: (
            c.model == "gpt-test" and c.status_code >= 400 and c.api_key_id == t.dev_key.pk
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(FILTER_CASES))
def test_each_filter_narrows_to_exactly_the_matching_calls(a, b, case):
    make, keep = FILTER_CASES[case]
    qs = logs.call_list(actor=a.actor(), filters=CallFilters(**make(a)))
    expected = {c.request_id for c in a.calls if keep(c, a)}
    assert expected  # the case selects something...
    assert expected != {c.request_id for c in a.calls}  # ...and leaves something out
    assert ids(qs) == expected


def test_no_filter_lists_the_org_newest_first(a, b):
    got = list(logs.call_list(actor=a.actor(), filters=CallFilters()))
    assert [c.request_id for c in got] == [c.request_id for c in reversed(a.calls)]


def _walk(actor, filters, limit):
    seen, cursor, pages = [], None, 0
    while True:
        page = logs.call_page(actor=actor, filters=filters, limit=limit, before=cursor)
        seen += [c.request_id for c in page.calls]
        pages += 1
        if page.older is None:
            return seen, pages
        cursor = Cursor.decode(page.older)


def test_pagination_walks_every_row_once_across_equal_timestamps(a):
    # Given 23 calls, most of them sharing just three start instants
    same = [T0 + timedelta(hours=1)] * 9 + [T0 + timedelta(hours=2)] * 7 + [T0] * 7
    save([call(a.org, a.key, started_at=when) for when in same])
    everything = sorted(
        logs.call_scope(actor=a.actor()).values_list("started_at", "request_id"), reverse=True
    )
    # When walking older with pages of 4
    seen, pages = _walk(a.actor(), CallFilters(), limit=4)
    # Then each call appears once, in (started_at, request_id) order
    assert seen == [rid for _, rid in everything]
    assert len(seen) == len(set(seen)) == 23 + len(a.calls)
    assert pages == -(-len(seen) // 4)


def test_pagination_walks_back_to_newer_pages(a):
    save([call(a.org, a.org_key, started_at=T0 + timedelta(hours=3)) for _ in range(6)])
    first = logs.call_page(actor=a.actor(), filters=CallFilters(), limit=5)
    second = logs.call_page(
        actor=a.actor(), filters=CallFilters(), limit=5, before=Cursor.decode(first.older)
    )
    assert first.newer is None and second.newer is not None
    back = logs.call_page(
        actor=a.actor(), filters=CallFilters(), limit=5, after=Cursor.decode(second.newer)
    )
    assert [c.request_id for c in back.calls] == [c.request_id for c in first.calls]
    assert back.newer is None  # nothing newer than the first page
    assert back.older is not None


def test_filtered_pagination_keeps_the_filter(a):
    save(
        [
            call(a.org, a.key, status_code=500, started_at=T0 - timedelta(seconds=i))
            for i in range(7)
        ]
    )
    seen, _ = _walk(a.actor(), CallFilters(status="5xx"), limit=3)
    expected = logs.call_list(actor=a.actor(), filters=CallFilters(status="5xx"))
    assert seen == [c.request_id for c in expected]
    assert len(seen) == 7 + 2


def test_an_absurd_limit_is_clamped_to_the_maximum(a):
    save([call(a.org, a.key, started_at=T0 - timedelta(seconds=i)) for i in range(logs.MAX_LIMIT)])
    page = logs.call_page(actor=a.actor(), filters=CallFilters(), limit=10**9)
    assert len(page.calls) == logs.MAX_LIMIT
    assert page.older is not None


@pytest.mark.parametrize("token", ["", "not-base64!!", "bm9wZQ", "WyJ4IiwgMV0"])
def test_a_malformed_cursor_is_a_value_error(token):
    with pytest.raises(ValueError, match="malformed"):
        Cursor.decode(token)


def test_cursor_round_trips(a):
    c = a.calls[2]
    assert Cursor.decode(Cursor.of(c).encode()) == Cursor(c.started_at, c.request_id)


def test_developer_sees_only_their_own_keys_calls(a):
    dev = a.actor(Role.DEVELOPER)
    got = ids(logs.call_list(actor=dev, filters=CallFilters()))
    assert got == {c.request_id for c in a.calls if c.api_key_id == a.dev_key.pk}
    colleague_call = next(c for c in a.calls if c.api_key_id == a.key.pk)
    with pytest.raises(NotFound):
        logs.call_get(actor=dev, request_id=colleague_call.request_id)


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN, Role.FINANCE, Role.VIEWER])
def test_other_roles_see_the_whole_organization(a, role):
    got = ids(logs.call_list(actor=a.actor(role), filters=CallFilters()))
    assert got == {c.request_id for c in a.calls}


def test_another_organizations_call_is_not_found(a, b):
    with pytest.raises(NotFound):
        logs.call_get(actor=a.actor(), request_id=b.calls[0].request_id)
    # Filtering by another org's key or request id finds nothing either.
    assert not logs.call_list(actor=a.actor(), filters=CallFilters(api_key_id=b.key.pk)).exists()
    assert not logs.call_list(
        actor=a.actor(), filters=CallFilters(request_id=b.calls[0].request_id)
    ).exists()


def test_page_resolves_names_with_one_query_per_kind(a, django_assert_num_queries):
    with django_assert_num_queries(4):  # calls, keys, sub-accounts, nodes
        page = logs.call_page(actor=a.actor(), filters=CallFilters(), limit=50)
    by_id = {c.request_id: c for c in page.calls}
    first = by_id[a.calls[0].request_id]
    assert (first.key_prefix, first.key_name) == (a.key.prefix, a.key.name)
    assert first.sub_account_name == a.sub.name
    assert first.node_name == "gpu-a"
    assert by_id[a.calls[1].request_id].node_name == ""


def test_tail_returns_only_calls_newer_than_the_newest_shown(a):
    page = logs.call_page(actor=a.actor(), filters=CallFilters(), limit=3)
    newest = Cursor.decode(page.newest)
    assert logs.call_tail(actor=a.actor(), filters=CallFilters(), after=newest).calls == []
    fresh = save(
        [call(a.org, a.key, started_at=T0 + timedelta(hours=5, seconds=s)) for s in range(3)]
    )
    tail = logs.call_tail(actor=a.actor(), filters=CallFilters(), after=newest)
    assert [c.request_id for c in tail.calls] == [c.request_id for c in reversed(fresh)]
    # The cursor moves on to the newest of them.
    assert Cursor.decode(tail.newest).request_id == fresh[-1].request_id


def test_iter_calls_reads_in_keyset_chunks(a):
    save([call(a.org, a.key, started_at=T0) for _ in range(5)])  # ties across chunk edges
    expected = [c.request_id for c in logs.call_list(actor=a.actor(), filters=CallFilters())]
    assert len(expected) == 13
    with CaptureQueriesContext(connection) as queries:
        got = [
            c.request_id
            for c in logs.iter_calls(actor=a.actor(), filters=CallFilters(), chunk_size=3)
        ]
    assert got == expected
    call_queries = [q["sql"] for q in queries if '"usage_call"' in q["sql"]]
    # 4 full chunks and a last one of one row; each query asks for 3 rows at most.
    assert len(call_queries) == 5
    assert all("LIMIT 3" in sql for sql in call_queries)


def test_names_come_only_from_the_calls_own_organization(a, b):
    from inference_node.models import Node

    shared = Node.objects.create(name="shared-gpu", base_url="http://10.0.0.9:8000")
    # A record that (wrongly) names another org's key, sub-account and node.
    stray = save([call(a.org, b.key, started_at=T0 + timedelta(hours=1), node_id=b.node.pk,
                       sub_account_id=b.sub.pk)])[0]  # fmt: skip
    mine = save([call(a.org, a.key, started_at=T0 + timedelta(hours=2), node_id=shared.pk)])[0]
    page = logs.call_page(actor=a.actor(), filters=CallFilters(), limit=2)
    by_id = {c.request_id: c for c in page.calls}
    got = by_id[stray.request_id]
    assert (got.key_prefix, got.key_name, got.sub_account_name, got.node_name) == ("", "", "", "")
    assert by_id[mine.request_id].node_name == "shared-gpu"
