"""The SLA ledger from real traffic: calls go through the real gateway to
the bundled simulator node, whose fault controls (``POST /admin/faults``)
make it answer 500s for a stretch of calls; the usage events the gateway
emitted are ingested. Once the month is over, its invoice is finalized and
the month evaluated: availability below the 99.9 % target, a drafted credit
equal to the schedule's share of the invoice total (computed here from the
call records), listing the failed calls; finance approves it on the SLA
page and the invoice's amount due falls by exactly the credit note.

The gateway stamps a call with the wall clock, so the calls land in the
running month; the month close then happens with the clock moved past the
month's end and the invoicing grace period (``django.utils.timezone.now``,
which the finalize rule and the services read), as it would in production
when the beat closes the month."""

from __future__ import annotations

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import pytest
from django.urls import reverse

from accounts.actors import Actor
from accounts.models import Role
from console.kernel.money import format_amount
from invoicing.models import CreditNote, SlaMonth, SlaStatus
from invoicing.services import invoice_draft, invoice_finalize
from invoicing.services._common import period_bounds, period_of
from invoicing.services.sla import credit_amount, sla_evaluate
from tests.factories import issue_key
from tests.gateway_bridge.harness import running_gateway
from tests.inference_node.factories import NodeFactory
from tests.invoicing.pages import as_member, follow_messages, html
from tests.simulator_faults import TOKEN, drive_replies, faults, simulator
from tests.usage.factories import PriceFactory
from usage.models import CallRecord, CatalogModel
from usage.prices import invalidate_price_book

pytestmark = pytest.mark.django_db(transaction=True)

TARGET = Fraction(999, 1000)  # the platform default, 99.9 %
# The conventional tiered service credit, as the SLA page states it:
# below 95 % half the invoice, below 99 % a quarter, below the target a tenth.
TIERS = ((Fraction(95, 100), Fraction(1, 2)), (Fraction(99, 100), Fraction(1, 4)))
FIRST_TIER = Fraction(1, 10)


@pytest.fixture(scope="module")
def sim():
    """A simulator of this module's own: its faults reach no other test."""
    with simulator() as node:
        yield node


@pytest.fixture
def traffic(sim, settings, tmp_path, catalog, org, owner):
    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_RETRY_BACKOFF_SECONDS = 0.001
    settings.GATEWAY_QUEUE_TIMEOUT = 2.0
    org.timezone = "Europe/Berlin"
    org.save(update_fields=["timezone"])
    # A negotiated price ($15 / $60 per million tokens): a month's bill in
    # cents, so the credit reaches the amount due.
    PriceFactory(
        model=CatalogModel.objects.get(name="sim-chat-small"),
        organization=org,
        input_per_mtok=15_000_000,
        output_per_mtok=60_000_000,
    )
    invalidate_price_book()
    _key, raw = issue_key(Actor(owner, "127.0.0.1"))
    NodeFactory(
        organization=None,
        name="sim-sla",
        base_url=sim.base_url,
        token=TOKEN,
        serves=[("sim-chat-small", "sim-chat-small", 8192)],
    )
    try:
        yield raw
    finally:
        faults(sim, fault_500_rate=0.0, spike_rate=0.0)


def expected_rate(served: int, calls: int) -> Fraction:
    availability = Fraction(served, calls)
    if availability >= TARGET:
        return Fraction(0)
    for below, rate in TIERS:
        if availability < below:
            return rate
    return FIRST_TIER


def test_a_simulator_outage_breaches_the_target_and_finance_approves_the_exact_credit(
    traffic, sim, org, members, client, monkeypatch, settings
):
    raw = traffic
    with running_gateway() as gw:
        before = drive_replies(gw, raw, 150)
        faults(sim, fault_500_rate=1.0)
        outage = drive_replies(gw, raw, 2)
        faults(sim, fault_500_rate=0.0)
        after = drive_replies(gw, raw, 97)
    assert {r.status for r in before + after} == {200}
    assert all(r.status >= 500 for r in outage), [r.status for r in outage]
    outage_ids = {r.request_id for r in outage}
    assert len(outage_ids) == 2 and "" not in outage_ids

    # The month the outage fell in (Berlin), from its call records.
    failed_at = CallRecord.objects.filter(request_id__in=outage_ids).values_list(
        "started_at", flat=True
    )
    period = period_of(min(failed_at), org.timezone)
    start, end = period_bounds(period, org.timezone)
    records = CallRecord.objects.filter(
        organization_id=org.pk, started_at__gte=start, started_at__lt=end
    )
    calls = records.count()
    failed = set(records.filter(status_code__gte=500).values_list("request_id", flat=True))
    assert failed == outage_ids  # every 5xx of the month is a simulator 500
    # All 249 calls, unless the run straddled the end of a month (then the
    # month's own share of them: the figures below are computed alike).
    assert calls <= 249
    served = calls - len(failed)
    assert Fraction(served, calls) < TARGET  # 247 / 249 = 99.19 %: the first tier
    rate = expected_rate(served, calls)
    assert rate > 0

    # The month ends; the grace period for late events passes.
    closed = end + timedelta(hours=settings.INVOICING_GRACE_HOURS, minutes=1)
    monkeypatch.setattr("django.utils.timezone.now", lambda: closed)
    invoice = invoice_finalize(invoice_id=invoice_draft(organization_id=org.pk, period=period).pk)
    assert invoice.total > 0
    expected = int(
        (Decimal(invoice.total) * Decimal(rate.numerator) / rate.denominator).quantize(
            Decimal(1), rounding=ROUND_HALF_UP
        )
    )
    # (The simulator answers every call alike: 247 calls of one cost, a total
    # ending in 5 micro-units, whose tenth is rounded half up.)
    assert expected > 0

    month = sla_evaluate(organization_id=org.pk, period=period, now=closed)
    assert month.status == SlaStatus.DRAFTED
    assert (month.calls, month.failed_calls) == (calls, len(failed))
    assert month.availability_ppm == served * 1_000_000 // calls
    assert month.availability_ppm < month.target_ppm == 999_000
    assert credit_amount(month, invoice) == expected  # the draft is the computed credit

    finance = members[Role.FINANCE]
    as_member(client, finance)
    sla_page = reverse("invoicing:sla")
    page = html(client.get(sla_page, {"period": period}))
    assert f'id="sla-failed">{len(failed)}<' in page and "below target" in page
    assert f'<span class="sla-credit">{format_amount(expected, invoice.currency)}' in page

    due_before = invoice.amount_due_minor
    done = follow_messages(
        client,
        client.post(reverse("invoicing:sla_decide"), {"month": month.pk, "action": "approve"}),
    )
    note = CreditNote.objects.get(invoice=invoice)
    assert f"Credit note {note.number} issued" in done
    assert note.amount == expected
    line = note.lines.get()
    assert set(line.request_ids) == outage_ids
    assert line.description.startswith(f"SLA credit {period}: availability ")
    assert line.description.endswith(f", {rate * 100} % of the invoice, 2 failed calls")
    invoice.refresh_from_db()
    assert due_before - invoice.amount_due_minor == note.amount_minor > 0
    assert invoice.credited == expected
    month.refresh_from_db()
    assert (month.status, month.credit_note_id, month.credit_amount) == (
        SlaStatus.APPROVED,
        note.pk,
        expected,
    )
    assert SlaMonth.objects.filter(organization=org).count() == 1
