"""On PostgreSQL, with real concurrent transactions: one bank transfer
submitted twice at once (the same invoice, or two invoices of the
organization) is recorded once; the other submission is told the reference
is already recorded."""

from __future__ import annotations

import pytest
from django.db import connection

from accounts.actors import Actor
from accounts.errors import ValidationFailed
from accounts.models import Role
from invoicing.models import Invoice, Payment
from invoicing.services import invoice_draft, invoice_finalize, invoice_mark_paid
from tests.factories import MembershipFactory
from tests.invoicing.conftest import bill_month
from tests.invoicing.test_concurrency_pg import _in_threads
from tests.services import require

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgres():
    require(connection.vendor == "postgresql", "needs PostgreSQL (set DATABASE_URL)")


def _invoices(org, api_key, periods) -> list[Invoice]:
    from datetime import UTC, datetime

    out = []
    for period in periods:
        year, month = map(int, period.split("-"))
        bill_month(org, api_key, period_day=datetime(year, month, 15, 12, tzinfo=UTC))
        out.append(
            invoice_finalize(invoice_id=invoice_draft(organization_id=org.pk, period=period).pk)
        )
    return out


def _outcomes(results) -> tuple[list, list]:
    paid = [r for r in results if isinstance(r, Payment)]
    refused = [r for r in results if isinstance(r, ValidationFailed)]
    assert len(paid) + len(refused) == len(results), [repr(r) for r in results]
    return paid, refused


def test_one_reference_submitted_twice_at_once_for_one_invoice_is_one_payment(
    org, catalog, make_key
):
    (invoice,) = _invoices(org, make_key(org, "k"), ["2025-03"])
    finance = Actor(MembershipFactory(organization=org, role=Role.FINANCE))
    results = _in_threads(
        4,
        lambda i: invoice_mark_paid(
            invoice_id=invoice.pk, actor=finance, reference="TR-RACE", amount_minor=10
        ),
    )
    paid, refused = _outcomes(results)
    assert len(paid) == 1 and len(refused) == 3
    assert all("already recorded" in r.fields["reference"][0] for r in refused)
    invoice.refresh_from_db()
    assert invoice.paid_minor == 10
    assert Payment.objects.filter(reference="TR-RACE").count() == 1


def test_one_reference_submitted_at_once_for_two_invoices_is_one_payment(org, catalog, make_key):
    invoices = _invoices(org, make_key(org, "k"), ["2025-03", "2025-04"])
    finance = Actor(MembershipFactory(organization=org, role=Role.FINANCE))
    results = _in_threads(
        2,
        lambda i: invoice_mark_paid(
            invoice_id=invoices[i].pk, actor=finance, reference="TR-BOTH", amount_minor=10
        ),
    )
    paid, refused = _outcomes(results)
    assert len(paid) == 1 and len(refused) == 1, [repr(r) for r in results]
    assert "already recorded: an invoice payment" in refused[0].fields["reference"][0]
    assert sum(Invoice.objects.filter(pk__in=[i.pk for i in invoices]).values_list(
        "paid_minor", flat=True
    )) == 10  # fmt: skip
