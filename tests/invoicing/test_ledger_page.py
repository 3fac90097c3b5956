"""The ledger on the balance page: times in the organization's zone, named
in the column header; usage debits summed per local day with their calls;
other entries one row each; the balance after each row adds up."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from accounts.models import Role
from invoicing.models import LedgerEntry, LedgerKind
from tests.invoicing.pages import as_member, html

pytestmark = pytest.mark.django_db


def _entry(org, kind, amount, at, reference, reason=""):
    return LedgerEntry.objects.create(
        organization=org, kind=kind, amount=amount, currency=org.currency,
        reference=reference, reason=reason, created_at=at,
    )  # fmt: skip


def _rows(page: str) -> list[list[str]]:
    body = page.split('<table id="ledger">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr data-entry=.*?</tr>", body, re.S)
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)
        ]
        for r in rows
    ]


@pytest.fixture
def berlin(org):
    org.timezone = "Europe/Berlin"
    org.save(update_fields=["timezone"])
    return org


def test_ledger_times_are_in_the_orgs_zone_named_in_the_header(client, members, berlin):
    # Given: a grant at 23:30 UTC, which is 00:30 the next day in Berlin (winter).
    _entry(berlin, LedgerKind.GRANT, 5_000_000, datetime(2026, 1, 14, 23, 30, tzinfo=UTC), "g",
           "bank transfer")  # fmt: skip

    page = html(as_member(client, members[Role.FINANCE]).get(reverse("invoicing:balance")))

    assert "<th>Time (Europe/Berlin)</th>" in page and "Time (UTC)" not in page
    assert _rows(page)[0][0] == "2026-01-15 00:30:00"


def test_usage_debits_are_one_row_per_local_day_with_their_calls(client, members, berlin):
    # Given: five ingest batches over two Berlin days (one after 23:00 UTC is
    # the next day locally), a top-up between two batches of the second day.
    day = datetime(2026, 3, 10, tzinfo=UTC)
    _entry(berlin, LedgerKind.GRANT, 10_000_000, day.replace(hour=8), "grant", "opening grant")
    _entry(berlin, LedgerKind.USAGE, -100_001, day.replace(hour=9), "b1", "1 call")
    _entry(berlin, LedgerKind.USAGE, -200_002, day.replace(hour=15), "b2", "311 calls")
    _entry(berlin, LedgerKind.USAGE, -300_003, day.replace(hour=23, minute=5), "b3", "40 calls")
    _entry(berlin, LedgerKind.TOP_UP, 2_000_000, day.replace(day=11, hour=6), "t1")
    _entry(berlin, LedgerKind.USAGE, -400_004, day.replace(day=11, hour=7), "b4", "2 calls")

    page = html(as_member(client, members[Role.FINANCE]).get(reverse("invoicing:balance")))
    rows = _rows(page)

    # Then: newest first; the 23:05 UTC batch is on 11 March in Berlin, before the top-up.
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("2026-03-11", "Usage", "2 calls"),
        ("2026-03-11 07:00:00", "Top-up", ""),
        ("2026-03-11", "Usage", "40 calls"),
        ("2026-03-10", "Usage", "312 calls"),
        ("2026-03-10 09:00:00", "Grant", "opening grant"),
    ]
    # The balance after each row, in cents like every amount on the page: the
    # newest is today's balance, each older one is the newer one less the newer
    # row's amount (exact figures are in the CSV).
    assert [(r[5], r[6]) for r in rows] == [
        ("-0.40 USD", "11.00 USD"),
        ("2.00 USD", "11.40 USD"),
        ("-0.30 USD", "9.40 USD"),
        ("-0.30 USD", "9.70 USD"),
        ("10.00 USD", "10.00 USD"),
    ]
    assert page.split('id="balance">', 1)[1].startswith("11.00 USD")
    assert "1 calls" not in page


def test_balance_after_each_row_adds_up(berlin, members):
    from zoneinfo import ZoneInfo

    from accounts.actors import Actor
    from invoicing.ledger_page import ledger_page

    day = datetime(2026, 3, 10, tzinfo=UTC)
    _entry(berlin, LedgerKind.GRANT, 10_000_000, day.replace(hour=8), "grant", "g")
    for i in range(4):
        _entry(berlin, LedgerKind.USAGE, -111_111 - i, day.replace(hour=9 + i), f"b{i}", "3 calls")
    _entry(berlin, LedgerKind.ADJUSTMENT, -1_000_000, day.replace(hour=20), "adj", "fix")

    page = ledger_page(actor=Actor(members[Role.FINANCE]), tzinfo=ZoneInfo("Europe/Berlin"))

    assert [(r.kind, r.entries, r.calls) for r in page.rows] == [
        ("adjustment", 1, None), ("usage", 4, 12), ("grant", 1, None),
    ]  # fmt: skip
    assert page.rows[0].balance_after == 10_000_000 - 444_450 - 1_000_000
    for newer, older in zip(page.rows, page.rows[1:], strict=False):
        assert older.balance_after == newer.balance_after - newer.amount
    assert page.rows[-1].balance_after == page.rows[-1].amount == 10_000_000


def test_pages_never_split_a_day_and_the_next_page_carries_on(client, members, berlin):
    # Given: 60 top-ups (one row each), then a day of 30 usage batches.
    for i in range(60):
        _entry(
            berlin, LedgerKind.TOP_UP, 1_000_000, datetime(2026, 2, 1, 0, i, tzinfo=UTC), f"t{i}"
        )
    for i in range(30):
        _entry(berlin, LedgerKind.USAGE, -1_000, datetime(2026, 2, 2, 9, i, tzinfo=UTC), f"u{i}",
               "10 calls")  # fmt: skip
    c = as_member(client, members[Role.FINANCE])

    first = html(c.get(reverse("invoicing:balance")))
    rows = _rows(first)
    assert len(rows) == 50 and rows[0][:2] == ["2026-02-02", "Usage"] and rows[0][3] == "300 calls"
    older = re.search(r'id="older" href="\?before=(\d+)"', first).group(1)
    second = _rows(html(c.get(reverse("invoicing:balance"), {"before": older})))
    assert len(second) == 11 and all(r[1] == "Top-up" for r in second)
    assert second[-1][6] == "1.00 USD"


def test_call_logs_follow_the_same_rule(client, members, berlin, catalog, key):
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    # Given: a call at 23:30 UTC, 00:30 the next day in Berlin.
    ingest_events([event(key, started_at=datetime(2026, 1, 14, 23, 30, tzinfo=UTC))])

    page = html(as_member(client, members[Role.OWNER]).get(reverse("usage:calls")))

    assert "Time (Europe/Berlin)" in page.split('<table id="calls">', 1)[1].split("</th>", 1)[0]
    assert "2026-01-15 00:30:00" in page and "2026-01-14 23:30:00" not in page


def test_the_database_sums_the_debits(client, members, berlin, django_assert_max_num_queries):
    # Given: three busy days, 400 ingest batches each, a top-up every day at
    # noon in Berlin (10:00 UTC) halfway through them.
    entries = []
    for d in range(3):
        for i in range(400):
            at = datetime(2026, 4, 1 + d, 8, 20, 15, tzinfo=UTC) + timedelta(seconds=30 * i)
            entries.append(
                LedgerEntry(
                    organization=berlin,
                    kind=LedgerKind.USAGE,
                    amount=-1_000,
                    currency="USD",
                    reference=f"b{d}-{i}",
                    reason="2 calls",
                    created_at=at,
                )
            )
        entries.append(
            LedgerEntry(
                organization=berlin,
                kind=LedgerKind.TOP_UP,
                amount=5_000_000,
                currency="USD",
                reference=f"t{d}",
                created_at=datetime(2026, 4, 1 + d, 10, tzinfo=UTC),
            )
        )
    LedgerEntry.objects.bulk_create(entries)
    c = as_member(client, members[Role.FINANCE])

    with django_assert_max_num_queries(25):
        page = html(c.get(reverse("invoicing:balance")))

    # Then: per day, the batches before and after the noon top-up are two rows.
    rows = _rows(page)
    assert [(r[0], r[1], r[3]) for r in rows[:3]] == [
        ("2026-04-03", "Usage", "400 calls"),
        ("2026-04-03 12:00:00", "Top-up", ""),
        ("2026-04-03", "Usage", "400 calls"),
    ]
    assert len(rows) == 9 and sum(1 for r in rows if r[1] == "Usage") == 6
    assert rows[-1][6] == "-0.20 USD"  # the first 200 batches of 1 April


def test_a_debit_that_does_not_name_its_calls_is_said_so(client, members, berlin):
    at = datetime(2026, 5, 4, 9, tzinfo=UTC)
    _entry(berlin, LedgerKind.USAGE, -5_000, at, "u1", "3 calls")
    _entry(berlin, LedgerKind.USAGE, -5_000, at.replace(hour=10), "u2", "")
    _entry(berlin, LedgerKind.USAGE, -5_000, at.replace(hour=11), "u3", "imported by hand")

    rows = _rows(html(as_member(client, members[Role.FINANCE]).get(reverse("invoicing:balance"))))

    assert [(r[0], r[2], r[3], r[5]) for r in rows] == [
        ("2026-05-04", "3 debits", "calls not recorded", "-0.02 USD")
    ]
