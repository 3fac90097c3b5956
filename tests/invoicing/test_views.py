"""The finance console: who may open it (finance, owners, admins), the
invoice list with its preview and filters, the invoice page and its
actions through the services (errors on the form or as messages, never a
500), PDFs, credit notes (full, amount, lines, incident), the balance and
ledger with adjustments and settings, top-ups with Stripe on and off, and
another organization's ids unreachable on every route."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import SimpleNamespace
from unittest import mock

import pytest
from django.urls import reverse

from accounts.models import AuditEvent, Role
from invoicing.models import (
    BillingProfile,
    CardSetup,
    CreditNote,
    Invoice,
    InvoiceStatus,
    LedgerEntry,
    LedgerKind,
    LineKind,
    Payment,
    PaymentStatus,
)
from invoicing.selectors import prepaid_balance

pytestmark = pytest.mark.django_db

# Read by tests/test_route_isolation.py: the object routes this module (and
# test_api.py, for the API ones) prove unreachable from another organization.
CONSOLE_OBJECT_ROUTES = {
    "invoicing:invoice_detail": lambda o: [o.invoice.pk],
    "invoicing:invoice_refresh": lambda o: [o.invoice.pk],
    "invoicing:invoice_finalize": lambda o: [o.invoice.pk],
    "invoicing:invoice_void": lambda o: [o.invoice.pk],
    "invoicing:invoice_uncollectible": lambda o: [o.invoice.pk],
    "invoicing:invoice_payment": lambda o: [o.invoice.pk],
    "invoicing:invoice_pay": lambda o: [o.invoice.pk],
    "invoicing:invoice_print": lambda o: [o.invoice.pk],
    "invoicing:invoice_pdf": lambda o: [o.invoice.pk],
    "invoicing:credit_note_create": lambda o: [o.invoice.pk],
    "invoicing:incident_credit": lambda o: [o.invoice.pk],
    "invoicing:credit_note_pdf": lambda o: [o.note.pk],
}
API_OBJECT_ROUTES = {
    "invoice-detail",
    "invoice-refresh",
    "invoice-finalize",
    "invoice-void",
    "invoice-mark-uncollectible",
    "invoice-payments",
    "credit-note-detail",
}
ISOLATED_ROUTES = set(CONSOLE_OBJECT_ROUTES) | API_OBJECT_ROUTES

BILLING_ROLES = [Role.OWNER, Role.ADMIN, Role.FINANCE]
OTHER_ROLES = [Role.DEVELOPER, Role.VIEWER]
PAGES = [
    "invoicing:invoices",
    "invoicing:invoice_list",
    "invoicing:balance",
    "invoicing:topup",
    "invoicing:payment_method",
    "invoicing:export_invoices",
    "invoicing:export_invoice_lines",
    "invoicing:export_credit_notes",
    "invoicing:export_payments",
    "invoicing:export_ledger",
]


def as_member(client, membership):
    client.force_login(membership.user)
    return client


def html(response) -> str:
    return response.content.decode()


def follow_messages(client, response) -> str:
    assert response.status_code == 302, response.status_code
    return html(client.get(response.url))


# --- who may open what ------------------------------------------------------------------


@pytest.mark.parametrize("role", BILLING_ROLES)
def test_billing_roles_open_every_page(client, members, finalized, role):
    c = as_member(client, members[role])
    for name in PAGES:
        assert c.get(reverse(name)).status_code == 200, name
    for name in ("invoice_detail", "invoice_print", "invoice_pdf"):
        response = c.get(reverse(f"invoicing:{name}", args=[finalized.pk]))
        assert response.status_code == 200, name
    assert 'href="/billing/invoices/"' in html(c.get("/"))  # the nav entry


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_developers_and_viewers_are_refused_everywhere(client, members, finalized, role):
    c = as_member(client, members[role])
    for name in PAGES:
        assert c.get(reverse(name)).status_code == 403, name
    for name in CONSOLE_OBJECT_ROUTES:
        if name == "invoicing:credit_note_pdf":
            continue
        url = reverse(name, args=[finalized.pk])
        assert c.get(url).status_code in (403, 405), name
        assert c.post(url, {"reason": "x", "reference": "x"}).status_code in (403, 405), name
    assert c.post(reverse("invoicing:balance_adjust"), {}).status_code == 403
    assert c.post(reverse("invoicing:billing_settings"), {}).status_code == 403
    assert c.post(reverse("invoicing:invoice_list"), {"period": "2025-04"}).status_code == 403
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.FINALIZED
    assert "Billing</a>" not in html(c.get("/"))


def test_anonymous_is_sent_to_login(client, finalized):
    for name in PAGES:
        response = client.get(reverse(name))
        assert response.status_code == 302 and "/login/" in response.url, name
    response = client.get(reverse("invoicing:invoice_pdf", args=[finalized.pk]))
    assert response.status_code == 302 and "/login/" in response.url


# --- the invoice list ----------------------------------------------------------------------


def test_list_shows_invoices_and_the_running_months_preview(client, members, finalized, key):
    # Given a call in the running month
    from django.utils import timezone

    from tests.usage.factories import event
    from usage.ingest import ingest_events

    ingest_events([event(key, started_at=timezone.now(), input_tokens=4_000_000)])
    response = as_member(client, members[Role.FINANCE]).get("/billing/invoices/")
    page = html(response)
    assert response.status_code == 200
    assert finalized.number in page and "2025-03" in page
    assert 'id="preview"' in page and "This month so far" in page
    assert "sim-chat-small" in page[page.index('id="preview"') : page.index('id="invoice-filters"')]
    for export in ("invoices", "invoice-lines", "credit-notes", "payments", "ledger"):
        assert f'id="export-{export}"' in page


def test_list_filters_by_period_and_status(client, members, finalized, other_billing):
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get("/billing/invoices/", {"period": "2025-03", "status": "finalized"}))
    assert finalized.number in page
    assert other_billing.invoice.number not in page  # never another org's
    assert finalized.number not in html(c.get("/billing/invoices/", {"status": "paid"}))
    assert finalized.number not in html(c.get("/billing/invoices/", {"period": "2025-04"}))
    # The export links carry the filters.
    assert "/billing/exports/invoices.csv?period=2025-03&amp;status=finalized" in page


def test_bad_filters_are_form_errors(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    response = c.get("/billing/invoices/", {"period": "March", "status": "bogus"})
    page = html(response)
    assert response.status_code == 200
    assert "YYYY-MM" in page and 'id="field-period"' in page
    assert "Select a valid choice" in page
    assert finalized.number not in page


def test_htmx_filter_returns_just_the_table(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    response = c.get("/billing/invoices/", {"period": "2025-03"}, HTTP_HX_REQUEST="true")
    page = html(response)
    assert page.startswith('<div id="invoice-table">') and "<html" not in page
    assert finalized.number in page
    bad = html(c.get("/billing/invoices/", {"period": "March"}, HTTP_HX_REQUEST="true"))
    assert "Fix the filters" in bad and "YYYY-MM" in bad


def test_draft_a_month_from_the_list(client, members, org, month_calls):
    c = as_member(client, members[Role.FINANCE])
    response = c.post("/billing/invoices/", {"period": "2025-03"})
    invoice = Invoice.objects.get(organization=org, period="2025-03")
    assert response.status_code == 302 and response.url == f"/billing/invoices/{invoice.pk}/"
    assert invoice.status == InvoiceStatus.DRAFT and invoice.calls == 6
    for period in ("2025-13", "9999-12", "1999-12"):
        bad = c.post("/billing/invoices/", {"period": period})
        assert bad.status_code == 200 and "YYYY-MM" in html(bad)
    future = c.post("/billing/invoices/", {"period": "2999-01"})
    assert future.status_code == 200 and "has not started yet" in html(future)
    assert Invoice.objects.count() == 1


# --- the invoice page ----------------------------------------------------------------------------


def test_detail_shows_lines_totals_and_history(client, members, finalized):
    page = html(as_member(client, members[Role.FINANCE]).get(f"/billing/invoices/{finalized.pk}/"))
    lines = finalized.lines.filter(kind=LineKind.USAGE)
    for line in lines:
        row = page[page.index(f'data-line="{line.pk}"') :]
        row = row[: row.index("</tr>")]
        assert line.model in row
        assert f"{line.quantity:,}" in row  # tokens
        assert " USD" in row
    large_input = lines.get(model="sim-chat-large", token_class="input")
    row = page[page.index(f'data-line="{large_input.pk}"') :]
    assert "1.00 USD" in row[: row.index("</tr>")]  # per million tokens
    assert 'id="total"' in page and 'id="amount-due"' in page
    assert "Open;" in page  # payment status
    assert "finalized" in page and "drafted" in page  # history events
    assert 'id="credit-note-link"' in page and 'id="finalize"' not in page


def test_detail_shows_discount_tax_and_credits_applied_in_order(
    client, members, prepaid, month_calls
):
    from invoicing.services import invoice_draft

    BillingProfile.objects.create(
        organization=prepaid, tax_rate_ppm=190_000, invoice_discount_ppm=100_000
    )
    invoice = invoice_draft(organization_id=prepaid.pk, period="2025-03")
    page = html(as_member(client, members[Role.FINANCE]).get(f"/billing/invoices/{invoice.pk}/"))
    order = [
        page.index('id="subtotal"'),
        page.index('class="line-discount"'),
        page.index('class="line-tax"'),
        page.index('id="total"'),
        page.index('class="line-credits"'),
        page.index('id="amount-due"'),
    ]
    assert order == sorted(order)
    assert (
        "Discount 10 %" in page and "Tax 19 %" in page and "Paid from the prepaid balance" in page
    )
    assert "Credits applied" in page


def test_refresh_and_finalize_a_draft(client, members, draft, key):
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get(f"/billing/invoices/{draft.pk}/"))
    assert 'id="refresh"' in page and 'data-confirm="Finalize' in page
    # A new March call; the refresh picks it up.
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    ingest_events([event(key, started_at=datetime(2025, 3, 20, tzinfo=UTC))])
    text = follow_messages(c, c.post(f"/billing/invoices/{draft.pk}/refresh/"))
    assert "recomputed" in text
    draft.refresh_from_db()
    assert draft.calls == 7
    # Finalize: a confirmation page, then the POST.
    confirm = c.get(f"/billing/invoices/{draft.pk}/finalize/")
    assert confirm.status_code == 200 and "Finalize invoice" in html(confirm)
    text = follow_messages(c, c.post(f"/billing/invoices/{draft.pk}/finalize/"))
    draft.refresh_from_db()
    assert draft.status == InvoiceStatus.FINALIZED and draft.number in text
    assert AuditEvent.objects.filter(action="invoice.finalize").count() == 1
    # Again: a message, not a 500; refreshing a finalized invoice likewise.
    text = follow_messages(c, c.post(f"/billing/invoices/{draft.pk}/finalize/"))
    assert "already" in text
    text = follow_messages(c, c.post(f"/billing/invoices/{draft.pk}/refresh/"))
    assert "credit note" in text
    assert c.get(f"/billing/invoices/{draft.pk}/finalize/").status_code == 302


def test_the_running_month_cannot_be_finalized_yet(client, members, org, key):
    # Given a draft of the running month (drafted early, to review it)
    from django.utils import timezone

    from invoicing.services import invoice_draft
    from invoicing.services._common import period_of
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    ingest_events([event(key, started_at=timezone.now())])
    draft = invoice_draft(organization_id=org.pk, period=period_of(timezone.now(), org.timezone))
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get(f"/billing/invoices/{draft.pk}/"))
    assert 'id="finalize-blocker"' in page and "still collecting usage" in page
    # When finance posts the finalization anyway, then it is refused with the reason
    text = follow_messages(c, c.post(f"/billing/invoices/{draft.pk}/finalize/"))
    assert "still collecting usage" in text
    draft.refresh_from_db()
    assert draft.status == InvoiceStatus.DRAFT and draft.number is None


def test_void_needs_a_reason_and_refuses_what_the_service_refuses(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{finalized.pk}/void/"
    assert c.get(url).status_code == 200
    response = c.post(url, {"void-reason": "  "})
    assert response.status_code == 200 and "This field is required" in html(response)
    # Pay a cent: a paid-into invoice cannot be voided, and the form says why.
    c.post(f"/billing/invoices/{finalized.pk}/payment/", {"reference": "T-1", "amount": "0.01",
                                                          "method": "bank_transfer"})  # fmt: skip
    response = c.post(url, {"void-reason": "wrong customer"})
    assert response.status_code == 200 and "credit note" in html(response)
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.FINALIZED


def test_void_a_draft(client, members, draft):
    c = as_member(client, members[Role.ADMIN])
    response = c.post(f"/billing/invoices/{draft.pk}/void/", {"void-reason": "test month"})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.status == InvoiceStatus.VOID
    assert draft.events.filter(type="voided", params__reason="test month").exists()


def test_mark_uncollectible(client, members, finalized):
    c = as_member(client, members[Role.OWNER])
    url = f"/billing/invoices/{finalized.pk}/uncollectible/"
    response = c.post(url, {"uncollectible-reason": "customer vanished"})
    assert response.status_code == 302
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.UNCOLLECTIBLE
    response = c.post(url, {"uncollectible-reason": "twice"})
    assert response.status_code == 200 and "Only an open invoice" in html(response)


def test_record_a_manual_payment(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{finalized.pk}/payment/"
    due = finalized.amount_due_minor
    response = c.post(url, {"reference": "", "method": "bank_transfer"})
    assert response.status_code == 200 and "This field is required" in html(response)
    response = c.post(url, {"reference": "X", "amount": "1.005", "method": "bank_transfer"})
    assert response.status_code == 200 and "at most 2 decimal places" in html(response)
    too_much = f"{(due + 1) // 100}.{(due + 1) % 100:02d}"
    response = c.post(url, {"reference": "X", "amount": too_much, "method": "bank_transfer"})
    assert response.status_code == 200 and "more than what is due (" in html(response)
    response = c.post(url, {"reference": "X", "amount": "1", "method": "stripe"})
    assert response.status_code == 200 and "Select a valid choice" in html(response)
    assert not Payment.objects.exists()
    response = c.post(url, {"reference": "BANK-2025-03", "method": "bank_transfer"})
    assert response.status_code == 302
    payment = Payment.objects.get()
    assert (payment.amount_minor, payment.reference, payment.status) == (
        due,
        "BANK-2025-03",
        PaymentStatus.SUCCEEDED,
    )
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.PAID
    page = html(c.get(f"/billing/invoices/{finalized.pk}/"))
    assert "BANK-2025-03" in page and "Paid on" in page


def test_pdf_and_printable_page(client, members, finalized, draft):
    c = as_member(client, members[Role.FINANCE])
    response = c.get(f"/billing/invoices/{finalized.pk}/pdf")
    assert response["Content-Type"] == "application/pdf"
    assert f'filename="{finalized.number}.pdf"' in response["Content-Disposition"]
    assert response.content.startswith(b"%PDF")
    assert response.content == bytes(Invoice.objects.get(pk=finalized.pk).pdf)
    printable = html(c.get(f"/billing/invoices/{finalized.pk}/print/"))
    assert f"Invoice {finalized.number}" in printable and "Bill to" in printable
    assert 'class="sidebar"' not in printable  # no console chrome to print


def test_draft_pdf_is_made_on_the_fly(client, members, org, month_calls):
    from invoicing.services import invoice_draft

    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    response = as_member(client, members[Role.FINANCE]).get(f"/billing/invoices/{draft.pk}/pdf")
    assert response.status_code == 200 and response.content.startswith(b"%PDF")
    assert "draft-2025-03" in response["Content-Disposition"]


# --- credit notes ---------------------------------------------------------------------------------


def test_partial_credit_note_by_amount(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{finalized.pk}/credit-notes/new/"
    assert c.get(url).status_code == 200
    response = c.post(url, {"mode": "amount", "amount": "0.50", "reason": "slow week"})
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
    from invoicing.money import micro_text

    assert f"{micro_text(line.amount, 'USD')} on this line" in html(response)  # money, not micro
    response = c.post(url, {"mode": "lines", f"line_{line.pk}": "0.01", "reason": "bad line"})
    assert response.status_code == 302
    note = CreditNote.objects.get()
    assert note.lines.filter(invoice_line=line, amount=10_000).exists()
    response = c.post(url, {"mode": "full", "reason": "everything"})
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
    response = c.post(url, data)
    assert response.status_code == 302
    assert "2 calls" in follow_messages(c, response)
    note = CreditNote.objects.get()
    assert sorted(note.lines.get().request_ids) == sorted(e["request_id"] for e in bad)
    # The window was typed in Berlin time (UTC+2 in June); the note says UTC.
    assert "2025-06-10 11:00 to 2025-06-10 13:00 UTC" in note.lines.get().description
    # The same incident again: nothing left to credit, said on the form.
    response = c.post(url, data)
    assert response.status_code == 200 and "No uncredited calls" in html(response)


# --- balance, ledger and settings ----------------------------------------------------------------------


def test_balance_is_the_sum_of_the_ledger_and_adjustments_need_a_reason(client, members, org):
    c = as_member(client, members[Role.FINANCE])
    url = reverse("invoicing:balance_adjust")
    form = html(c.get("/billing/balance/"))
    token = re.search(r'name="token" value="([^"]+)"', form).group(1)
    response = c.post(url, {"kind": "grant", "amount": "25", "reason": "", "token": token})
    assert response.status_code == 200 and "This field is required" in html(response)
    response = c.post(url, {"kind": "grant", "amount": "-5", "reason": "x", "token": token})
    assert response.status_code == 200 and "use an adjustment" in html(response)
    response = c.post(url, {"kind": "grant", "amount": "1e", "reason": "x", "token": token})
    assert response.status_code == 200 and "is not an amount" in html(response)
    response = c.post(url, {"kind": "usage", "amount": "5", "reason": "x", "token": token})
    assert response.status_code == 200
    ok = {"kind": "grant", "amount": "25", "reason": "bank transfer TR-9", "token": token}
    assert c.post(url, ok).status_code == 302
    assert c.post(url, ok).status_code == 302  # a double submit is one entry
    data = {**ok, "kind": "adjustment", "amount": "-2.5", "reason": "correction"}
    assert c.post(url, {**data, "token": "5d1c1f0e-8a7b-4c3d-9e2f-1a2b3c4d5e6f"}).status_code == 302
    assert LedgerEntry.objects.filter(organization=org).count() == 2
    assert prepaid_balance(org.pk) == 22_500_000
    page = html(c.get("/billing/balance/"))
    assert "22.50 USD" in page and "bank transfer TR-9" in page and "correction" in page
    assert AuditEvent.objects.filter(action="ledger.grant").count() == 1


def test_ledger_pages_by_keyset(client, members, org):
    from invoicing.services import ledger_entry_create

    for i in range(55):
        ledger_entry_create(
            organization_id=org.pk, kind=LedgerKind.USAGE, amount=-1000 - i, reference=f"r{i}"
        )
    c = as_member(client, members[Role.FINANCE])
    first = html(c.get("/billing/balance/"))
    assert first.count("data-entry=") == 50
    older = re.search(r'id="older" href="\?before=(\d+)"', first).group(1)
    second = html(c.get("/billing/balance/", {"before": older}))
    assert second.count("data-entry=") == 5 and 'id="older"' not in second
    assert c.get("/billing/balance/", {"before": "nonsense"}).status_code == 200


def test_billing_settings(client, members, org):
    c = as_member(client, members[Role.FINANCE])
    url = reverse("invoicing:billing_settings")
    response = c.post(url, {"low_balance_threshold": "1e30"})
    assert response.status_code == 200 and "too large" in html(response)
    response = c.post(url, {"billing_email": "not-an-email", "low_balance_threshold": "x"})
    assert response.status_code == 200
    assert "valid email" in html(response) and "is not an amount" in html(response)
    data = {"legal_name": "Acme GmbH", "address": "Street 1\nBerlin", "tax_id": "DE123",
            "billing_email": "ap@acme.test", "low_balance_threshold": "10.5"}  # fmt: skip
    assert c.post(url, data).status_code == 302
    profile = BillingProfile.objects.get(organization=org)
    assert profile.low_balance_threshold == 10_500_000 and profile.legal_name == "Acme GmbH"
    assert AuditEvent.objects.filter(action="billing_profile.update").count() == 1
    page = html(c.get("/billing/balance/"))
    assert "below 10.50 USD" in page and 'value="Acme GmbH"' in page
    assert c.post(url, {**data, "low_balance_threshold": ""}).status_code == 302
    profile.refresh_from_db()
    assert profile.low_balance_threshold is None


# --- top-ups ---------------------------------------------------------------------------------------


def test_topup_without_stripe_says_finance_records_it(client, members, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get("/billing/top-up/"))
    assert "recorded by finance by hand" in page and 'id="topup-form"' not in page
    response = c.post("/billing/top-up/", {"amount": "50"})
    assert response.status_code == 302
    assert not Payment.objects.exists() and not LedgerEntry.objects.exists()


VISA = SimpleNamespace(id="pm_1", brand="visa", last4="4242", exp_month=12, exp_year=2034)


def test_topup_with_stripe_creates_a_pending_payment(client, members, org, settings):
    settings.STRIPE_SECRET_KEY = "sk_test_x"
    c = as_member(client, members[Role.FINANCE])
    created = []

    def fake_topup_charge_card(*, actor, amount_minor, request_key):
        payment = Payment.objects.create(
            organization_id=actor.organization_id, kind="top_up", method="stripe",
            currency="USD", amount_minor=amount_minor, stripe_payment_intent_id="pi_1",
            request_key=request_key,
        )  # fmt: skip
        payment.client_secret = "pi_1_secret_abc"
        payment.requires_action = True
        created.append(amount_minor)
        return payment

    with (
        mock.patch("invoicing.selectors.card_on_file", return_value=VISA),
        mock.patch("invoicing.services.topup_charge_card", fake_topup_charge_card),
    ):
        page = html(c.get("/billing/top-up/"))
        assert 'id="topup-form"' in page and "Visa •••• 4242" in page
        key = re.search(r'name="request_key" value="([^"]+)"', page).group(1)
        bad = c.post("/billing/top-up/", {"action": "card", "amount": "12.345"})
        assert bad.status_code == 200 and "at most 2 decimal places" in html(bad)
        big = c.post("/billing/top-up/", {"action": "card", "amount": "100000.01"})
        assert big.status_code == 200 and "at most 100,000 USD" in html(big)
        response = c.post(
            "/billing/top-up/", {"action": "card", "amount": "50", "request_key": key}
        )
    page = html(response)
    assert response.status_code == 200 and created == [5000]
    assert Payment.objects.get().request_key == key
    assert 'id="topup-status"' in page and "Pending" in page
    assert "balance rises when the payment succeeds" in page
    # 3-D Secure: the page gets the client secret and Stripe.js (from the setting) to finish it.
    assert 'data-client-secret="pi_1_secret_abc"' in page and "data-confirm-payment" in page
    assert f'<script src="{settings.STRIPE_JS_URL}">' in page
    assert prepaid_balance(org.pk) == 0  # nothing until Stripe says it succeeded
    # The page polls the payment's status while it is pending.
    payment = Payment.objects.get()
    assert f'hx-get="/billing/top-up/?payment={payment.pk}"' in page
    poll = html(c.get("/billing/top-up/", {"payment": payment.pk}, HTTP_HX_REQUEST="true"))
    assert "Pending" in poll and 'hx-trigger="every 3s"' in poll
    assert 'id="balance" hx-swap-oob="true"' in poll  # the balance follows the poll
    Payment.objects.filter(pk=payment.pk).update(status=PaymentStatus.SUCCEEDED)
    poll = html(c.get("/billing/top-up/", {"payment": payment.pk}))
    assert "Succeeded" in poll and "hx-trigger" not in poll
    assert c.get("/billing/top-up/", {"payment": "x"}).status_code == 404


def test_topup_without_a_card_on_file_links_to_the_payment_method_page(client, members, settings):
    settings.STRIPE_SECRET_KEY = "sk_test_x"
    c = as_member(client, members[Role.FINANCE])
    with mock.patch("invoicing.selectors.card_on_file", return_value=None):
        page = html(c.get("/billing/top-up/"))
    assert 'id="topup-form"' not in page and 'id="topup-no-card"' in page
    assert 'href="/billing/payment-method/"' in page and "add a card" in page
    assert "js.stripe.com" not in page  # Stripe.js only where a card is entered or confirmed


def test_topup_page_survives_stripe_being_down(client, members, settings):
    from invoicing.stripe_adapter import StripeUnavailable

    settings.STRIPE_SECRET_KEY = "sk_test_x"
    c = as_member(client, members[Role.FINANCE])
    down = StripeUnavailable("Stripe is unreachable just now: boom")
    with mock.patch("invoicing.selectors.card_on_file", side_effect=down):
        response = c.get("/billing/top-up/")
    assert response.status_code == 200
    assert "Stripe is unreachable just now" in html(response)
    assert 'id="topup-form"' not in html(response)


def test_topup_service_errors_are_on_the_form(client, members, settings):
    from accounts.errors import ValidationFailed

    settings.STRIPE_SECRET_KEY = "sk_test_x"

    def refuse(*, actor, amount_minor, request_key):
        raise ValidationFailed.from_fields({"amount": "A top-up is at least 5.00 USD."})

    with (
        mock.patch("invoicing.selectors.card_on_file", return_value=VISA),
        mock.patch("invoicing.services.topup_charge_card", refuse),
    ):
        response = as_member(client, members[Role.FINANCE]).post(
            "/billing/top-up/", {"action": "card", "amount": "1", "request_key": "k1"}
        )
    assert response.status_code == 200 and "at least 5.00 USD" in html(response)
    # The form comes back with a new one-time token.
    assert 'name="request_key" value="k1"' not in html(response)


def test_manual_bank_transfer_top_up(client, members, prepaid, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    assert 'id="manual-topup-form"' in html(c.get("/billing/top-up/"))
    data = {"action": "manual", "manual-amount": "40", "manual-reference": "TR-2025-77"}
    bad = c.post("/billing/top-up/", {**data, "manual-reference": " "})
    assert bad.status_code == 200 and "This field is required" in html(bad)
    assert c.post("/billing/top-up/", data).status_code == 302
    assert c.post("/billing/top-up/", data).status_code == 302  # the same transfer: once
    payment = Payment.objects.get()
    assert (payment.status, payment.amount_minor, payment.method) == (
        PaymentStatus.SUCCEEDED,
        4000,
        "bank_transfer",
    )
    assert prepaid_balance(prepaid.pk) == 40_000_000
    assert LedgerEntry.objects.get().kind == LedgerKind.TOP_UP
    assert "TR-2025-77" in html(c.get("/billing/top-up/"))


def test_postpaid_organizations_are_told_top_ups_are_for_prepaid(client, members, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    assert 'id="not-prepaid"' in html(c.get("/billing/top-up/"))
    data = {"action": "manual", "manual-amount": "40", "manual-reference": "TR-1"}
    response = c.post("/billing/top-up/", data)
    assert response.status_code == 200 and "Only prepaid organizations" in html(response)
    assert not Payment.objects.exists()


def test_card_top_up_against_localstripe(client, members, prepaid, stripe_on):
    # Given Stripe on (localstripe), a prepaid organization and no card on file
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get("/billing/top-up/"))
    assert 'id="topup-no-card"' in page and 'id="topup-form"' not in page
    refused = c.post("/billing/top-up/", {"action": "card", "amount": "25"})
    assert "No card on file" in html(refused) and not Payment.objects.exists()
    # When a card is on file and finance tops up 25.00 by card
    stripe_on.card_for(prepaid)
    page = html(c.get("/billing/top-up/"))
    assert 'id="topup-form"' in page and "Visa •••• 4242" in page
    key = re.search(r'name="request_key" value="([^"]+)"', page).group(1)
    response = c.post("/billing/top-up/", {"action": "card", "amount": "25", "request_key": key})
    page = html(response)
    # Then the card is charged (Stripe says succeeded), but no money until the webhook
    payment = Payment.objects.get()
    assert payment.status == PaymentStatus.PENDING and payment.amount_minor == 2500
    assert stripe_on.intent(payment.stripe_payment_intent_id)["status"] == "succeeded"
    assert 'id="topup-status"' in page and "Pending" in page
    assert "balance rises when the payment succeeds" in page
    assert "data-client-secret" not in page  # no 3-D Secure: nothing for Stripe.js to do
    assert prepaid_balance(prepaid.pk) == 0
    # The same form sent again (a double click) charges nothing more
    again = c.post("/billing/top-up/", {"action": "card", "amount": "25", "request_key": key})
    assert "submitted already" in html(again)
    assert Payment.objects.count() == 1 and len(stripe_on.payment_intents(prepaid)) == 1


# --- another organization ---------------------------------------------------------------------------


@pytest.mark.parametrize("route", sorted(CONSOLE_OBJECT_ROUTES))
@pytest.mark.parametrize("method", ["get", "post"])
def test_other_orgs_objects_are_not_found(client, members, other_billing, route, method):
    # Given Acme's owner, when they address Globex's invoice or credit note by id
    c = as_member(client, members[Role.OWNER])
    url = reverse(route, args=CONSOLE_OBJECT_ROUTES[route](other_billing))
    before = (
        Invoice.objects.get(pk=other_billing.invoice.pk).status,
        CreditNote.objects.count(),
        Payment.objects.count(),
    )
    data = {"reason": "x", "void-reason": "x", "uncollectible-reason": "x", "reference": "R",
            "mode": "full", "method": "bank_transfer"}  # fmt: skip
    response = getattr(c, method)(url, data)
    # Then it is not found (GET-only routes may refuse the method), and nothing changed
    assert response.status_code in (404, 405)
    assert b"GLOBEX" not in response.content and b"globex secret" not in response.content
    after = (
        Invoice.objects.get(pk=other_billing.invoice.pk).status,
        CreditNote.objects.count(),
        Payment.objects.count(),
    )
    assert after == before


def test_another_orgs_top_up_status_is_not_found(client, members, other_billing):
    top_up = Payment.objects.create(
        organization=other_billing.org, kind="top_up", method="stripe", currency="USD",
        amount_minor=100, reference="GLOBEX-TOPUP",
    )  # fmt: skip
    response = as_member(client, members[Role.FINANCE]).get(
        "/billing/top-up/", {"payment": top_up.pk}
    )
    assert response.status_code == 404 and b"GLOBEX" not in response.content


def test_lists_and_exports_never_show_another_org(client, members, finalized, other_billing):
    c = as_member(client, members[Role.OWNER])
    pages = [html(c.get(reverse(name))) for name in PAGES if "export" not in name]
    pages += [
        b"".join(c.get(reverse(name)).streaming_content).decode()
        for name in PAGES
        if "export" in name
    ]
    for page in pages:
        assert other_billing.invoice.number not in page
        assert "GLOBEX-REF-1" not in page and "globex grant" not in page
        assert "globex secret reason" not in page


# --- the card on file ---------------------------------------------------------------------------


def test_payment_method_page_saves_shows_and_removes_a_card(client, members, org, stripe_on):
    c = as_member(client, members[Role.FINANCE])
    # Given no card: the page says so and offers to add one, without Stripe.js yet
    page = html(c.get("/billing/payment-method/"))
    assert 'id="no-card"' in page and "Add a card…" in page
    assert "js.stripe.com" not in page and "cards.js" not in page
    # When the manager starts: a card form with the SetupIntent's secret and Stripe.js
    page = html(c.post("/billing/payment-method/", {"action": "start"}))
    setup = CardSetup.objects.get(organization=org)
    secret = re.search(r'data-client-secret="([^"]+)"', page).group(1)
    assert secret.startswith(f"{setup.stripe_setup_intent_id}_secret_")
    assert f'<script src="{stripe_on.settings.STRIPE_JS_URL}"></script>' in page
    assert "/static/js/cards.js" in page and 'data-publishable-key="pk_test_helper_stripe"' in page
    # and after Stripe.js confirmed the card, the page posts the SetupIntent id back
    stripe_on.confirm_setup(setup.stripe_setup_intent_id)
    response = c.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": setup.stripe_setup_intent_id},
    )
    page = follow_messages(c, response)
    # Then the card is on file, shown with brand, last 4 and expiry
    assert "Card saved" in page
    assert "Visa •••• 4242" in page and "expires 12/2034" in page
    assert "Replace the card…" in page and 'id="card-remove"' in page
    # and the manager can remove it
    page = follow_messages(c, c.post("/billing/payment-method/", {"action": "remove"}))
    assert "Card removed." in page and 'id="no-card"' in page


def test_a_declined_card_setup_is_a_message_not_an_error(client, members, org, stripe_on):
    c = as_member(client, members[Role.FINANCE])
    c.post("/billing/payment-method/", {"action": "start"})
    setup = CardSetup.objects.get(organization=org)
    with pytest.raises(Exception, match="declined"):
        stripe_on.confirm_setup(setup.stripe_setup_intent_id, number="4000000000000002")
    response = c.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": setup.stripe_setup_intent_id},
    )
    page = follow_messages(c, response)
    assert "The card was not saved" in page and 'id="no-card"' in page


def test_payment_method_page_with_stripe_off(client, members, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.OWNER])
    page = html(c.get("/billing/payment-method/"))
    assert "Card payments are not set up" in page and "bank transfer" in page
    assert 'id="card-start"' not in page and "js.stripe.com" not in page
    page = follow_messages(c, c.post("/billing/payment-method/", {"action": "start"}))
    assert "not set up" in page and not CardSetup.objects.exists()


def test_payment_method_page_with_stripe_down(client, members, org, stripe_on):
    from invoicing import stripe_adapter

    stripe_adapter.customer_ensure(organization_id=org.pk)
    stripe_on.outage()
    c = as_member(client, members[Role.ADMIN])
    response = c.get("/billing/payment-method/")
    assert response.status_code == 200
    assert "cannot be shown just now" in html(response) and "unreachable" in html(response)
    page = follow_messages(c, c.post("/billing/payment-method/", {"action": "start"}))
    assert "unreachable" in page and "data-client-secret" not in page


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_developers_and_viewers_cannot_change_the_card(client, members, org, stripe_on, role):
    c = as_member(client, members[role])
    for action in ("start", "remove", "confirm"):
        response = c.post("/billing/payment-method/", {"action": action, "setup_intent": "x"})
        assert response.status_code == 403
    assert not CardSetup.objects.exists()


def test_another_orgs_manager_cannot_see_or_use_the_card(
    client, members, other_members, org, stripe_on
):
    # Given Acme has a card on file and a SetupIntent in flight
    acme = as_member(client, members[Role.FINANCE])
    acme.post("/billing/payment-method/", {"action": "start"})
    saved = CardSetup.objects.get(organization=org)
    stripe_on.confirm_setup(saved.stripe_setup_intent_id, number="5555555555554444")
    acme.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": saved.stripe_setup_intent_id},
    )
    acme.post("/billing/payment-method/", {"action": "start"})
    waiting = CardSetup.objects.filter(organization=org).exclude(pk=saved.pk).get()
    acme.logout()
    # When Globex's owner opens its page and posts Acme's SetupIntent id
    globex = as_member(client, other_members[Role.OWNER])
    page = html(globex.get("/billing/payment-method/"))
    assert "4444" not in page and 'id="no-card"' in page
    response = globex.post(
        "/billing/payment-method/",
        {"action": "confirm", "setup_intent": waiting.stripe_setup_intent_id},
    )
    # Then it is not found, and nothing changed
    assert response.status_code == 404
    assert CardSetup.objects.get(pk=waiting.pk).status == "pending"
    assert waiting.stripe_setup_intent_id not in html(response)
    assert "4444" not in html(globex.get("/billing/top-up/"))
    # Removing "its" card does not touch Acme's
    globex.post("/billing/payment-method/", {"action": "remove"})
    globex.logout()
    assert "•••• 4444" in html(
        as_member(client, members[Role.FINANCE]).get("/billing/payment-method/")
    )


# --- paying an invoice now ----------------------------------------------------------------------


def test_pay_now_charges_once_on_a_double_click(client, members, card_invoice, stripe_on):
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get(f"/billing/invoices/{card_invoice.pk}/"))
    assert 'id="pay-now"' in page and "Pay now with the card on file" in page
    assert "js.stripe.com" not in page  # no Stripe.js until the bank asks for the cardholder
    url = f"/billing/invoices/{card_invoice.pk}/pay/"
    first = follow_messages(c, c.post(url))
    assert "Paid with the card on file." in first
    second = follow_messages(c, c.post(url))
    assert "nothing to pay" in second
    card_invoice.refresh_from_db()
    assert card_invoice.status == InvoiceStatus.PAID
    assert Payment.objects.filter(invoice=card_invoice).count() == 1
    assert len(stripe_on.payment_intents(card_invoice.organization)) == 1
    assert 'id="pay-now"' not in html(c.get(f"/billing/invoices/{card_invoice.pk}/"))


def test_pay_now_without_a_card_links_to_the_payment_method_page(
    client, members, finalized, stripe_on
):
    c = as_member(client, members[Role.OWNER])
    page = follow_messages(c, c.post(f"/billing/invoices/{finalized.pk}/pay/"))
    assert 'No card on file: <a href="/billing/payment-method/">add a card</a>' in page
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.FINALIZED


def test_pay_now_declined_is_a_message(client, members, org, month_calls, stripe_on):
    from invoicing.services import invoice_draft, invoice_finalize

    stripe_on.card_for(org, number="4000000000000341")
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    c = as_member(client, members[Role.FINANCE])
    page = follow_messages(c, c.post(f"/billing/invoices/{invoice.pk}/pay/"))
    assert "The card was not charged" in page and "declined" in page.lower()


def test_pay_now_needing_3d_secure_is_finished_on_the_page(
    client, members, card_invoice, stripe_on
):
    stripe_on.card_for(card_invoice.organization, number="4000002500003155")
    c = as_member(client, members[Role.FINANCE])
    response = c.post(f"/billing/invoices/{card_invoice.pk}/pay/")
    assert response.status_code == 302 and response.url.endswith("?authenticate=1")
    page = html(c.get(response.url))
    pi = Payment.objects.get(invoice=card_invoice).stripe_payment_intent_id
    assert f'data-client-secret="{pi}_secret_' in page and "data-confirm-payment" in page
    assert f'<script src="{stripe_on.settings.STRIPE_JS_URL}"></script>' in page


def test_pay_now_is_not_offered_while_stripe_is_off(client, members, finalized, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    assert 'id="pay-now"' not in html(c.get(f"/billing/invoices/{finalized.pk}/"))
    page = follow_messages(c, c.post(f"/billing/invoices/{finalized.pk}/pay/"))
    assert "bank transfer" in page
    assert not Payment.objects.filter(invoice=finalized).exists()


# --- a form posted twice is one entry; settings save through the service --------------


def test_the_balance_form_posted_twice_with_its_token_is_one_entry(client, members, org):
    import uuid

    from invoicing.models import LedgerEntry

    c = as_member(client, members[Role.FINANCE])
    form = {"kind": "grant", "amount": "12.50", "reason": "gift", "token": str(uuid.uuid4())}
    assert c.post("/billing/balance/adjust/", form).status_code == 302
    assert c.post("/billing/balance/adjust/", form).status_code == 302
    assert LedgerEntry.objects.filter(organization=org).count() == 1


def test_the_settings_form_saves_through_the_service(client, members, org):
    from unittest import mock

    from invoicing.services import billing_profile

    c = as_member(client, members[Role.FINANCE])
    with (
        mock.patch.object(
            billing_profile, "billing_profile_update", wraps=billing_profile.billing_profile_update
        ) as update,
        mock.patch("invoicing.services.billing_profile_update", update),
    ):
        response = c.post("/billing/settings/", {"legal_name": "Acme SE", "tax_id": "DE1"})
    assert response.status_code == 302
    assert update.call_count == 1
    assert update.call_args.kwargs["legal_name"] == "Acme SE"
    assert org.billing_profile.tax_id == "DE1"
