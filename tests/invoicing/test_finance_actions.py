"""Finance actions that must be safe: a payment reference is recorded once
per organization (form, API, database, migration), a payment has the day it
was made, credit notes are previewed and then confirmed (a changed invoice in
between is refused), a duplicate top-up says it changed nothing, a manual
refund is marked paid, the top-up page is for prepaid organizations only,
and the audit log says amounts in currency units."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from accounts.actors import Actor
from accounts.errors import PermissionDenied, ValidationFailed
from accounts.models import AuditEvent, BillingMode, Role
from console.kernel.money import format_amount
from invoicing.models import (
    CreditNote,
    CreditNoteEffect,
    Invoice,
    InvoiceStatus,
    Payment,
    PaymentStatus,
)
from invoicing.money import from_minor
from invoicing.selectors import prepaid_balance
from invoicing.services import (
    credit_note_create,
    invoice_mark_paid,
    prepaid_adjust,
    refund_mark_paid,
    topup_record_manual,
)
from tests.invoicing.pages import as_member, follow_messages, html

pytestmark = pytest.mark.django_db


def usd(minor: int) -> str:
    """How the console writes an amount of US cents (its one formatter)."""
    return format_amount(from_minor(minor, "USD"), "USD")


def payment_url(invoice) -> str:
    return f"/billing/invoices/{invoice.pk}/payment/"


def detail_url(invoice) -> str:
    return f"/billing/invoices/{invoice.pk}/"


def credit_url(invoice) -> str:
    return f"/billing/invoices/{invoice.pk}/credit-notes/new/"


def token_of(page: str) -> str:
    return re.search(r'name="confirm" value="([^"]+)"', page).group(1)


def text_of(page: str, element_id: str) -> str:
    """The text inside the element with ``element_id`` (tags dropped)."""
    m = re.search(rf'id="{element_id}"[^>]*>(.*?)</(dd|td|p|span|div)>', page, re.S)
    assert m, element_id
    return re.sub(r"<[^>]+>", "", m.group(1)).strip()


def berlin_today() -> date:
    """Today for Acme (Europe/Berlin, the ``month_calls`` fixture's zone)."""
    return datetime.now(ZoneInfo("Europe/Berlin")).date()


def issued_back(invoice, days: int = 30) -> Invoice:
    """Issued ``days`` ago, so earlier payment days are possible."""
    Invoice.objects.filter(pk=invoice.pk).update(issued_at=datetime.now(UTC) - timedelta(days=days))
    invoice.refresh_from_db()
    return invoice


# --- 1. payment references ------------------------------------------------------------


def test_a_payment_reference_is_recorded_once_in_an_organization(
    client, members, finalized, other_billing
):
    c = as_member(client, members[Role.FINANCE])
    first = c.post(payment_url(finalized), {"method": "bank_transfer", "reference": "TR-100",
                                            "amount": "1.00"})  # fmt: skip
    assert first.status_code == 302
    # The same transfer again (even with spaces around it) is refused on the form.
    again = c.post(payment_url(finalized), {"method": "bank_transfer", "reference": " TR-100 ",
                                            "amount": "1.00"})  # fmt: skip
    page = html(again)
    assert again.status_code == 200
    today = Payment.objects.get(reference="TR-100").paid_on.isoformat()
    assert (
        f"The reference TR-100 is already recorded: an invoice payment of {usd(100)} on {today}"
        f" ({finalized.number})" in page
    )
    assert "Nothing was recorded again" in page
    finalized.refresh_from_db()
    assert finalized.paid_minor == 100
    assert Payment.objects.filter(organization=finalized.organization).count() == 1
    # Another organization's reference is not this one's business.
    theirs = other_billing.payment.reference
    ok = c.post(payment_url(finalized), {"method": "other", "reference": theirs, "amount": "1"})
    assert ok.status_code == 302


def test_a_top_up_cannot_reuse_an_invoice_payments_reference(members, finalized, org):
    finance = Actor(members[Role.FINANCE])
    invoice_mark_paid(invoice_id=finalized.pk, actor=finance, reference="TR-7", amount_minor=100)
    org.billing_mode = BillingMode.PREPAID
    org.save(update_fields=["billing_mode"])
    with pytest.raises(ValidationFailed) as refused:
        topup_record_manual(actor=Actor(members[Role.FINANCE]), amount_minor=5000, reference="TR-7")
    assert "already recorded: an invoice payment of" in refused.value.fields["reference"][0]
    assert prepaid_balance(org.pk) == 0


def test_the_database_keeps_manual_references_unique_per_organization(org, other_org):
    def pay(organization, reference, method="bank_transfer"):
        return Payment.objects.create(
            organization=organization, kind="invoice", method=method, currency="USD",
            amount_minor=100, reference=reference, status="succeeded",
        )  # fmt: skip

    pay(org, "SAME")
    with pytest.raises(IntegrityError), transaction.atomic():
        pay(org, "SAME", method="other")
    pay(other_org, "SAME")  # another organization
    pay(org, "")  # no reference: card payments in progress, for one
    pay(org, "")
    pay(org, "INV-2025-000001", method="stripe")  # a card attempt and its retry
    pay(org, "INV-2025-000001", method="stripe")
    assert Payment.objects.filter(organization=org).count() == 5


def test_the_api_refuses_a_reference_already_recorded(client, members, finalized):
    client.force_login(members[Role.FINANCE].user)
    url = f"/api/v1/invoices/{finalized.pk}/payments/"
    ok = client.post(url, {"reference": "API-1", "amount_minor": 100}, "application/json")
    assert ok.status_code == 201 and ok.json()["paid_on"] == berlin_today().isoformat()
    again = client.post(url, {"reference": "API-1", "amount_minor": 100}, "application/json")
    assert again.status_code == 400
    fields = again.json()["error"]["fields"]
    assert "already recorded: an invoice payment" in fields["reference"][0]
    future = (berlin_today() + timedelta(days=3)).isoformat()
    late = client.post(
        url, {"reference": "API-2", "amount_minor": 100, "paid_on": future}, "application/json"
    )
    assert (
        late.status_code == 400 and "in the future" in late.json()["error"]["fields"]["paid_on"][0]
    )
    assert Payment.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_migration_suffixes_old_duplicate_references(org, other_org):
    """Duplicates recorded before the constraint keep their rows: the
    earliest keeps the reference, later ones get ``[duplicate #id]``."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate([("invoicing", "0004_payment_reference_paid_on")])
    try:
        old = executor.loader.project_state(
            ("invoicing", "0004_payment_reference_paid_on")
        ).apps.get_model("invoicing", "Payment")

        def pay(organization, reference, method="bank_transfer"):
            return old.objects.create(
                organization_id=organization.pk, kind="invoice", method=method, currency="USD",
                amount_minor=100, reference=reference, status="succeeded",
            ).pk  # fmt: skip

        first, second, third = pay(org, "DUP"), pay(org, "DUP"), pay(org, "DUP")
        theirs = pay(other_org, "DUP")
        card = [pay(org, "INV-1", "stripe"), pay(org, "INV-1", "stripe")]
        long_ref = "L" * 128
        long_first, long_second = pay(org, long_ref), pay(org, long_ref)
        # The data step of 0004, as the migration runs it on a database that had duplicates.
        executor.loader.build_graph()
        executor.migrate([("invoicing", "0003_cards")])
        executor.loader.build_graph()
        executor.migrate([("invoicing", "0005_payment_reference_unique")])
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    refs = dict(Payment.objects.values_list("pk", "reference"))
    assert refs[first] == "DUP"
    assert refs[second] == f"DUP [duplicate #{second}]"
    assert refs[third] == f"DUP [duplicate #{third}]"
    assert refs[theirs] == "DUP" and [refs[p] for p in card] == ["INV-1", "INV-1"]
    assert refs[long_first] == long_ref
    assert refs[long_second].endswith(f" [duplicate #{long_second}]")
    assert len(refs[long_second]) == 128
    with pytest.raises(IntegrityError), transaction.atomic():
        Payment.objects.create(
            organization=org, kind="invoice", method="bank_transfer", currency="USD",
            amount_minor=1, reference="DUP",
        )  # fmt: skip


# --- 2. the day a payment was made -------------------------------------------------------------


def test_a_payment_is_dated_today_in_the_organizations_time_zone(client, members, finalized):
    # 23:30 UTC on 30 April 2025 is already 1 May in Berlin (the organization's zone).
    Invoice.objects.filter(pk=finalized.pk).update(issued_at=datetime(2025, 4, 2, tzinfo=UTC))
    c = as_member(client, members[Role.FINANCE])
    late_evening = datetime(2025, 4, 30, 23, 30, tzinfo=UTC)
    with mock.patch("django.utils.timezone.now", return_value=late_evening):
        form = html(c.get(payment_url(finalized)))
        assert 'name="paid_on" value="2025-05-01"' in form  # the default: today there
        response = c.post(payment_url(finalized), {"method": "bank_transfer", "reference": "TR-1"})
    assert response.status_code == 302
    payment = Payment.objects.get()
    assert payment.paid_on == date(2025, 5, 1)
    c.force_login(members[Role.FINANCE].user)  # the session saved in 2025 has expired since
    page = html(c.get(detail_url(finalized)))
    assert '<td class="paid-on">2025-05-01</td>' in page
    assert "Paid on 2025-05-01" in text_of(page, "payment-status")


def test_a_payment_day_is_never_in_the_future_nor_before_the_invoice(client, members, finalized):
    finalized = issued_back(finalized, days=10)
    c = as_member(client, members[Role.FINANCE])
    today = berlin_today()
    data = {"method": "bank_transfer", "reference": "TR-2", "amount": "1"}
    tomorrow = (berlin_today() + timedelta(days=2)).isoformat()
    future = c.post(payment_url(finalized), {**data, "paid_on": tomorrow})
    assert future.status_code == 200 and "That day is in the future" in html(future)
    before = (finalized.issued_at - timedelta(days=2)).date().isoformat()
    early = c.post(payment_url(finalized), {**data, "paid_on": before})
    assert early.status_code == 200 and "before the invoice was issued" in html(early)
    assert not Payment.objects.exists()
    # A day in between is kept as given: on the invoice and in the payments CSV.
    day = (finalized.issued_at + timedelta(days=3)).date()
    assert day <= today
    ok = c.post(payment_url(finalized), {**data, "paid_on": day.isoformat()})
    assert ok.status_code == 302 and day.isoformat() in follow_messages(c, ok)
    assert Payment.objects.get().paid_on == day
    assert f'<td class="paid-on">{day.isoformat()}</td>' in html(c.get(detail_url(finalized)))
    export = c.get("/billing/exports/payments.csv")
    text = b"".join(export.streaming_content).decode("utf-8-sig")
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert row["paid_on"] == day.isoformat() and row["reference"] == "TR-2"


def test_paying_off_an_invoice_on_an_earlier_day_dates_it_then(members, finalized):
    finalized = issued_back(finalized, days=20)
    day = (finalized.issued_at + timedelta(days=5)).date()
    invoice_mark_paid(
        invoice_id=finalized.pk, actor=Actor(members[Role.FINANCE]), reference="ALL", paid_on=day
    )
    finalized.refresh_from_db()
    assert finalized.status == InvoiceStatus.PAID
    assert finalized.paid_at.astimezone(ZoneInfo("Europe/Berlin")).date() == day


# --- 3. credit notes: preview, then confirmation ----------------------------------------------------


def test_a_credit_note_is_previewed_and_only_the_confirmation_issues_it(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    due = finalized.amount_due_minor
    data = {"mode": "amount", "amount": "1.50", "reason": "slow week"}
    preview = c.post(credit_url(finalized), data)
    page = html(preview)
    assert preview.status_code == 200 and not CreditNote.objects.exists()  # nothing yet
    assert 'id="preview-lines"' in page and "Nothing is credited yet" in page
    assert text_of(page, "preview-amount") == usd(150)
    assert text_of(page, "preview-due-before") == usd(due)
    assert text_of(page, "preview-due-after") == usd(due - 150)
    assert "Reduces the amount due; nothing is refunded." in text_of(page, "preview-effect-text")
    # "Change" goes back to the form with what was typed.
    back = html(c.post(credit_url(finalized), {**data, "edit": "1"}))
    assert 'id="credit-note-form"' in back and 'value="1.50"' in back
    assert not CreditNote.objects.exists()
    # The confirmation issues exactly what was shown.
    done = c.post(credit_url(finalized), {**data, "confirm": token_of(page)})
    assert done.status_code == 302
    note = CreditNote.objects.get()
    assert (note.amount_minor, note.effect) == (150, CreditNoteEffect.REDUCE_DUE)
    finalized.refresh_from_db()
    assert finalized.amount_due_minor == due - 150
    # The same confirmation again: the invoice has changed (by that note), nothing more.
    again = c.post(credit_url(finalized), {**data, "confirm": token_of(page)})
    assert again.status_code == 200 and "The invoice changed since the preview" in html(again)
    assert CreditNote.objects.count() == 1


def test_a_changed_invoice_between_preview_and_confirmation_is_refused(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    data = {"mode": "amount", "amount": "2", "reason": "outage"}
    token = token_of(html(c.post(credit_url(finalized), data)))
    # Meanwhile another member records a payment: less is due than the preview said.
    invoice_mark_paid(
        invoice_id=finalized.pk, actor=Actor(members[Role.OWNER]), reference="TR-5",
        amount_minor=finalized.amount_due_minor - 50,
    )  # fmt: skip
    refused = c.post(credit_url(finalized), {**data, "confirm": token})
    page = html(refused)
    assert refused.status_code == 200 and not CreditNote.objects.exists()
    assert "The invoice changed since the preview; review again" in text_of(page, "preview-stale")
    # The page shows the new preview: 0.50 still due is reduced, 1.50 is refunded by hand.
    assert text_of(page, "preview-due-before") == usd(50)
    assert text_of(page, "preview-due-after") == usd(0)
    assert f"Refund of {usd(150)} by bank transfer" in text_of(page, "preview-effect-text")
    assert c.post(credit_url(finalized), {**data, "confirm": token_of(page)}).status_code == 302
    note = CreditNote.objects.get()
    assert (note.due_reduction_minor, note.refund_minor) == (50, 150)
    assert note.effect == CreditNoteEffect.REFUND_MANUAL


def test_a_forged_or_edited_confirmation_issues_nothing(client, members, finalized):
    c = as_member(client, members[Role.FINANCE])
    data = {"mode": "amount", "amount": "1", "reason": "x"}
    token = token_of(html(c.post(credit_url(finalized), data)))
    forged = c.post(credit_url(finalized), {**data, "confirm": "made-up"})
    assert "could not be verified" in html(forged)
    more = c.post(credit_url(finalized), {**data, "amount": "5", "confirm": token})
    assert "review again" in html(more)
    assert not CreditNote.objects.exists()


def test_an_incident_credit_is_previewed_with_its_calls(client, members, org, key, catalog):
    from invoicing.services import invoice_draft, invoice_finalize
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    t = datetime(2025, 6, 10, 12, tzinfo=UTC)
    ingest_events([event(key, started_at=t, status_code=502) for _ in range(3)])
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-06").pk
    )
    c = as_member(client, members[Role.FINANCE])
    url = f"/billing/invoices/{invoice.pk}/incident-credit/"
    data = {"start": "2025-06-10T00:00", "end": "2025-06-11T00:00", "status_class": "5xx",
            "reason": "bad gateway"}  # fmt: skip
    preview = c.post(url, data)
    page = html(preview)
    assert preview.status_code == 200 and not CreditNote.objects.exists()
    assert "Incident credit: 3 calls" in page
    assert text_of(page, "preview-due-after") == usd(0)
    done = c.post(url, {**data, "confirm": token_of(page)})
    assert "3 calls" in follow_messages(c, done)
    assert len(CreditNote.objects.get().lines.first().request_ids) == 3


# --- 4. a duplicate top-up reference ---------------------------------------------------------


def test_a_duplicate_top_up_reference_says_it_changed_nothing(client, members, prepaid, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    data = {"action": "manual", "manual-amount": "40", "manual-reference": "TR-2025-77"}
    first = follow_messages(c, c.post("/billing/top-up/", data))
    assert f"the balance rose by {usd(4000)}" in first
    # The same transfer again, even with another amount typed.
    second = follow_messages(c, c.post("/billing/top-up/", {**data, "manual-amount": "55"}))
    day = Payment.objects.get().paid_on.isoformat()
    assert (
        f"Bank transfer TR-2025-77 was already recorded on {day} for {usd(4000)}; nothing was"
        " recorded again and the balance did not change." in second
    )
    assert "the balance rose" not in second
    assert prepaid_balance(prepaid.pk) == 40_000_000 and Payment.objects.count() == 1


def test_a_manual_top_up_has_the_day_the_money_arrived(client, members, prepaid, settings):
    settings.STRIPE_SECRET_KEY = ""
    c = as_member(client, members[Role.FINANCE])
    data = {"action": "manual", "manual-amount": "10", "manual-reference": "TR-D"}
    future = (berlin_today() + timedelta(days=2)).isoformat()
    refused = c.post("/billing/top-up/", {**data, "manual-paid_on": future})
    assert refused.status_code == 200 and "That day is in the future" in html(refused)
    assert prepaid_balance(prepaid.pk) == 0
    day = berlin_today() - timedelta(days=3)
    assert (
        c.post("/billing/top-up/", {**data, "manual-paid_on": day.isoformat()}).status_code == 302
    )
    assert Payment.objects.get().paid_on == day
    assert f"<td>{day.isoformat()}</td>" in html(c.get("/billing/top-up/"))


# --- 5. manual refunds marked paid -------------------------------------------------------------


@pytest.fixture
def manual_refund(members, finalized):
    """A postpaid invoice paid in full by transfer, then credited 1.00: a
    pending refund finance pays by hand."""
    finalized = issued_back(finalized, days=10)
    finance = Actor(members[Role.FINANCE])
    invoice_mark_paid(invoice_id=finalized.pk, actor=finance, reference="IN-1")
    note = credit_note_create(
        invoice_id=finalized.pk, actor=finance, amount=1_000_000, reason="goodwill"
    )
    return note.payments.get()


def test_a_pending_manual_refund_is_marked_paid(client, members, finalized, manual_refund):
    refund = manual_refund
    assert (refund.status, refund.kind, refund.amount_minor) == ("pending", "refund", 100)
    c = as_member(client, members[Role.FINANCE])
    page = html(c.get(detail_url(finalized)))
    assert (
        "pending manual refund" in page and f'id="refund-mark-paid-{refund.credit_note_id}"' in page
    )
    url = reverse("invoicing:refund_mark_paid", args=[refund.pk])
    assert usd(100) in text_of(html(c.get(url)), "refund-amount")
    tomorrow = (berlin_today() + timedelta(days=2)).isoformat()
    assert "in the future" in html(c.post(url, {"reference": "OUT-1", "paid_on": tomorrow}))
    taken = html(c.post(url, {"reference": "IN-1"}))  # the incoming transfer's reference
    assert "The reference IN-1 is already recorded: an invoice payment" in taken
    refund.refresh_from_db()
    assert refund.status == PaymentStatus.PENDING
    day = berlin_today()
    done = c.post(url, {"reference": "OUT-1", "paid_on": day.isoformat()})
    assert f"marked paid on {day.isoformat()} (OUT-1)" in follow_messages(c, done)
    refund.refresh_from_db()
    assert (refund.status, refund.reference, refund.paid_on) == ("succeeded", "OUT-1", day)
    page = html(c.get(detail_url(finalized)))
    state = text_of(page, f"refund-state-{refund.credit_note_id}")
    assert f"{usd(100)} paid {day.isoformat()} (ref. OUT-1)" in state
    assert "refund_paid" in page  # the invoice's history
    # Marking it again is not possible.
    assert c.post(url, {"reference": "OUT-2"}).status_code == 302
    refund.refresh_from_db()
    assert refund.reference == "OUT-1"


def test_only_billing_managers_mark_refunds_paid(client, members, manual_refund, other_billing):
    url = reverse("invoicing:refund_mark_paid", args=[manual_refund.pk])
    developer = as_member(client, members[Role.DEVELOPER])
    assert developer.post(url, {"reference": "X"}).status_code == 403
    with pytest.raises(PermissionDenied):
        refund_mark_paid(actor=Actor(members[Role.DEVELOPER]), payment_id=manual_refund.pk,
                         reference="X")  # fmt: skip
    # Another organization's finance cannot reach it.
    theirs = as_member(client, other_billing.finance)
    assert theirs.get(url).status_code == 404
    manual_refund.refresh_from_db()
    assert manual_refund.status == PaymentStatus.PENDING


def test_customers_read_refund_wording_not_internal_notes(
    client, members, finalized, manual_refund
):
    page = html(as_member(client, members[Role.FINANCE]).get(detail_url(finalized)))
    assert "Refund by bank transfer" in page
    assert "Refund to be paid by hand" not in page
    assert CreditNoteEffect.REFUND_MANUAL.label == "Refund by bank transfer"


# --- 6. top-ups only for prepaid organizations ----------------------------------------------------


def test_the_top_up_link_is_only_for_prepaid_organizations(client, members, org):
    c = as_member(client, members[Role.FINANCE])
    assert 'id="nav-topup"' not in html(c.get("/billing/balance/"))
    assert "Top-ups are for prepaid accounts" in html(c.get("/billing/top-up/"))
    org.billing_mode = BillingMode.PREPAID
    org.save(update_fields=["billing_mode"])
    assert 'id="nav-topup"' in html(c.get("/billing/balance/"))
    assert 'id="manual-topup-form"' in html(c.get("/billing/top-up/"))


# --- 7. the audit log in currency units ---------------------------------------------------------


def test_finance_actions_are_audited_in_currency_units(client, members, finalized, org):
    finance = Actor(members[Role.FINANCE])
    finalized = issued_back(finalized, days=5)
    invoice_mark_paid(invoice_id=finalized.pk, actor=finance, reference="A-1", amount_minor=142)
    invoice_mark_paid(invoice_id=finalized.pk, actor=finance, reference="A-2")
    note = credit_note_create(
        invoice_id=finalized.pk, actor=finance, amount=1_500_000, reason="audit me"
    )
    refund_mark_paid(actor=finance, payment_id=note.payments.get().pk, reference="OUT-9")
    org.billing_mode = BillingMode.PREPAID
    org.save(update_fields=["billing_mode"])
    topup_record_manual(actor=finance, amount_minor=2500, reference="TOP-1")
    prepaid_adjust(actor=finance, amount=4_000, reason="rounding", kind="grant")
    events = {e.action: e.params for e in AuditEvent.objects.order_by("pk")}  # the last of each
    paid = AuditEvent.objects.filter(action="invoice.mark_paid").order_by("pk")
    assert [e.params["amount"] for e in paid] == [
        usd(142),
        usd(finalized.amount_due_initial_minor - 142),
    ]
    assert paid[0].params["paid_on"] == berlin_today().isoformat()
    assert events["credit_note.create"]["amount"] == format_amount(1_500_000, "USD")
    assert events["refund.mark_paid"]["amount"] == usd(150)
    assert events["topup.record_manual"]["amount"] == usd(2500)
    assert "0.004" in events["ledger.grant"]["amount"]  # exact: a grant below a cent
    for action, params in events.items():
        for name, value in params.items():
            assert not isinstance(value, int), (action, name, value)  # never a raw integer
    # Nor in the invoice's history on its page.
    history = text_of(
        html(as_member(client, members[Role.FINANCE]).get(detail_url(finalized))),
        "invoice-events",
    )
    assert "1500000" not in history and "142 " not in history.replace(usd(142), "")
