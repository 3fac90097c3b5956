"""Manual ledger entries (``prepaid_adjust``): a grant submitted twice is one
entry, an explicit reference makes each submit its own or the same."""

from __future__ import annotations

from datetime import timedelta

import pytest

from accounts.models import AuditEvent, Role

pytestmark = pytest.mark.django_db


def test_a_double_submitted_adjustment_without_reference_is_one_entry(
    org, members, actor_for, notified
):
    from invoicing.models import LedgerEntry
    from invoicing.selectors import prepaid_balance
    from invoicing.services import prepaid_adjust

    finance = actor_for(members[Role.FINANCE])
    # Given the same grant submitted twice (a double click, a retried request)
    first = prepaid_adjust(actor=finance, amount=5_000_000, reason="goodwill", kind="grant")
    again = prepaid_adjust(actor=finance, amount=5_000_000, reason="goodwill ", kind="grant")
    # Then there is one entry, one audit event, one balance change
    assert again.pk == first.pk
    assert LedgerEntry.objects.filter(organization=org).count() == 1
    assert AuditEvent.objects.filter(action="ledger.grant").count() == 1
    assert prepaid_balance(org.pk) == 5_000_000
    # A different amount or reason is another entry
    prepaid_adjust(actor=finance, amount=6_000_000, reason="goodwill", kind="grant")
    prepaid_adjust(actor=finance, amount=5_000_000, reason="other", kind="grant")
    assert LedgerEntry.objects.filter(organization=org).count() == 3
    # and the same one again, once the repeat window has passed, is deliberate
    LedgerEntry.objects.update(created_at=first.created_at - timedelta(hours=1))
    prepaid_adjust(actor=finance, amount=5_000_000, reason="goodwill", kind="grant")
    assert LedgerEntry.objects.filter(organization=org).count() == 4


def test_an_explicit_reference_makes_each_submit_its_own_or_the_same(org, members, actor_for):
    from invoicing.models import LedgerEntry
    from invoicing.services import prepaid_adjust

    finance = actor_for(members[Role.FINANCE])
    a = prepaid_adjust(actor=finance, amount=1_000_000, reason="fix", reference="console:a")
    b = prepaid_adjust(actor=finance, amount=1_000_000, reason="fix", reference="console:b")
    a2 = prepaid_adjust(actor=finance, amount=1_000_000, reason="fix", reference="console:a")
    assert a.pk != b.pk and a2.pk == a.pk
    assert LedgerEntry.objects.filter(organization=org).count() == 2
