"""Issue 38: an organization whose calls cost fractions of a cent reads
amounts it can tell apart on the Spend page (tables and chart hover labels,
``console.kernel.money``'s small-amount form), and choosing "Group spend by:
a tag's value" swaps the form in without an error, keeping the tag key typed."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.actors import Actor
from accounts.models import Role
from console.kernel.money import format_amount
from tests.factories import MembershipFactory, OrganizationFactory, issue_key
from tests.usage.factories import PriceFactory, event
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.models import CallRecord, CatalogModel
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog

pytestmark = pytest.mark.django_db
PRICE_PER_MTOK = 2_000_000  # 2 USD per million input tokens: 2 micro-units a token
# Two keys' spend, both under a cent: 0.0031 and 0.0047 USD.
SPENDS = {"alpha": 3_100, "beta": 4_700}
HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "analytics"}


@pytest.fixture
def small_spender(client):
    seed_catalog()
    org = OrganizationFactory(currency="USD")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    PriceFactory(
        model=CatalogModel.objects.get(name="sim-chat-small"),
        organization=org,
        input_per_mtok=PRICE_PER_MTOK,
        output_per_mtok=PRICE_PER_MTOK,
    )
    invalidate_price_book()
    invalidate_directory()
    now = timezone.now()
    # An hour ago, but never before today's midnight: "last 24 hours" holds it.
    when = max(now - timedelta(hours=1), now.replace(hour=0, minute=0, second=0, microsecond=0))
    events = []
    for name, micro in SPENDS.items():
        key, _secret = issue_key(Actor(owner), name=name)
        tokens = micro // 2
        events.append(
            event(
                key,
                started_at=when,
                input_tokens=tokens,
                output_tokens=0,
                tags={"team": name},
            )
        )
    ingest_events(events)
    client.force_login(owner.user)
    yield org
    invalidate_price_book()
    invalidate_directory()


def _figure(html: str) -> dict:
    m = re.search(r'class="js-figure"[^>]*>(.*?)</script>', html, re.S)
    assert m, html
    return json.loads(m.group(1))


def test_the_small_amount_form_tells_fractions_of_a_cent_apart():
    assert format_amount(3_100, "USD", small=True, locale="en") == "0.0031 USD"
    assert format_amount(4_700, "USD", small=True, locale="en") == "0.0047 USD"
    assert format_amount(31, "USD", small=True, locale="en") == "0.000031 USD"
    assert format_amount(-4_700, "USD", small=True, locale="en") == "-0.0047 USD"
    # What a cent or more shows is the usual form, and without small= nothing changes.
    assert format_amount(14_293_328, "USD", small=True, locale="en") == "14.29 USD"
    assert format_amount(0, "USD", small=True, locale="en") == "0.00 USD"
    assert format_amount(3_100, "USD", locale="en") == "< 0.01 USD"


def test_top_spenders_show_two_small_keys_as_different_amounts(client, small_spender):
    costs = sorted(
        CallRecord.objects.filter(organization_id=small_spender.pk).values_list("cost", flat=True)
    )
    assert costs == sorted(SPENDS.values())
    html = client.get(reverse("analytics:chart_top_spenders")).content.decode()
    assert "0.0031 USD" in html and "0.0047 USD" in html
    assert "&lt; 0.01" not in html and "< 0.01" not in html


def test_the_spend_chart_hover_labels_tell_small_amounts_apart(client, small_spender):
    html = client.get(reverse("analytics:chart_spend"), {"stack": "key"}).content.decode()
    figure = _figure(html)
    hovers = {t["name"]: t["hovertemplate"] for t in figure["data"]}
    texts = {t["name"]: [c for c in t["customdata"] if c] for t in figure["data"]}
    assert set(hovers.values()) == {"%{customdata}"}
    assert sorted(text for cells in texts.values() for text in cells if text != "0.00 USD") == [
        "0.0031 USD",
        "0.0047 USD",
    ]


def test_spend_by_tag_shows_each_tags_small_amount(client, small_spender):
    params = {"attribute": "tag", "tag_key": "team"}
    html = client.get(reverse("analytics:chart_spend_attribution"), params).content.decode()
    assert "0.0031 USD" in html and "0.0047 USD" in html
    assert "&lt; 0.01" not in html
    customdata = _figure(html)["data"][0]["customdata"]
    assert "0.0031 USD" in customdata and "0.0047 USD" in customdata


def test_choosing_group_by_tag_swaps_the_form_in_without_an_error(client, small_spender):
    # As the htmx form sends it the moment "Group spend by" changes: no key yet.
    response = client.get(
        reverse("analytics:spend"), {"range": "24h", "attribute": "tag", "tag_key": ""}, **HTMX
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "field-error" not in html and "has-error" not in html
    assert 'id="id_tag_key"' in html
    assert 'id="no-charts"' not in html  # the charts still load
    # The chart asks for the key instead of failing.
    chart = client.get(reverse("analytics:chart_spend_attribution"), {"attribute": "tag"})
    assert chart.status_code == 200
    assert "Give the tag key" in chart.content.decode()


def test_the_tag_key_being_typed_is_kept(client, small_spender):
    response = client.get(
        reverse("analytics:spend"), {"range": "24h", "attribute": "tag", "tag_key": "tea"}, **HTMX
    )
    assert response.status_code == 200
    html = response.content.decode()
    field = re.search(r"<input[^>]*id=\"id_tag_key\"[^>]*>", html)
    assert field, html
    # Its value comes back, and the swap keeps the input a person is typing in.
    assert 'value="tea"' in field.group(0)
    assert 'hx-preserve="true"' in field.group(0)
    assert "field-error" not in html
    assert '<option value="team">' in html  # the tag keys in the range are offered
