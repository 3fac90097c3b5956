"""The margin page through the real views: platform staff see revenue,
vendor cost and margin by model, channel and organization exactly as the
call records add up, and download the same rows as CSV; everyone else,
organization owners and finance included, finds no such page (404)."""

from __future__ import annotations

import csv
import html
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts.models import Role
from console.features.analytics.margin import MarginForm, percent_text
from console.kernel.money import format_amount
from tests.factories import MembershipFactory, UserFactory
from tests.usage.margin_fixtures import T0, brute_force, seed_margin
from usage.facade import margin_basis_points, seed_catalog

pytestmark = pytest.mark.django_db

# The two days of seeded calls, as the page's custom range (UTC).
RANGE = {"range": "custom", "from": "2025-06-02T00:00", "to": "2025-06-04T00:00"}
START, END = T0.replace(hour=0), T0.replace(hour=0) + timedelta(days=2)
GROUPS = {"by_model": "model", "by_channel": "node_id", "by_organization": "organization_id"}


@pytest.fixture
def world(db):
    seed_catalog()
    return seed_margin()


@pytest.fixture
def staff(client):
    client.force_login(UserFactory(is_staff=True))
    return client


def _section_rows(page: str, section: str) -> list[list[str]]:
    m = re.search(rf'<section[^>]*id="margin-{section}".*?</section>', page, re.S)
    assert m, f"no section {section}"
    rows = re.findall(r"<tr>(.*?)</tr>", m.group(0), re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in rows]
    return [[html.unescape(c).strip() for c in row] for row in cells if row]


def _expected_rows(sums: dict[tuple, list[int]], labels: dict) -> list[list[str]]:
    """The page's rows for brute-force sums: per currency, biggest revenue first."""
    rows = []
    ordered = sorted(sums.items(), key=lambda kv: (kv[0][1], -kv[1][1], labels[kv[0][0]]))
    for (key, cur), (calls, revenue, cost, uncosted) in ordered:
        rows.append(
            [
                labels[key],
                f"{calls:,}",
                format_amount(revenue, cur, exact=True),
                format_amount(cost, cur, exact=True),
                format_amount(revenue - cost, cur, exact=True),
                percent_text(margin_basis_points(revenue - cost, revenue)),
                f"{uncosted:,}",
            ]
        )
    return rows


def test_staff_see_revenue_cost_and_margin_by_model_channel_and_organization(world, staff):
    # When platform staff open the margin page for the two seeded days
    r = staff.get(reverse("analytics:margin"), RANGE)
    # Then each table holds the call records' sums, formatted by the money module
    assert r.status_code == 200
    page = r.content.decode()
    labels = {
        "by_model": {"sim-chat-small": "sim-chat-small", "sim-chat-large": "sim-chat-large"},
        "by_channel": {world.vendor.pk: "vendor-openai", world.local.pk: "gpu-local",
                       0: "(no upstream)"},
        "by_organization": {world.usd_org.pk: "Acme", world.eur_org.pk: "=Globex"},
    }  # fmt: skip
    for section, group in GROUPS.items():
        expected = _expected_rows(brute_force(group, START, END), labels[section])
        assert _section_rows(page, section) == expected, section
    # ... the totals per currency, with a margin that is real
    totals = _section_rows(page, "totals")
    assert [row[0] for row in totals] == ["All calls", "All calls"]
    assert [row[2].split()[-1] for row in totals] == ["EUR", "USD"]
    assert all(Decimal(row[4].split()[0].replace(",", "")) > 0 for row in totals)
    # ... what the margin leaves out is said
    assert "4 calls without a comparable cost" in page
    assert "2025-06-02 00:00 to 2025-06-04 00:00 UTC" in page
    # ... and the revenue and cost per day are drawn
    assert 'id="plot-margin_daily"' in page and "Vendor cost (USD)" in page


