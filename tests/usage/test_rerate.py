"""Re-rating after a price fix: open periods are corrected in place (rollups
too), closed periods get adjustments, and a second run changes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from accounts.models import AuditEvent
from tests.usage.factories import PriceFactory, event, expected_rollups, stored_rollups
from usage.ingest import ingest_events
from usage.models import Adjustment, CallRecord, CatalogModel, PeriodClose, RerateRun, Rollup
from usage.rerate import rerate

pytestmark = pytest.mark.django_db
MARCH = datetime(2025, 3, 1, tzinfo=UTC)
APRIL = datetime(2025, 4, 1, tzinfo=UTC)


@pytest.fixture
def priced(org, key):
    """A model at 1 $/Mtok input; calls in March (to be closed) and April (open)."""
    model = CatalogModel.objects.create(name="fixme", display_name="Fix me")
    price = PriceFactory(model=model, input_per_mtok=1_000_000, output_per_mtok=0)
    march = [event(key, model="fixme", started_at=MARCH + timedelta(days=d)) for d in (1, 2)]
    april = [event(key, model="fixme", started_at=APRIL + timedelta(days=d)) for d in (1, 2, 3)]
    ingest_events(march + april)
    PeriodClose.objects.create(organization=org, period_start=MARCH, period_end=APRIL)
    return price


def run(**kwargs) -> dict:
    out = StringIO()
    args = ["--from", "2025-03-01T00:00:00Z", "--to", "2025-05-01T00:00:00Z", "--reason", "fix"]
    for k, v in kwargs.items():
        args += [f"--{k.replace('_', '-')}"] if v is True else [f"--{k}", str(v)]
    call_command("rerate_usage", *args, stdout=out)
    return json.loads(out.getvalue())


def test_open_calls_are_corrected_and_closed_ones_adjusted(org, key, priced):
    assert set(CallRecord.objects.values_list("cost", flat=True)) == {1200}
    priced.input_per_mtok = 2_000_000  # the fix
    priced.save()

    summary = run(org=org.pk)

    assert summary["calls_examined"] == 5
    assert (summary["calls_rerated"], summary["cost_delta"]) == (3, 3 * 1200)
    assert (summary["adjustments"], summary["adjustment_delta"]) == (2, 2 * 1200)
    march = CallRecord.objects.filter(started_at__lt=APRIL)
    assert set(march.values_list("cost", flat=True)) == {1200}  # invoiced: untouched
    assert set(CallRecord.objects.filter(started_at__gte=APRIL).values_list("cost", flat=True)) == {
        2400
    }
    adj = Adjustment.objects.order_by("request_id")
    assert [(a.original_cost, a.new_cost, a.delta) for a in adj] == [(1200, 2400, 1200)] * 2
    assert {a.request_id for a in adj} == set(march.values_list("request_id", flat=True))
    # Rollups follow the records in the open period.
    assert stored_rollups(org.pk) == expected_rollups(org.pk)
    run_row = RerateRun.objects.get()
    assert (run_row.calls_rerated, run_row.adjustments, run_row.reason) == (3, 2, "fix")
    assert run_row.finished_at is not None
    audit = AuditEvent.objects.get(action="usage.rerate")
    assert audit.organization_id == org.pk
    assert audit.params["calls_rerated"] == 3


def test_hours_rolled_up_before_protocol_and_streaming_are_corrected_too(org, key, priced):
    from django.db.models import Sum

    # As an hour ingested before migration usage.0005 left it: no traffic rows,
    # and full rows without protocol and streaming.
    Rollup.objects.filter(grain="traffic").delete()
    Rollup.objects.filter(grain="full").update(protocol="", mode="")
    priced.input_per_mtok = 2_000_000
    priced.save()
    run(org=org.pk)
    april = CallRecord.objects.filter(started_at__gte=APRIL)
    for grain in ("org", "full"):
        rows = Rollup.objects.filter(organization_id=org.pk, grain=grain, hour__gte=APRIL)
        assert rows.aggregate(c=Sum("cost"))["c"] == april.aggregate(c=Sum("cost"))["c"] == 3 * 2400


def test_a_second_run_creates_nothing_new(org, key, priced):
    priced.input_per_mtok = 2_000_000
    priced.save()
    run()
    again = run()
    assert (again["calls_rerated"], again["adjustments"]) == (0, 0)
    assert Adjustment.objects.count() == 2
    # A second fix adjusts only the difference against cost plus prior adjustments.
    priced.input_per_mtok = 1_500_000
    priced.save()
    third = run()
    assert third["adjustment_delta"] == 2 * (1800 - 2400)
    assert Adjustment.objects.count() == 4
    assert set(CallRecord.objects.filter(started_at__gte=APRIL).values_list("cost", flat=True)) == {
        1800
    }


def test_dry_run_reports_and_changes_nothing(org, key, priced):
    priced.input_per_mtok = 2_000_000
    priced.save()
    before = stored_rollups(org.pk)
    summary = run(dry_run=True)
    assert (summary["calls_rerated"], summary["adjustments"], summary["dry_run"]) == (3, 2, True)
    assert set(CallRecord.objects.values_list("cost", flat=True)) == {1200}
    assert not Adjustment.objects.exists() and not RerateRun.objects.exists()
    assert stored_rollups(org.pk) == before


def test_unpriced_calls_become_priced_and_the_rollups_say_so(catalog, org, key):
    ingest_events([event(key, model="late-price", started_at=APRIL)])
    assert Rollup.objects.get(organization_id=org.pk, grain="org").unpriced_calls == 1
    PriceFactory(
        model=CatalogModel.objects.create(name="late-price", display_name="L"),
        input_per_mtok=1_000_000,
        output_per_mtok=0,
    )
    summary = rerate(start=APRIL, end=APRIL + timedelta(days=1), reason="price added")
    assert summary.calls_rerated == 1
    row = Rollup.objects.get(organization_id=org.pk, grain="org")
    assert (row.unpriced_calls, row.cost) == (0, 1200)
    assert CallRecord.objects.get().priced


def test_model_filter_and_bad_arguments(org, key, priced):
    priced.input_per_mtok = 2_000_000
    priced.save()
    assert run(model="other")["calls_examined"] == 0
    with pytest.raises(ValueError, match="reason"):
        rerate(start=MARCH, end=APRIL, reason=" ")
    with pytest.raises(ValueError, match="after its start"):
        rerate(start=APRIL, end=MARCH, reason="x")
