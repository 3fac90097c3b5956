"""billing_reconcile: a clean month reports ok and exits 0; any difference
(a call missing from the invoice, a tampered line) is named and exits 1."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command

from invoicing.models import LineKind
from invoicing.services import (
    credit_note_create,
    invoice_draft,
    invoice_finalize,
    ledger_entry_create,
)
from tests.usage.factories import event
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db


def run(period: str) -> tuple[int, dict]:
    out = io.StringIO()
    try:
        call_command("billing_reconcile", period=period, stdout=out)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(out.getvalue())


def test_a_reconciled_month_exits_zero(org, month_calls):
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    credit_note_create(invoice_id=invoice.pk, amount=1234, reason="x")
    ledger_entry_create(organization_id=org.pk, kind="grant", amount=5, reference="g", reason="x")
    code, report = run("2025-03")
    assert code == 0, report
    (row,) = report["organizations"]
    assert row["usage_lines"] == row["call_costs"] > 0 and row["difference"] == 0
    assert row["credited"] == 1234 and row["ledger_balance"] == 5


def test_differences_are_named_and_exit_nonzero(org, month_calls, key):
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    # A late call for the closed month, and a line edited behind the service's back.
    ingest_events([event(key, started_at=datetime(2025, 3, 9, tzinfo=UTC))])
    line = invoice.lines.filter(kind=LineKind.USAGE).first()
    line.amount += 1
    line.save()
    code, report = run("2025-03")
    assert code == 1
    problems = report["organizations"][0]["problems"]
    assert any("usage lines" in p for p in problems)
    assert any("lines add up" in p for p in problems)
    assert report["ok"] is False


def test_uninvoiced_calls_are_a_difference(org, month_calls):
    code, report = run("2025-03")
    assert code == 1
    assert "on no invoice" in report["organizations"][0]["problems"][0]


def test_a_bad_period_is_a_usage_error(db):
    with pytest.raises(CommandError):
        call_command("billing_reconcile", period="2025-3", stdout=io.StringIO())
