"""Console pages of the usage app: the call logs (filters, errors on the
form, paging links, htmx detail, live tail, role matrix, tenant isolation)
and the models & prices page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from accounts.models import Role
from tests.factories import UserFactory
from tests.usage.log_fixtures import T0, call, login, mixed_calls, save, tenant
from usage.logs import Cursor

pytestmark = pytest.mark.django_db

# Read by tests/test_route_isolation.py: the object routes this module (and
# test_api.py, for the API ones) prove unreachable from another organization.
ISOLATED_ROUTES = {"usage:call_detail", "call-detail"}


def shown_ids(response) -> list[str]:
    return re.findall(r'<tr id="call-([^"]+)"', response.content.decode())


URL = "/usage/calls/"


def test_logs_page_shows_every_column(client, a):
    response = login(client, a).get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    row = html[html.index(f'id="call-{a.calls[0].request_id}"') :]
    row = row[: row.index("</tr>")]
    assert a.key.prefix in row and a.key.name in row
    assert a.sub.name in row and "gpu-a" in row and "gpt-test" in row
    assert ">200<" in row
    assert ">1200<" in row and ">300<" in row and ">50<" in row and ">400<" in row
    # 1,000 micro-units, with the six decimals the page's 1,017 needs (aligned costs)
    assert "0.001000 USD" in row
    assert "95.5" in row  # TTFT ms
    assert "300.0" in row  # latency ms
    assert "198.51.100.7" in row
    assert shown_ids(response) == [c.request_id for c in reversed(a.calls)]


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"status": "errors"}, lambda c, t: c.status_code >= 400),
        ({"status": "429"}, lambda c, t: c.status_code == 429),
        ({"model": "llama-70b"}, lambda c, t: c.model == "llama-70b"),
        ({"min_latency_ms": "1000"}, lambda c, t: c.latency_us >= 1_000_000),
        (
            {"from": "2026-11-20T12:03:00Z", "to": "2026-11-20T12:06:00+00:00"},
            lambda c, t: T0 + timedelta(minutes=3) <= c.started_at < T0 + timedelta(minutes=6),
        ),
    ],
)
def test_filters_narrow_the_page(client, a, params, keep):
    response = login(client, a).get(URL, params)
    assert response.status_code == 200
    assert set(shown_ids(response)) == {c.request_id for c in a.calls if keep(c, a)}


def test_key_sub_account_and_node_filters_take_ids(client, a):
    c = login(client, a)
    by_key = shown_ids(c.get(URL, {"key": a.org_key.pk}))
    assert set(by_key) == {x.request_id for x in a.calls if x.api_key_id == a.org_key.pk}
    by_sub = shown_ids(c.get(URL, {"sub_account": a.sub.pk}))
    assert set(by_sub) == {x.request_id for x in a.calls if x.sub_account_id == a.sub.pk}
    by_node = shown_ids(c.get(URL, {"node": a.node.pk}))
    assert set(by_node) == {x.request_id for x in a.calls if x.node_id == a.node.pk}


def test_naive_times_are_the_organizations_local_time(client):
    t = tenant("Berlin", "berlin", timezone="Europe/Berlin")
    mixed_calls(t)
    # 13:02 in Berlin (UTC+1 in November) is 12:02 UTC.
    response = login(client, t).get(URL, {"from": "2026-11-20 13:02"})
    assert set(shown_ids(response)) == {
        c.request_id for c in t.calls if c.started_at >= T0 + timedelta(minutes=2)
    }


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"status": "teapot"}, "status", "Use ok, errors"),
        ({"status": "700"}, "status", "Use ok, errors"),
        ({"min_latency_ms": "-5"}, "min_latency_ms", "greater than or equal to 0"),
        ({"min_latency_ms": "fast"}, "min_latency_ms", "Enter a whole number"),
        ({"from": "yesterday"}, "from", "Enter a valid date/time"),
        ({"from": "2026-11-21T00:00Z", "to": "2026-11-20T00:00Z"}, "to", "after its start"),
        ({"limit": "100000"}, "limit", "less than or equal to 500"),
        ({"limit": "0"}, "limit", "greater than or equal to 1"),
        ({"before": "garbage"}, "before", "malformed"),
        ({"request_id": "x' OR 1=1"}, "request_id", "letters, digits"),
        ({"range": "1y"}, "range", "Select a valid choice"),
        ({"key": "abc"}, "key", "Select a valid choice"),
    ],
)
def test_invalid_filters_are_shown_on_the_page(client, a, params, field, message):
    response = login(client, a).get(URL, params)
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index(f'id="field-{field}"')
    assert message in html[start : start + 1500]
    assert shown_ids(response) == []


def test_another_organizations_ids_are_invalid_choices(client, a, b):
    c = login(client, a)
    for field, value in (("key", b.key.pk), ("sub_account", b.sub.pk), ("node", b.node.pk)):
        response = c.get(URL, {field: value})
        html = response.content.decode()
        assert response.status_code == 200
        assert "Select a valid choice" in html[html.index(f'id="field-{field}"') :][:1500]
        assert shown_ids(response) == []


def test_developer_sees_only_their_own_keys(client, a):
    response = login(client, a, Role.DEVELOPER).get(URL)
    assert response.status_code == 200
    assert set(shown_ids(response)) == {
        c.request_id for c in a.calls if c.api_key_id == a.dev_key.pk
    }
    # A colleague's key is not even a valid choice, and its call is not found.
    assert (
        "Select a valid choice"
        in login(client, a, Role.DEVELOPER).get(URL, {"key": a.key.pk}).content.decode()
    )
    other = next(c for c in a.calls if c.api_key_id == a.key.pk)
    assert client.get(reverse("usage:call_detail", args=[other.request_id])).status_code == 404


@pytest.mark.parametrize("role", [r.value for r in Role])
def test_every_role_may_open_the_logs_and_models_pages(client, a, role):
    c = login(client, a, role)
    assert c.get(URL).status_code == 200
    assert c.get("/usage/models/").status_code == 200
    sidebar = c.get("/usage/models/").content.decode()
    assert 'href="/usage/calls/"' in sidebar and 'href="/usage/models/"' in sidebar


def test_anonymous_users_are_sent_to_log_in(client):
    for url in (URL, "/usage/models/", "/usage/calls/export.csv", "/usage/calls/x/"):
        response = client.get(url)
        assert response.status_code == 302
        assert "/login/" in response.url


def test_a_user_without_an_organization_gets_no_data(client, a):
    client.force_login(UserFactory())
    response = client.get(URL)
    assert response.status_code == 403
    assert a.calls[0].request_id not in response.content.decode()


def test_paging_links_walk_older_and_newer(client, a):
    save([call(a.org, a.key, started_at=T0 + timedelta(hours=1)) for _ in range(5)])
    c = login(client, a)
    first = c.get(URL, {"limit": 5, "status": "ok"})
    html = first.content.decode()
    assert 'id="newer"' not in html
    older = re.search(r'id="older" href="\?([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "status=ok" in older and "limit=5" in older
    second = c.get(f"{URL}?{older}")
    assert set(shown_ids(second)).isdisjoint(shown_ids(first))
    assert len(shown_ids(second)) == 4  # 9 successful calls in all
    assert 'id="older"' not in second.content.decode()
    newer = re.search(r'id="newer" href="\?([^"]+)"', second.content.decode()).group(1)
    back = c.get(f"{URL}?{newer.replace('&amp;', '&')}")
    assert shown_ids(back) == shown_ids(first)


def test_export_link_carries_the_current_filters(client, a):
    html = login(client, a).get(URL, {"model": "gpt-test", "status": "5xx"}).content.decode()
    link = re.search(r'id="export-csv" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert link.startswith("/usage/calls/export.csv?")
    assert "model=gpt-test" in link and "status=5xx" in link


def test_htmx_detail_is_a_partial_with_every_field(client, a):
    target = a.calls[0]
    url = reverse("usage:call_detail", args=[target.request_id])
    c = login(client, a)
    partial = c.get(url, headers={"HX-Request": "true"})
    assert partial.status_code == 200
    html = partial.content.decode()
    assert "<html" not in html
    for text in ("Upstream time", "280.0 ms", "Gateway overhead", "12.0 ms", "Queue time",
                 "8.0 ms", "openai", "/v1/chat/completions", "Reasoning tokens", "40",
                 "Miss", target.request_id):  # fmt: skip
        assert text in html
    full = c.get(url)
    assert "<html" in full.content.decode() and target.request_id in full.content.decode()


def test_unpriced_calls_say_they_need_a_price(client, a):
    save([call(a.org, a.key, started_at=T0 + timedelta(hours=2), priced=False, cost=0)])
    assert "needs a price" in login(client, a).get(URL).content.decode()


def test_live_tail_polls_every_two_seconds_and_prepends_newer_calls(client, a):
    c = login(client, a)
    html = c.get(URL, {"live": "1", "model": "gpt-test"}).content.decode()
    assert 'hx-trigger="every 2s"' in html and 'hx-swap="afterbegin"' in html
    # The filters, and the page's cost decimals for the rows it adds.
    assert re.search(r'hx-get="/usage/calls/tail/\?model=gpt-test&amp;places=\d"', html)
    newest = re.search(r'data-cursor="([^"]+)"', html).group(1)
    assert (
        c.get("/usage/calls/tail/", {"model": "gpt-test", "after": newest}).content.strip() == b""
    )
    fresh = save([
        call(a.org, a.key, started_at=T0 + timedelta(hours=1), model="gpt-test"),
        call(a.org, a.key, started_at=T0 + timedelta(hours=1), model="llama-70b"),
    ])  # fmt: skip
    tail = c.get("/usage/calls/tail/", {"model": "gpt-test", "after": newest})
    assert tail.status_code == 200
    assert shown_ids(tail) == [fresh[0].request_id]


def test_live_tail_with_a_bad_cursor_is_a_400_not_a_500(client, a):
    response = login(client, a).get("/usage/calls/tail/", {"after": "%%%"})
    assert response.status_code == 400


# --- tenant isolation --------------------------------------------------------


def test_another_organizations_calls_never_appear(client, a, b):
    c = login(client, b)
    listed = shown_ids(c.get(URL))
    assert set(listed) == {x.request_id for x in b.calls}
    for params in ({"request_id": a.calls[0].request_id}, {"model": "gpt-test"}):
        assert set(shown_ids(c.get(URL, params))).isdisjoint({x.request_id for x in a.calls})
    export = b"".join(c.get("/usage/calls/export.csv").streaming_content).decode()
    assert all(x.request_id not in export for x in a.calls)
    assert all(x.request_id in export for x in b.calls)


@pytest.mark.parametrize("htmx", [False, True])
def test_another_organizations_call_detail_is_404(client, a, b, htmx):
    url = reverse("usage:call_detail", args=[a.calls[0].request_id])
    headers = {"HX-Request": "true"} if htmx else {}
    response = login(client, b).get(url, headers=headers)
    assert response.status_code == 404
    assert a.calls[0].request_id.encode() not in response.content
    assert b"Acme" not in response.content


def test_the_tail_does_not_leak_across_organizations(client, a, b):
    newest = Cursor.of(b.calls[-1]).encode()
    save([call(a.org, a.key, started_at=T0 + timedelta(days=1))])
    response = login(client, b).get("/usage/calls/tail/", {"after": newest})
    assert shown_ids(response) == []


# --- models & prices ---------------------------------------------------------


@pytest.fixture
def price_book(a, b):
    from decimal import Decimal

    from django.utils import timezone

    from usage.models import CatalogModel, Grain, Price, Rollup

    now = timezone.now()
    a.org.discount_rate = Decimal("0.8")
    a.org.save()

    def model(name, **kw):
        return CatalogModel.objects.create(
            name=name, display_name=name.upper(), family="fam", provider="prov", **kw
        )

    def price(m, inp, cr, cw, out, *, org=None, currency="USD", days_ago=30):
        return Price.objects.create(
            model=m, organization=org, currency=currency, input_per_mtok=inp,
            cache_read_per_mtok=cr, cache_write_per_mtok=cw, output_per_mtok=out,
            effective_from=now - timedelta(days=days_ago),
        )  # fmt: skip

    listed = model("zz-listed", context_window=128_000, fallbacks=["zz-negotiated"])
    price(listed, 9_000_000, 9_000_000, 9_000_000, 9_000_000, days_ago=90)  # superseded
    price(listed, 2_500_000, 250_000, 3_125_000, 10_000_000)
    price(listed, 1, 1, 1, 1, days_ago=-5)  # not yet in effect
    negotiated = model("zz-negotiated")
    price(negotiated, 3_000_000, 300_000, 3_750_000, 15_000_000)
    price(negotiated, 1_000_000, 100_000, 1_250_000, 5_000_000, org=a.org)
    price(negotiated, 7, 7, 7, 7, org=b.org)  # another org's deal
    unpriced = model("zz-eur-only")
    price(unpriced, 1_000_000, 1_000_000, 1_000_000, 1_000_000, currency="EUR")
    model("zz-disabled", enabled=False)
    called = model("zz-called")
    price(called, 1_000_000, 1_000_000, 1_000_000, 1_000_000, days_ago=1)
    hour = now.replace(minute=0, second=0, microsecond=0)
    # Unpriced calls 10 days ago to zz-called, 40 days ago to zz-listed (too old),
    # answered with tokens (a model that does not exist answers none: see below).
    for name, ago in (("zz-called", 10), ("zz-listed", 40), ("not-in-catalogue", 3)):
        Rollup.objects.create(
            organization_id=a.org.pk, grain=Grain.MODEL, model=name, currency="USD",
            hour=hour - timedelta(days=ago), calls=2, calls_2xx=2, unpriced_calls=2,
            input_tokens=40, output_tokens=10,
        )  # fmt: skip
    # Calls to a model that does not exist: refused (404), no tokens, no price asked.
    Rollup.objects.create(
        organization_id=a.org.pk, grain=Grain.MODEL, model="gpt-4o-nonexistent",
        currency="USD", hour=hour - timedelta(days=2), calls=3, calls_4xx=3, unpriced_calls=3,
    )  # fmt: skip
    # Another org's unpriced calls do not flag anything here.
    Rollup.objects.create(
        organization_id=b.org.pk, grain=Grain.MODEL, model="zz-negotiated", currency="USD",
        hour=hour, calls=1, unpriced_calls=1,
    )  # fmt: skip


def _model_rows(html: str, name: str) -> str:
    start = html.index(f'<tr data-model="{name}"')
    end = html.index("</tr>", html.index('class="effective-row', start))
    return html[start:end]


def test_models_page_shows_list_and_effective_prices(client, a, price_book):
    html = login(client, a, Role.VIEWER).get("/usage/models/").content.decode()
    assert "read-only" in html and "platform" in html
    listed = _model_rows(html, "zz-listed")
    assert "ZZ-LISTED" in listed and "128000" in listed and "zz-negotiated" in listed
    # List price, then list x 0.8 (the org's discount), per million tokens.
    assert re.findall(r'class="num list">([^<]+)<', listed) == [
        "2.50 USD", "0.25 USD", "3.125 USD", "10.00 USD"]  # fmt: skip
    assert re.findall(r'class="num effective">([^<]+)<', listed) == [
        "2.00 USD", "0.20 USD", "2.50 USD", "8.00 USD"]  # fmt: skip
    negotiated = _model_rows(html, "zz-negotiated")
    # A negotiated price is what the org pays, without the discount on top.
    assert re.findall(r'class="num effective">([^<]+)<', negotiated) == [
        "1.00 USD", "0.10 USD", "1.25 USD", "5.00 USD"]  # fmt: skip
    assert "negotiated" in negotiated and "0.000007" not in html
    assert "not priced" in _model_rows(html, "zz-eur-only")
    # Viewers do not get the needs-a-price flags.
    assert "needs-price-flag" not in html


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN])
def test_owners_and_admins_see_which_models_need_a_price(client, a, price_book, role):
    html = login(client, a, role).get("/usage/models/").content.decode()
    flagged = set(re.findall(r'<tr data-model="([^"]+)" class="needs-price"', html))
    # No price in the org's currency (enabled), and unpriced calls in 30 days.
    assert {"zz-eur-only", "zz-called"} <= flagged
    assert not flagged & {"zz-listed", "zz-negotiated", "zz-disabled"}
    assert "unpriced calls in the last 30 days" in _model_rows(html, "zz-called")
    assert "not-in-catalogue" in html[html.index('id="unknown-unpriced"') :][:300]
    assert "gpt-4o-nonexistent" not in html


@pytest.mark.parametrize("role", [Role.FINANCE, Role.DEVELOPER, Role.VIEWER])
def test_other_roles_see_prices_without_flags(client, a, price_book, role):
    html = login(client, a, role).get("/usage/models/").content.decode()
    assert "zz-listed" in html
    assert "needs-price-flag" not in html and 'id="unknown-unpriced"' not in html
