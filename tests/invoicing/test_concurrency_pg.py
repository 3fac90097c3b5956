"""On PostgreSQL, with real concurrent transactions (one connection per
thread): finalizations take distinct, gapless numbers; one invoice finalized
twice at once is numbered once; concurrent credit notes never exceed the
invoice total."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection, connections

from accounts.errors import Conflict, ValidationFailed
from accounts.models import ApiKey
from invoicing.models import CreditNote, InvoiceSequence
from invoicing.services import credit_note_create, invoice_draft, invoice_finalize
from tests.factories import OrganizationFactory
from tests.services import require
from tests.usage.factories import event
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgres():
    require(connection.vendor == "postgresql", "needs PostgreSQL (set DATABASE_URL)")


def _in_threads(n: int, work) -> list:
    """Run ``work(i)`` in ``n`` threads released together; results or exceptions."""
    barrier = threading.Barrier(n)
    out: list = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait()
            out[i] = work(i)
        except Exception as exc:  # collected for the assertions
            out[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def _drafts(catalog_, n: int):
    drafts = []
    for i in range(n):
        org = OrganizationFactory()
        key = ApiKey.objects.create(
            organization=org, name="k", public_id=f"c{i:012d}", secret_hash="0" * 64
        )
        ingest_events(
            [event(key, started_at=datetime(2025, 3, 3, tzinfo=UTC), input_tokens=5_000_000)]
        )
        drafts.append(invoice_draft(organization_id=org.pk, period="2025-03"))
    return drafts


def test_concurrent_finalizations_take_distinct_gapless_numbers(catalog):
    drafts = _drafts(catalog, 8)
    results = _in_threads(8, lambda i: invoice_finalize(invoice_id=drafts[i].pk).number)
    assert all(isinstance(r, str) for r in results), results
    year = datetime.now(UTC).year
    assert sorted(results) == [f"INV-{year}-{n:06d}" for n in range(1, 9)]
    assert InvoiceSequence.objects.get(year=year).last_number == 8


def test_one_invoice_finalized_twice_at_once_is_numbered_once(catalog):
    (draft,) = _drafts(catalog, 1)
    results = _in_threads(4, lambda i: invoice_finalize(invoice_id=draft.pk).number)
    numbers = [r for r in results if isinstance(r, str)]
    assert len(numbers) == 1
    assert all(isinstance(r, Conflict) for r in results if not isinstance(r, str))
    assert InvoiceSequence.objects.get().last_number == 1


def test_concurrent_credit_notes_stay_within_the_total(catalog):
    (draft,) = _drafts(catalog, 1)
    invoice = invoice_finalize(invoice_id=draft.pk)
    share = invoice.total * 3 // 10
    results = _in_threads(
        6, lambda i: credit_note_create(invoice_id=invoice.pk, amount=share, reason=f"t{i}").number
    )
    done = [r for r in results if isinstance(r, str)]
    assert len(done) == 3
    assert all(isinstance(r, ValidationFailed) for r in results if not isinstance(r, str))
    assert sorted(done) == [f"{invoice.number}-CN0{n}" for n in (1, 2, 3)]
    invoice.refresh_from_db()
    assert (
        invoice.credited
        == 3 * share
        == sum(CreditNote.objects.filter(invoice=invoice).values_list("amount", flat=True))
    )
