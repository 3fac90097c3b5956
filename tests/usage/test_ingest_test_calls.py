"""Load-test calls marked "not billed" (``is_test``): stored as call records
but added to no rollup and no attribution rollup, so the spend analytics,
cap seeding, alert windows and attribution agree with the invoice; a
redelivered mixed batch adds nothing; a load test's own key still counts
its calls against its budget. Runs on the backend in use (PostgreSQL's COPY
writer or the embedded SQLite writer)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Sum

from invoicing.services import invoice_draft
from tests.usage.factories import PriceFactory, event, expected_rollups, stored_rollups
from usage.analytics import totals
from usage.attribution import BY_END_USER, BY_TAG, attribution
from usage.ingest import IngestResult, ingest_events
from usage.models import AttributionRollup, CallRecord, CatalogModel, Grain, Rollup
from usage.rerate import rerate
from usage.spend import KEY, SUB_ACCOUNT, spend_by_period, spend_by_period_many
from usage.windows import window_stats

pytestmark = pytest.mark.django_db
T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)
KOLKATA = ZoneInfo("Asia/Kolkata")  # UTC+5:30: its month edges cut UTC hours


@pytest.fixture
def load_key(org, team, make_key):
    """A load test's key in the team's sub-account: every call it makes is a test."""
    return make_key(org, "load", team)


def mixed(key, load_key, team_key, start: datetime = T0, n: int = 12) -> list[dict]:
    """Billed calls of ``key`` and ``team_key`` and test calls of
    ``load_key``, interleaved, tagged and attributed alike, some failed."""
    out = []
    for i in range(n):
        k = (key, load_key, team_key)[i % 3]
        out.append(
            event(
                k,
                started_at=start + timedelta(minutes=13 * i + 2),
                input_tokens=1000 + 17 * i,
                output_tokens=200 + 5 * i,
                status_code=503 if i % 4 == 1 else 200,
                end_user=f"user-{i % 2}",
                tags={"team": ("search", "chat")[i % 2]},
                is_test=k is load_key,
            )
        )
    return out


def billed_attribution(org_id: int) -> dict:
    """The attribution rollups as they should be: summed from the billed calls."""
    sums: dict = defaultdict(lambda: [0, 0])
    for c in CallRecord.objects.billed().filter(organization_id=org_id):
        hour = c.started_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        cells = [("tag", k, hour, v) for k, v in c.tags.items()]
        if c.end_user:
            cells.append(("user", "", hour, c.end_user))
        for cell in cells:
            sums[cell][0] += 1
            sums[cell][1] += c.cost
    return {cell: tuple(s) for cell, s in sums.items()}


def stored_attribution(org_id: int) -> dict:
    rows = AttributionRollup.objects.filter(organization_id=org_id)
    return {(r.kind, r.tag_key, r.hour, r.value): (r.calls, r.cost) for r in rows}


def billed_cost(**filters) -> int:
    return CallRecord.objects.billed().filter(**filters).aggregate(s=Sum("cost"))["s"] or 0


def test_a_mixed_batch_rolls_up_the_billed_calls_only(catalog, org, key, team_key, load_key):
    events = mixed(key, load_key, team_key)
    assert ingest_events(events) == IngestResult(accepted=12, duplicates=0, dead_lettered=0)

    # Every call is stored, the load test's marked as tests and rated ...
    assert CallRecord.objects.filter(organization_id=org.pk).count() == 12
    tests = CallRecord.objects.filter(api_key_id=load_key.pk)
    assert set(tests.values_list("is_test", flat=True)) == {True}
    assert all(c.cost > 0 for c in tests)
    # ... but the rollups and the attribution rollups hold the billed ones only.
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
    org_rows = Rollup.objects.filter(organization_id=org.pk, grain=Grain.ORG)
    assert org_rows.aggregate(n=Sum("calls"))["n"] == 8
    assert org_rows.aggregate(c=Sum("cost"))["c"] == billed_cost(organization_id=org.pk)
    assert not Rollup.objects.filter(api_key_id=load_key.pk).exists()
    assert stored_attribution(org.pk) == billed_attribution(org.pk)
    assert sum(calls for calls, _ in stored_attribution(org.pk).values()) == 2 * 8


def test_a_batch_of_test_calls_only_adds_no_rollup(catalog, org, load_key):
    events = [event(load_key, end_user="u", tags={"t": "x"}, is_test=True) for _ in range(3)]
    assert ingest_events(events).accepted == 3
    assert CallRecord.objects.filter(organization_id=org.pk).count() == 3
    assert not Rollup.objects.filter(organization_id=org.pk).exists()
    assert not AttributionRollup.objects.filter(organization_id=org.pk).exists()


def test_a_redelivered_mixed_batch_adds_nothing(catalog, org, key, team_key, load_key):
    events = mixed(key, load_key, team_key)
    ingest_events(events)
    rollups, attributed = stored_rollups(org.pk), stored_attribution(org.pk)

    assert ingest_events(events) == IngestResult(accepted=0, duplicates=12, dead_lettered=0)
    assert stored_rollups(org.pk) == rollups
    assert stored_attribution(org.pk) == attributed

    # Half stored already, half new (test and billed): only the new billed ones add.
    more = mixed(key, load_key, team_key, start=T0 + timedelta(hours=1), n=6)
    result = ingest_events(events[:6] + more)
    assert result == IngestResult(accepted=6, duplicates=6, dead_lettered=0)
    assert CallRecord.objects.filter(organization_id=org.pk).count() == 18
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
    assert stored_attribution(org.pk) == billed_attribution(org.pk)
    org_rows = Rollup.objects.filter(organization_id=org.pk, grain=Grain.ORG)
    billed = CallRecord.objects.billed().filter(organization_id=org.pk)
    assert org_rows.aggregate(n=Sum("calls"))["n"] == billed.count() == 12


def test_spend_and_the_spend_analytics_equal_the_invoice_when_a_load_test_ran(
    catalog, org, key, team, team_key, load_key
):
    # An organization in India: its March starts and ends half-way through a
    # UTC hour, so spend reads those edge hours from the call records.
    org.timezone = "Asia/Kolkata"
    org.save(update_fields=["timezone"])
    month = (datetime(2025, 3, 1, tzinfo=KOLKATA), datetime(2025, 4, 1, tzinfo=KOLKATA))
    edges = [month[0] - timedelta(minutes=20), month[0] + timedelta(minutes=10)]
    edges += [month[1] - timedelta(minutes=10), month[1] + timedelta(minutes=20)]
    events = []
    for t in [*edges, T0]:
        events += mixed(key, load_key, team_key, start=t - timedelta(minutes=2), n=3)
    ingest_events(events)
    in_march = {"started_at__gte": month[0], "started_at__lt": month[1]}
    load_calls = CallRecord.objects.filter(api_key_id=load_key.pk)
    march_tests = load_calls.filter(**in_march).aggregate(s=Sum("cost"))["s"]
    assert march_tests > 0

    invoice = invoice_draft(organization_id=org.pk, period="2025-03")
    assert invoice.usage_amount == billed_cost(organization_id=org.pk, **in_march) > 0

    # Spend by period (what caps are seeded from and spend alerts read):
    # the sub-account's is its billed calls', though the load test ran in it ...
    periods = {"month": month}
    team_spend = spend_by_period(
        organization_id=org.pk, grain=SUB_ACCOUNT, ident=team.pk, periods=periods
    )
    assert team_spend["month"] == billed_cost(sub_account_id=team.pk, **in_march)
    assert team_spend["life"] == billed_cost(sub_account_id=team.pk)
    # ... the billed keys' add up to the invoice ...
    spent = spend_by_period_many(
        organization_id=org.pk, grain=KEY, idents=[key.pk, team_key.pk, load_key.pk],
        periods=periods,
    )  # fmt: skip
    assert spent[key.pk]["month"] + spent[team_key.pk]["month"] == invoice.usage_amount
    # ... and the load test's own key still counts its calls: its budget.
    assert spent[load_key.pk]["month"] == march_tests
    assert spent[load_key.pk]["life"] == load_calls.aggregate(s=Sum("cost"))["s"]

    # The spend analytics (the rollups) show the billed calls only.
    whole = totals(org.pk, month[0] - timedelta(hours=2), month[1] + timedelta(hours=2))
    assert whole["cost"] == billed_cost(organization_id=org.pk)
    assert whole["calls"] == CallRecord.objects.billed().filter(organization_id=org.pk).count()


def test_a_window_and_the_attribution_edges_leave_test_calls_out(
    catalog, org, key, team_key, load_key
):
    # One hour of calls: test calls fail (5xx), billed ones succeed.
    events = []
    for i in range(12):
        test = i % 2 == 0
        events.append(
            event(
                load_key if test else key,
                started_at=T0 + timedelta(minutes=5 * i + 1),
                status_code=503 if test else 200,
                end_user="alice",
                is_test=test,
            )
        )
    ingest_events(events)
    # A window inside the hour (call records) and one over it (rollups) agree.
    part = window_stats(organization_id=org.pk, start=T0, end=T0 + timedelta(minutes=30))
    assert (part.calls, part.errors) == (3, 0)
    hour = window_stats(organization_id=org.pk, start=T0, end=T0 + timedelta(hours=1))
    assert (hour.calls, hour.errors) == (6, 0)
    # Attribution over an edge that cuts the hour counts the billed calls too.
    for end in (T0 + timedelta(minutes=30), T0 + timedelta(hours=1)):
        a = attribution(organization_id=org.pk, start=T0, end=end, by=BY_END_USER)
        expected = billed_cost(organization_id=org.pk, started_at__lt=end)
        assert [(g.value, g.cost) for g in a.groups] == [("alice", expected)]
        assert a.total.cost == expected
    a = attribution(organization_id=org.pk, start=T0, end=T0 + timedelta(hours=1), by=BY_TAG,
                    tag_key="team")  # fmt: skip
    assert a.total.calls == 6


def test_re_rating_test_calls_changes_their_cost_and_no_rollup(org, key, load_key):
    model = CatalogModel.objects.create(name="fixme", display_name="Fix me")
    price = PriceFactory(model=model, input_per_mtok=1_000_000, output_per_mtok=0)
    calls = [
        event(k, model="fixme", started_at=T0 + timedelta(minutes=i), end_user="bob",
              is_test=k is load_key)
        for i, k in enumerate((key, load_key, key, load_key))
    ]  # fmt: skip
    ingest_events(calls)
    price.input_per_mtok = 2_000_000
    price.save()
    rerate(start=T0, end=T0 + timedelta(hours=1), reason="fix")
    assert set(CallRecord.objects.values_list("cost", flat=True)) == {2400}
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
    assert stored_attribution(org.pk) == billed_attribution(org.pk)
