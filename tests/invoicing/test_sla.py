"""The SLA ledger: an injected outage (calls the upstream failed, through
the real ingest path) breaches a 99.9 % target; the drafted credit is the
schedule's share of the invoice to the micro-unit; finance approves it and
the invoice's amount due falls by exactly the credit note; a month that
meets its target drafts nothing; evaluating twice drafts one credit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.errors import NotFound, PermissionDenied, ValidationFailed
from accounts.models import AuditEvent, Role
from console.kernel.money import PPM
from invoicing.models import CreditNote, SlaMonth, SlaStatus, SlaTarget
from invoicing.money import div_round
from invoicing.services import invoice_draft, invoice_finalize
from invoicing.services.sla import (
    credit_amount,
    credit_rate_ppm,
    sla_credit_approve,
    sla_credit_dismiss,
    sla_evaluate,
    sla_evaluate_closed,
    sla_figures,
)
from tests.usage.factories import event
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db

PERIOD = "2025-03"
AFTER = datetime(2025, 4, 2, 12, tzinfo=UTC)  # Berlin's March is over, grace included


def march_calls(key, *, ok: int, failed: int = 0, client_errors: int = 0) -> list[str]:
    """Calls of ``key``'s organization on 2025-03-10 and 11 (Berlin): ``ok``
    answered, ``failed`` the upstream failed (502), ``client_errors`` the
    client's fault (400 and 429); returns the failed calls' request ids."""
    base = datetime(2025, 3, 10, 8, tzinfo=UTC)
    events = []
    for i in range(ok):
        events.append(event(key, started_at=base + timedelta(minutes=i), input_tokens=10_000 + i))
    for i in range(client_errors):
        status = 429 if i % 2 else 400
        events.append(
            event(
                key,
                started_at=base + timedelta(minutes=i, seconds=20),
                status_code=status,
                error_type="rpm_limit_exceeded" if status == 429 else "invalid_request_error",
                input_tokens=0,
                output_tokens=0,
            )
        )
    failed_ids = []
    for i in range(failed):
        e = event(
            key,
            started_at=base + timedelta(days=1, minutes=i),
            status_code=502,
            error_type="upstream_error",
            input_tokens=0,
            output_tokens=0,
        )
        failed_ids.append(e["request_id"])
        events.append(e)
    ingest_events(events)
    return failed_ids


@pytest.fixture
def berlin(org):
    org.timezone = "Europe/Berlin"
    org.save(update_fields=["timezone"])
    return org


def _invoice(org):
    return invoice_finalize(invoice_id=invoice_draft(organization_id=org.pk, period=PERIOD).pk)


def test_an_outage_breaches_the_target_and_finance_approves_the_exact_credit(
    catalog, berlin, key, members, actor_for
):
    failed_ids = march_calls(key, ok=198, failed=2, client_errors=10)
    figures = sla_figures(berlin, PERIOD, now=AFTER)
    # Client errors count as served: 210 calls, 2 failed by the upstream.
    assert (figures.calls, figures.failed) == (210, 2)
    assert figures.availability_ppm == 208 * PPM // 210  # 99.0476 %
    assert figures.breached and figures.target_ppm == 999_000
    assert figures.budget == 0 and figures.budget_left == -2
    assert [d.failed for d in figures.days if d.failed] == [2]

    invoice = _invoice(berlin)
    month = sla_evaluate(organization_id=berlin.pk, period=PERIOD, now=AFTER)
    assert month.status == SlaStatus.DRAFTED
    assert month.credit_rate_ppm == 100_000  # below the target, not below 99 %
    expected = div_round(invoice.total * 100_000, PPM)
    assert expected > 0 and credit_amount(month, invoice) == expected

    due_before = invoice.amount_due_minor
    note = sla_credit_approve(month_id=month.pk, actor=actor_for(members[Role.FINANCE]))
    assert note.amount == expected
    line = note.lines.get()
    assert sorted(line.request_ids) == sorted(failed_ids)
    assert line.description == (
        "SLA credit 2025-03: availability 99.0476 % (target 99.9 %), 10 % of the invoice, "
        "2 failed calls"
    )
    invoice.refresh_from_db()
    assert due_before - invoice.amount_due_minor == note.amount_minor == note.due_reduction_minor
    assert invoice.credited == expected
    audited = AuditEvent.objects.get(action="sla.approve")
    assert audited.params["credit_note"] == note.number
    month.refresh_from_db()
    assert (month.status, month.credit_note_id, month.credit_amount) == (
        SlaStatus.APPROVED,
        note.pk,
        expected,
    )
    # Decided: neither a second approval nor a re-evaluation drafts another.
    with pytest.raises(ValidationFailed):
        sla_credit_approve(month_id=month.pk, actor=actor_for(members[Role.FINANCE]))
    sla_evaluate(organization_id=berlin.pk, period=PERIOD, now=AFTER)
    assert SlaMonth.objects.get(pk=month.pk).status == SlaStatus.APPROVED
    assert CreditNote.objects.filter(invoice=invoice).count() == 1


def test_evaluating_twice_drafts_one_credit(catalog, berlin, key, other_org):
    march_calls(key, ok=95, failed=5)
    first = sla_evaluate_closed(now=AFTER)
    assert first >= 2  # every active organization, the one without calls too
    again = sla_evaluate_closed(now=AFTER)
    assert again == 0
    sla_evaluate(organization_id=berlin.pk, period=PERIOD, now=AFTER)  # staff's "evaluate now"
    month = SlaMonth.objects.get(organization=berlin, period=PERIOD)
    assert month.status == SlaStatus.DRAFTED and month.credit_rate_ppm == 250_000
    assert SlaMonth.objects.filter(organization=berlin).count() == 1
    assert SlaMonth.objects.get(organization=other_org, period=PERIOD).status == SlaStatus.MET


def test_the_month_close_waits_for_the_month_and_its_grace(catalog, berlin, key):
    march_calls(key, ok=1, failed=1)
    # Berlin's March ends 2025-03-31 22:00 UTC; the grace is 6 hours.
    assert sla_evaluate_closed(now=datetime(2025, 4, 1, 3, tzinfo=UTC)) == 0
    with pytest.raises(ValidationFailed):
        sla_evaluate(
            organization_id=berlin.pk, period=PERIOD, now=datetime(2025, 3, 31, tzinfo=UTC)
        )
    assert sla_evaluate_closed(now=datetime(2025, 4, 1, 4, tzinfo=UTC)) >= 1
    assert SlaMonth.objects.get(organization=berlin).status == SlaStatus.DRAFTED


def test_a_month_that_meets_its_target_drafts_nothing(catalog, berlin, key, members, actor_for):
    # Staff's override: 99 %; 100 calls, one failed is exactly 99 %: met.
    SlaTarget.objects.create(organization=berlin, availability_ppm=990_000)
    march_calls(key, ok=99, failed=1)
    _invoice(berlin)
    month = sla_evaluate(organization_id=berlin.pk, period=PERIOD, now=AFTER)
    assert (month.status, month.target_ppm, month.credit_rate_ppm) == (SlaStatus.MET, 990_000, 0)
    assert month.availability_ppm == 990_000
    with pytest.raises(ValidationFailed):
        sla_credit_approve(month_id=month.pk, actor=actor_for(members[Role.FINANCE]))
    assert not CreditNote.objects.exists()


def test_the_credit_schedule_tiers():
    # served, calls, target -> rate
    assert credit_rate_ppm(999, 1000, 999_000) == 0
    assert credit_rate_ppm(998, 1000, 999_000) == 100_000
    assert credit_rate_ppm(989, 1000, 999_000) == 250_000
    assert credit_rate_ppm(949, 1000, 999_000) == 500_000
    assert credit_rate_ppm(0, 0, 999_000) == 0  # no calls: met
    # A tier applies only below the organization's own target.
    assert credit_rate_ppm(980, 1000, 970_000) == 0
    assert credit_rate_ppm(960, 1000, 970_000) == 250_000


def test_approval_needs_finance_a_finalized_invoice_and_the_own_organization(
    catalog, berlin, key, members, other_members, actor_for
):
    march_calls(key, ok=10, failed=1)
    invoice_draft(organization_id=berlin.pk, period=PERIOD)
    month = sla_evaluate(organization_id=berlin.pk, period=PERIOD, now=AFTER)
    with pytest.raises(PermissionDenied):
        sla_credit_approve(month_id=month.pk, actor=actor_for(members[Role.DEVELOPER]))
    with pytest.raises(NotFound):
        sla_credit_approve(month_id=month.pk, actor=actor_for(other_members[Role.FINANCE]))
    with pytest.raises(ValidationFailed) as exc:  # the invoice is still a draft
        sla_credit_approve(month_id=month.pk, actor=actor_for(members[Role.FINANCE]))
    assert "Finalize" in exc.value.message
    with pytest.raises(NotFound):
        sla_credit_dismiss(month_id=month.pk, actor=actor_for(other_members[Role.OWNER]))
    sla_credit_dismiss(month_id=month.pk, actor=actor_for(members[Role.FINANCE]))
    assert SlaMonth.objects.get(pk=month.pk).status == SlaStatus.DISMISSED
    assert not CreditNote.objects.exists()


def test_the_beat_runs_the_month_close_task(settings, catalog, berlin, key):
    from invoicing.tasks import sla_evaluate_closed as task

    march_calls(key, ok=3, failed=1)
    assert settings.CELERY_BEAT_SCHEDULE["invoicing-sla-evaluate"]["task"] == task.name
    # The task evaluates the month just ended (now): none of this test's March.
    assert isinstance(task.apply().get(), int)
    assert not SlaMonth.objects.filter(period=PERIOD).exists()


def test_a_month_over_its_p99_ttft_bound_is_credited_the_first_tier(
    catalog, berlin, key, members, actor_for
):
    SlaTarget.objects.create(organization=berlin, availability_ppm=999_000, ttft_p99_ms=1_000)
    base = datetime(2025, 3, 12, 9, tzinfo=UTC)
    ingest_events(
        [event(key, started_at=base + timedelta(minutes=i), ttft_us=3_000_000) for i in range(20)]
    )
    figures = sla_figures(berlin, PERIOD, now=AFTER)
    assert not figures.availability_breached and figures.ttft_breached
    assert abs(figures.ttft_p99_ms - 3_000) <= 30  # the sketches' 1 %
    invoice = _invoice(berlin)
    month = sla_evaluate(organization_id=berlin.pk, period=PERIOD, now=AFTER)
    assert (month.status, month.credit_rate_ppm) == (SlaStatus.DRAFTED, 100_000)
    note = sla_credit_approve(month_id=month.pk, actor=actor_for(members[Role.FINANCE]))
    assert note.amount == div_round(invoice.total * 100_000, PPM)
    assert note.lines.get().description.endswith(
        f", p99 TTFT {month.ttft_p99_ms} ms over the 1000 ms bound"
    )
    # Under the bound: met.
    SlaTarget.objects.filter(organization=berlin).update(ttft_p99_ms=5_000)
    assert not sla_figures(berlin, PERIOD, now=AFTER).breached
