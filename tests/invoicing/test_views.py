"""The finance console: who may open it (finance, owners, admins), the
invoice list with its preview and filters, the invoice page and its
actions through the services (errors on the form or as messages, never a
500), and PDFs, and another organization's ids unreachable on every route. Credit
notes, the balance and top-ups, and the card on file have page tests of their
own (``test_credit_note_pages``, ``test_balance_pages``, ``test_card_pages``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from accounts.models import AuditEvent, Role
from invoicing.models import (
    BillingProfile,
    CreditNote,
    Invoice,
    InvoiceStatus,
    LineKind,
    Payment,
    PaymentStatus,
)
from tests.invoicing.pages import (
    BILLING_ROLES,
    OTHER_ROLES,
    as_member,
    follow_messages,
    html,
)

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
    "invoicing:refund_mark_paid": lambda o: [o.refund.pk],
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
    # The list comes first; the preview is a summary line (the lines folded) below it.
    assert page.index('id="invoices"') < page.index('id="preview"')
    assert "sim-chat-small" in page[page.index('id="preview"') : page.index("</details>")]
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