def test_the_csv_holds_the_pages_rows_exactly(world, staff):
    page = staff.get(reverse("analytics:margin"), RANGE).content.decode()
    # When finance downloads the CSV of the same range
    r = staff.get(reverse("analytics:margin_csv"), RANGE)
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert 'filename="margin-2025060200-2025060400.csv"' in r["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(r.content.decode("utf-8-sig"))))
    # Then it has the page's rows, table by table, in the page's order ...
    for section in ("totals", *GROUPS):
        table = "total" if section == "totals" else section.removeprefix("by_")
        mine = [row for row in rows if row["table"] == table]
        shown = _section_rows(page, section)
        assert len(mine) == len(shown) > 0
        for row, cells in zip(mine, shown, strict=True):
            cur = row["currency"]
            micro = {
                k: int(Decimal(row[k]) * 1_000_000) for k in ("revenue", "vendor_cost", "margin")
            }
            # ... exact to the micro-unit, as the page shows them
            assert micro["margin"] == micro["revenue"] - micro["vendor_cost"]
            assert cells == [
                row["name"].removeprefix("'"),
                f"{int(row['calls']):,}",
                format_amount(micro["revenue"], cur, exact=True),
                format_amount(micro["vendor_cost"], cur, exact=True),
                format_amount(micro["margin"], cur, exact=True),
                f"{row['margin_pct']} %" if row["margin_pct"] else "—",
                f"{int(row['calls_without_comparable_cost']):,}",
            ]
    # ... the organizations' figures are the call records' to the micro-unit
    sums = brute_force("organization_id", START, END)
    for row in (r for r in rows if r["table"] == "organization"):
        calls, revenue, cost, uncosted = sums[(int(row["key"]), row["currency"])]
        assert Decimal(row["revenue"]) * 1_000_000 == revenue
        assert Decimal(row["vendor_cost"]) * 1_000_000 == cost
        assert (int(row["calls"]), int(row["calls_without_comparable_cost"])) == (calls, uncosted)
    # ... and a name a spreadsheet would run as a formula is defused
    assert "'=Globex" in [row["name"] for row in rows]


@pytest.mark.parametrize("role", [Role.OWNER, Role.FINANCE, Role.ADMIN])
def test_members_even_owners_and_finance_find_no_margin_page(world, client, role):
    membership = MembershipFactory(organization=world.usd_org, role=role)
    client.force_login(membership.user)
    assert client.get(reverse("analytics:margin"), RANGE).status_code == 404
    assert client.get(reverse("analytics:margin_csv"), RANGE).status_code == 404
    # ... nor a tab leading to it
    page = client.get(reverse("analytics:latency")).content.decode()
    if role != Role.FINANCE:  # finance sees the billing tab only
        assert 'id="tab-latency"' in page
    assert 'id="tab-margin"' not in page


def test_anonymous_visitors_and_inactive_staff_find_no_margin_page(world, client):
    assert client.get(reverse("analytics:margin")).status_code == 404
    client.force_login(UserFactory(is_staff=True, is_active=False))
    assert client.get(reverse("analytics:margin_csv")).status_code == 404


def test_staff_who_are_members_get_a_margin_tab(world, client):
    membership = MembershipFactory(organization=world.usd_org, role=Role.VIEWER)
    membership.user.is_staff = True
    membership.user.save(update_fields=["is_staff"])
    client.force_login(membership.user)
    page = client.get(reverse("analytics:latency")).content.decode()
    assert f'href="{reverse("analytics:margin")}' in page and 'id="tab-margin"' in page
    r = client.get(reverse("analytics:margin"), RANGE)
    assert r.status_code == 200 and 'aria-current="page"' in r.content.decode()


def test_a_bad_range_is_a_form_error_and_htmx_gets_the_body(world, staff):
    r = staff.get(reverse("analytics:margin"), {"range": "custom", "to": "2025-06-04T00:00"})
    assert r.status_code == 200
    assert "Give the start of a custom range." in r.content.decode()
    assert staff.get(reverse("analytics:margin_csv"), {"range": "custom"}).status_code == 400
    r = staff.get(
        reverse("analytics:margin"), RANGE, headers={"HX-Request": "true", "HX-Target": "analytics"}
    )
    assert r.status_code == 200 and not r.content.decode().lstrip().startswith("<!doctype")


NOW = datetime(2025, 6, 17, 14, 25, tzinfo=UTC)


@pytest.mark.parametrize(
    ("data", "start", "end"),
    [
        ({}, datetime(2025, 5, 19, tzinfo=UTC), datetime(2025, 6, 17, 15, tzinfo=UTC)),
        ({"range": "24h"}, datetime(2025, 6, 16, 15, tzinfo=UTC), datetime(2025, 6, 17, 15, tzinfo=UTC)),
        ({"range": "month"}, datetime(2025, 6, 1, tzinfo=UTC), datetime(2025, 6, 17, 15, tzinfo=UTC)),
        ({"range": "last_month"}, datetime(2025, 5, 1, tzinfo=UTC), datetime(2025, 6, 1, tzinfo=UTC)),
        ({"from": "2025-06-02T09:40", "to": "2025-06-02T11:05"},
         datetime(2025, 6, 2, 9, tzinfo=UTC), datetime(2025, 6, 2, 12, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_ranges_are_whole_utc_hours(data, start, end):
    from django.http import QueryDict

    q = QueryDict(mutable=True)
    q.update(data)
    form = MarginForm(q, now=NOW)
    assert form.is_valid(), form.errors
    assert (form.cleaned_data["start"], form.cleaned_data["end"]) == (start, end)
