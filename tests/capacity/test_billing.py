"""A load test marked as a test (not billed) against the real gateway: its
calls are recorded and rated, marked "test" in the call log, on no invoice
and debited from no prepaid balance, while its key's budget still holds; a
billed run next to it is billed as before.

Runs as in ``test_runs``: one-second steps created straight in the
database and run by the job function itself."""

from __future__ import annotations

import pytest
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone as tz

from accounts.models import ApiKey
from console.features.capacity.models import Billing, LoadTest, Status
from console.features.capacity.runner import run_load_test
from invoicing.models import LedgerKind
from invoicing.selectors import prepaid_balance
from invoicing.services import invoice_draft, ledger_entry_create
from invoicing.services._common import period_of
from usage.ingest import ingest_events
from usage.models import CallRecord, Grain, Rollup
from usage.spend import KEY as SPEND_BY_KEY
from usage.spend import spend_by_period_many

USD = 1_000_000


def _run(lab, *, billing, steps=(2,), budget=10 * USD, output_tokens=8) -> LoadTest:
    test = LoadTest.objects.create(
        organization=lab.org, started_by=lab.owner, model="sim-chat-small", input_tokens=64,
        output_tokens=output_tokens, prefix_share=50, steps=list(steps), step_seconds=1,
        budget=budget, billing=billing,
    )  # fmt: skip
    run_load_test(test.pk)
    test.refresh_from_db()
    assert test.status == Status.DONE, test.error
    return test


def _spent(test: LoadTest) -> int:
    return CallRecord.objects.filter(api_key_id=test.api_key_id).aggregate(s=Sum("cost"))["s"] or 0


def test_a_test_run_is_recorded_but_not_billed_and_a_billed_run_is(lab, client):
    # Given a prepaid organization with a balance
    lab.org.billing_mode = "prepaid"
    lab.org.save(update_fields=["billing_mode"])
    ledger_entry_create(
        organization_id=lab.org.pk, kind=LedgerKind.TOP_UP, amount=5 * USD, reference="top-up"
    )
    # When it runs one load test marked as a test and one billed, and the
    # gateway's events are ingested
    test_run = _run(lab, billing=Billing.TEST)
    billed_run = _run(lab, billing=Billing.BILLED)
    assert ApiKey.objects.get(pk=test_run.api_key_id).test_traffic is True
    assert ApiKey.objects.get(pk=billed_run.api_key_id).test_traffic is False
    ingest_events(list(lab.gateway.emitter.events))

    # Then every call of the test run is recorded as a test, rated normally ...
    test_calls = CallRecord.objects.filter(api_key_id=test_run.api_key_id)
    billed_calls = CallRecord.objects.filter(api_key_id=billed_run.api_key_id)
    assert test_calls.exists() and billed_calls.exists()
    assert set(test_calls.values_list("is_test", flat=True)) == {True}
    assert set(billed_calls.values_list("is_test", flat=True)) == {False}
    test_cost, billed_cost = _spent(test_run), _spent(billed_run)
    assert test_cost > 0 and billed_cost > 0
    # ... the prepaid balance pays for the billed run's calls only ...
    assert prepaid_balance(lab.org.pk) == 5 * USD - billed_cost
    # ... and the month's invoice holds the billed calls only, to the micro-unit.
    invoice = invoice_draft(organization_id=lab.org.pk, period=period_of(tz.now(), "UTC"))
    assert invoice.usage_amount == billed_cost
    assert sum(ln.amount for ln in invoice.lines.filter(kind="usage")) == billed_cost
    assert invoice.calls == billed_calls.count()
    # The spend analytics agree with the invoice (the rollups hold the billed
    # run only), while the test run's key still spent its cost: its budget.
    org_rows = Rollup.objects.filter(organization_id=lab.org.pk, grain=Grain.ORG)
    assert org_rows.aggregate(s=Sum("cost"))["s"] == billed_cost
    spent = spend_by_period_many(
        organization_id=lab.org.pk, grain=SPEND_BY_KEY, periods={},
        idents=[test_run.api_key_id, billed_run.api_key_id],
    )  # fmt: skip
    assert (spent[test_run.api_key_id]["life"], spent[billed_run.api_key_id]["life"]) == (
        test_cost,
        billed_cost,
    )

    # The call log marks the test run's calls "test", and only those.
    client.force_login(lab.owner.user)
    for call, marked in ((test_calls.first(), True), (billed_calls.first(), False)):
        page = client.get(reverse("usage:calls"), {"request_id": call.request_id})
        assert page.status_code == 200
        row = page.content.decode().split(f'id="call-{call.request_id}"', 1)[1].split("</tr>")[0]
        assert ('class="badge test-call"' in row) is marked
    detail = client.get(reverse("usage:call_detail", args=[test_calls.first().request_id]))
    assert 'id="call-is-test"' in detail.content.decode()
    # The key's page says what the key is.
    key_page = client.get(reverse("accounts:api_key_detail", args=[test_run.api_key_id]))
    assert "Load test key — calls not billed" in key_page.content.decode()


@pytest.mark.parametrize("billing", [Billing.TEST, Billing.BILLED])
def test_the_budget_holds_billed_or_not(lab, billing):
    # A few calls' worth: the run key's lifetime cap stops its spend at the
    # budget, whether its calls are billed or not.
    budget = 400
    test = _run(lab, billing=billing, steps=(4, 8), budget=budget, output_tokens=64)
    ingest_events(list(lab.gateway.emitter.events))
    assert 0 < _spent(test) <= budget
    steps = list(test.results.order_by("index"))
    assert steps[-1].error_rate > 0.5  # refused at the cap
