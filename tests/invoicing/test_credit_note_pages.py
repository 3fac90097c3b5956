"""The finance console's credit notes: by amount, by line, in full and for an
incident; errors on the form; none on a draft."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from accounts.models import Role
from console.kernel.money import format_amount
from invoicing.models import (
    CreditNote,
    InvoiceStatus,
    LineKind,
)
from tests.invoicing.pages import (
    as_member,
    follow_messages,
    html,
    preview_and_confirm,
)

pytestmark = pytest.mark.django_db


# --- credit notes ---------------------------------------------------------------------------------


def test_partial_credit_note_by_amount(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{finalized.pk}/credit-notes/new/"
    assert c.get(url).status_code == 200
    response = preview_and_confirm(
        c, url, {"mode": "amount", "amount": "0.50", "reason": "slow week"}
    )
    assert response.status_code == 302
    note = CreditNote.objects.get()
    assert (note.amount, note.amount_minor, note.reason) == (500_000, 50, "slow week")
    page = html(c.get(f"/billing/invoices/{finalized.pk}/"))
    assert note.number in page and "slow week" in page
    pdf = c.get(reverse("invoicing:credit_note_pdf", args=[note.pk]))
    assert pdf["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF")
    assert f'filename="{note.number}.pdf"' in pdf["Content-Disposition"]


def test_credit_note_errors_are_on_the_form(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{finalized.pk}/credit-notes/new/"
    over = f"{(finalized.total + 1_000_000) // 1_000_000}"
    cases = [
        ({"mode": "amount", "amount": over, "reason": "x"}, "more than the 5.907911 USD left"),
        ({"mode": "amount", "amount": "", "reason": "x"}, "Enter the amount to credit"),
        ({"mode": "amount", "amount": "abc", "reason": "x"}, "is not an amount"),
        ({"mode": "amount", "amount": "-3", "reason": "x"}, "positive amount"),
        ({"mode": "amount", "amount": "1", "reason": " "}, "This field is required"),
        ({"mode": "lines", "reason": "x"}, "at least one line"),
        ({"mode": "weird", "reason": "x"}, "Select a valid choice"),
    ]
    for data, message in cases:
        response = c.post(url, data)
        assert response.status_code == 200, data
        assert message in html(response), data
    assert not CreditNote.objects.exists()


def test_credit_note_by_line_and_full(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{finalized.pk}/credit-notes/new/"
    line = finalized.lines.filter(kind=LineKind.USAGE).order_by("position").first()
    page = html(c.get(url))
    assert f'name="line_{line.pk}"' in page
    too_much = f"{line.amount + 1}e-6"  # one micro-unit more than the line
    response = c.post(url, {"mode": "lines", f"line_{line.pk}": too_much, "reason": "x"})
    assert response.status_code == 200 and "Credit at most" in html(response)
    assert f"{format_amount(line.amount, 'USD', exact=True)} on this line" in html(
        response
    )  # money, not micro
    data = {"mode": "lines", f"line_{line.pk}": "0.01", "reason": "bad line"}
    response = preview_and_confirm(c, url, data)
    assert response.status_code == 302
    note = CreditNote.objects.get()
    assert note.lines.filter(invoice_line=line, amount=10_000).exists()
    response = preview_and_confirm(c, url, {"mode": "full", "reason": "everything"})
    assert response.status_code == 302
    finalized.refresh_from_db()
    assert finalized.credited == finalized.total and finalized.status == InvoiceStatus.PAID
    response = c.post(url, {"mode": "full", "reason": "once more"})
    assert response.status_code == 200 and "must credit something" in html(response)


def test_a_draft_takes_no_credit_note(client, members, draft):
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{draft.pk}/credit-notes/new/"
    response = c.post(url, {"mode": "amount", "amount": "1", "reason": "x"})
    assert response.status_code == 200 and "draft invoice takes no credit note" in html(response)
    assert 'id="credit-note-link"' not in html(c.get(f"/billing/invoices/{draft.pk}/"))


def test_incident_credit(client, members, org, key, catalog):
    from invoicing.services import invoice_draft, invoice_finalize
    from tests.inference_node.factories import NodeFactory
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    org.timezone = "Europe/Berlin"
    org.save(update_fields=["timezone"])
    node = NodeFactory(organization=org, name="gpu-flaky")
    t = datetime(2025, 6, 10, 12, tzinfo=UTC)
    bad = [event(key, started_at=t, node_id=node.pk, status_code=503) for _ in range(2)]
    ok = [event(key, started_at=t, node_id=node.pk)]
    ingest_events(bad + ok)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-06").pk
    )
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{invoice.pk}/incident-credit/"
    page = html(c.get(url))
    assert "gpu-flaky" in page
    data = {"node": node.pk, "start": "2025-06-10T13:00", "end": "2025-06-10T15:00",
            "status_class": "5xx", "reason": "gpu-flaky outage"}  # fmt: skip
    response = c.post(url, {**data, "start": "0001-01-01T00:00"})
    assert response.status_code == 200 and "between the years" in html(response)
    response = c.post(url, {**data, "end": "2025-06-10T12:00"})
    assert response.status_code == 200 and "end after it starts" in html(response)
    response = preview_and_confirm(c, url, data)
    assert response.status_code == 302
    assert "2 calls" in follow_messages(c, response)
    note = CreditNote.objects.get()
    assert sorted(note.lines.get().request_ids) == sorted(e["request_id"] for e in bad)
    # The window was typed in Berlin time (UTC+2 in June); the note says UTC.
    assert "2025-06-10 11:00 to 2025-06-10 13:00 UTC" in note.lines.get().description
    # The same incident again: nothing left to credit, said on the form.
    response = c.post(url, data)
    assert response.status_code == 200 and "No uncredited calls" in html(response)
