"""Rules the invoicing services enforce themselves (not only their pages):
no finalizing an open month, messages in money and never "None", audit
events, idempotent manual ledger entries, billing settings through a
service, refunds and lost collections through Celery and the beat retry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from accounts.errors import Conflict
from accounts.models import AuditEvent, Role
from invoicing import selectors
from invoicing.models import InvoiceStatus
from invoicing.services import invoice_draft, invoice_finalize, invoice_refresh, invoice_void

pytestmark = pytest.mark.django_db


# --- 1. the month must have ended (plus the grace period) -------------------------


def test_finalize_refuses_an_open_month_in_the_service(org, month_calls, settings):
    # Given March 2025 still inside a (very long) grace period
    settings.INVOICING_GRACE_HOURS = 24 * 365 * 100
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    # When it is finalized without any page in front (a task, a shell, the API)
    with pytest.raises(Conflict) as exc:
        invoice_finalize(invoice_id=draft.pk)
    # Then the service refuses it, saying why, with the code the API returns
    assert exc.value.code == "period_open"
    assert "still collecting usage" in exc.value.message
    assert exc.value.message == selectors.finalize_blocker(draft)  # one rule, shared
    draft.refresh_from_db()
    assert draft.status == InvoiceStatus.DRAFT and draft.number is None
    # Once the grace period is over, it finalizes.
    settings.INVOICING_GRACE_HOURS = 6
    assert selectors.finalize_blocker(draft) is None
    assert invoice_finalize(invoice_id=draft.pk).status == InvoiceStatus.FINALIZED


def test_finalize_refuses_the_running_month(org, members, actor_for):
    from django.utils import timezone

    from invoicing.services._common import period_of

    draft = invoice_draft(organization_id=org.pk, period=period_of(timezone.now(), org.timezone))
    with pytest.raises(Conflict) as exc:
        invoice_finalize(invoice_id=draft.pk, actor=actor_for(members[Role.FINANCE]))
    assert exc.value.code == "period_open"
    assert not AuditEvent.objects.filter(action="invoice.finalize").exists()


def test_the_blocker_waits_for_the_local_month_and_the_grace(org, month_calls, settings):
    settings.INVOICING_GRACE_HOURS = 6
    draft = invoice_draft(organization_id=org.pk, period="2025-03")  # Berlin: ends 22:00 UTC
    end = datetime(2025, 3, 31, 22, tzinfo=UTC)
    assert selectors.finalize_blocker(draft, now=end + timedelta(hours=5, minutes=59))
    assert selectors.finalize_blocker(draft, now=end + timedelta(hours=6)) is None
    said = selectors.finalize_blocker(draft, now=end)
    assert "2025-04-01 04:00 UTC" in said


# --- 3. no "None" in the messages of a voided draft ---------------------------------


def test_a_voided_drafts_errors_name_the_month_not_none(org, month_calls):
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    invoice_void(invoice_id=draft.pk, reason="wrong")
    with pytest.raises(Conflict) as refresh:
        invoice_refresh(invoice_id=draft.pk)
    with pytest.raises(Conflict) as finalize:
        invoice_finalize(invoice_id=draft.pk)
    for exc in (refresh, finalize):
        assert "None" not in exc.value.message
        assert "2025-03" in exc.value.message and "void" in exc.value.message
    assert "finalized" not in refresh.value.message


# --- 2. an incident window labelled UTC is printed in UTC ----------------------------


def test_incident_window_is_printed_in_utc_whatever_zone_it_came_in(
    org, key, catalog, members, actor_for
):
    from invoicing.services import credit_note_for_incident
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    t = datetime(2025, 6, 10, 12, tzinfo=UTC)
    ingest_events([event(key, started_at=t, node_id=7, status_code=502, input_tokens=900_000)])
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-06").pk
    )
    berlin = ZoneInfo("Europe/Berlin")  # UTC+2 in June
    note = credit_note_for_incident(
        invoice_id=invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        reason="node 7 outage",
        start=datetime(2025, 6, 10, 13, 0, tzinfo=berlin),
        end=datetime(2025, 6, 10, 15, 30, tzinfo=berlin),
    )
    description = note.lines.order_by("pk").first().description
    assert "2025-06-10 11:00 to 2025-06-10 13:30 UTC" in description


# --- 4. marking uncollectible is audited -------------------------------------------------


def test_mark_uncollectible_records_an_audit_event(finalized, members, actor_for):
    from invoicing.services import invoice_mark_uncollectible

    invoice_mark_uncollectible(
        invoice_id=finalized.pk, actor=actor_for(members[Role.FINANCE]), reason="gone"
    )
    audit = AuditEvent.objects.get(action="invoice.mark_uncollectible")
    assert audit.organization_id == finalized.organization_id
    assert audit.params["reason"] == "gone"
    assert audit.actor == members[Role.FINANCE].user


# --- 5. limits said in money, not in micro- or minor units -------------------------------


def test_money_texts_are_exact_decimals_of_the_currency():
    from invoicing.money import micro_text, minor_text

    assert micro_text(5_407_911, "USD") == "5.407911 USD"
    assert micro_text(5_410_000, "USD") == "5.41 USD"
    assert micro_text(1_234_500_000, "USD") == "1,234.50 USD"
    assert micro_text(7_000_000, "JPY") == "7 JPY"
    assert minor_text(468, "USD") == "4.68 USD"
    assert minor_text(468, "JPY") == "468 JPY"


def test_credit_and_payment_limits_are_said_in_money(finalized, members, actor_for):
    from accounts.errors import ValidationFailed
    from invoicing.money import micro_text, minor_text
    from invoicing.services import credit_note_create, invoice_mark_paid

    finance = actor_for(members[Role.FINANCE])
    remaining = finalized.total - finalized.credited
    with pytest.raises(ValidationFailed) as too_much:
        credit_note_create(invoice_id=finalized.pk, actor=finance, amount=remaining + 1, reason="x")
    assert micro_text(remaining, "USD") in too_much.value.fields["amount"][0]
    line = finalized.lines.filter(kind="usage").first()
    with pytest.raises(ValidationFailed) as line_much:
        credit_note_create(
            invoice_id=finalized.pk,
            actor=finance,
            line_amounts={line.pk: line.amount + 1},
            reason="x",
        )
    assert micro_text(line.amount, "USD") in line_much.value.fields[f"line_{line.pk}"][0]
    due = finalized.amount_due_minor
    with pytest.raises(ValidationFailed) as overpaid:
        invoice_mark_paid(
            invoice_id=finalized.pk, actor=finance, reference="T", amount_minor=due + 1
        )
    assert minor_text(due, "USD") in overpaid.value.fields["amount"][0]
    for exc in (too_much, line_much, overpaid):
        text = " ".join(m for msgs in exc.value.fields.values() for m in msgs)
        assert "micro" not in text and "minor unit" not in text


# --- 6. a manual ledger entry submitted twice is one entry ---------------------------------


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


def test_the_balance_form_posted_twice_with_its_token_is_one_entry(client, members, org):
    import uuid

    from invoicing.models import LedgerEntry
    from tests.invoicing.test_views import as_member

    c = as_member(client, members[Role.FINANCE])
    form = {"kind": "grant", "amount": "12.50", "reason": "gift", "token": str(uuid.uuid4())}
    assert c.post("/billing/balance/adjust/", form).status_code == 302
    assert c.post("/billing/balance/adjust/", form).status_code == 302
    assert LedgerEntry.objects.filter(organization=org).count() == 1


# --- 7. billing settings through a service --------------------------------------------------


def test_billing_profile_update_checks_rights_audits_and_refuses_terms_to_tenants(
    org, members, actor_for
):
    from accounts.errors import PermissionDenied, ValidationFailed
    from invoicing.models import BillingProfile
    from invoicing.services import billing_profile_update

    finance = actor_for(members[Role.FINANCE])
    with pytest.raises(PermissionDenied):
        billing_profile_update(actor=actor_for(members[Role.DEVELOPER]), legal_name="Evil")
    profile = billing_profile_update(
        actor=finance, legal_name=" Acme GmbH ", billing_email="ap@acme.example"
    )
    assert (profile.legal_name, profile.billing_email) == ("Acme GmbH", "ap@acme.example")
    audit = AuditEvent.objects.get(action="billing_profile.update")
    assert audit.params == {"changed": ["billing_email", "legal_name"]}
    # Commercial terms are the platform's: a tenant gets field errors, nothing changes
    with pytest.raises(ValidationFailed) as exc:
        billing_profile_update(
            actor=finance, tax_rate_ppm=0, invoice_discount_ppm=500_000, payment_terms_days=90
        )
    assert set(exc.value.fields) == {"tax_rate_ppm", "invoice_discount_ppm", "payment_terms_days"}
    with pytest.raises(ValidationFailed) as bad:
        billing_profile_update(actor=finance, billing_email="nope", stripe_customer_id="cus_x")
    assert set(bad.value.fields) == {"billing_email", "stripe_customer_id"}
    profile = BillingProfile.objects.get(organization=org)
    assert (profile.invoice_discount_ppm, profile.payment_terms_days) == (0, 14)
    assert profile.stripe_customer_id == ""
    assert AuditEvent.objects.filter(action="billing_profile.update").count() == 1
    # Platform staff may set them
    staff = members[Role.OWNER]
    staff.user.is_staff = True
    staff.user.save(update_fields=["is_staff"])
    profile = billing_profile_update(
        actor=actor_for(staff), invoice_discount_ppm=50_000, payment_terms_days=30
    )
    assert (profile.invoice_discount_ppm, profile.payment_terms_days) == (50_000, 30)


def test_the_settings_form_saves_through_the_service(client, members, org):
    from unittest import mock

    from invoicing.services import billing_profile
    from tests.invoicing.test_views import as_member

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


# --- 8. refunds go to a Celery task, not to Stripe inside the request -----------------------


def test_a_card_refund_is_enqueued_after_commit_not_run_in_the_request(
    card_invoice, stripe_on, members, actor_for, refund_worker, django_capture_on_commit_callbacks
):
    from unittest import mock

    from invoicing.models import Payment, PaymentKind, PaymentStatus
    from invoicing.services import credit_note_create, invoice_collect
    from invoicing.services import refunds as refunds_module

    assert invoice_collect(invoice_id=card_invoice.pk) == "succeeded"
    refund_worker.side_effect = None  # a broker that takes the task, no worker yet
    with (
        mock.patch.object(refunds_module, "refund_execute") as in_request,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        credit_note_create(
            invoice_id=card_invoice.pk,
            actor=actor_for(members[Role.FINANCE]),
            amount=1_000_000,
            reason="slow",
        )
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    assert callbacks and in_request.call_count == 0
    refund_worker.assert_called_once_with(refund.pk)
    assert refund.status == PaymentStatus.PENDING
    # The worker then sends it, once.
    from invoicing.tasks import execute_refund

    assert execute_refund.apply(args=[refund.pk]).get() == "succeeded"
    assert execute_refund.apply(args=[refund.pk]).get() == "already_succeeded"
    assert len(stripe_on.refunds(refund.stripe_payment_intent_id)) == 1


def test_the_refund_task_retries_an_outage_with_a_backoff(
    card_invoice, stripe_on, members, actor_for
):
    from unittest import mock

    from celery.exceptions import Retry

    from invoicing import stripe_adapter
    from invoicing.models import Payment, PaymentKind, PaymentStatus
    from invoicing.services import credit_note_create, invoice_collect
    from invoicing.tasks import execute_refund

    assert execute_refund.name == "invoicing.execute_refund"
    assert execute_refund.acks_late and execute_refund.reject_on_worker_lost
    invoice_collect(invoice_id=card_invoice.pk)
    credit_note_create(
        invoice_id=card_invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        amount=2_000_000,
        reason="x",
    )  # not committed here: nothing enqueued
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    stripe_on.outage()
    with (
        mock.patch.object(execute_refund, "retry", side_effect=Retry("again")) as retry,
        pytest.raises(Retry),
    ):
        execute_refund.apply(args=[refund.pk], throw=True)
    assert isinstance(retry.call_args.kwargs["exc"], stripe_adapter.StripeUnavailable)
    assert retry.call_args.kwargs["countdown"] == 30
    refund.refresh_from_db()
    assert refund.status == PaymentStatus.PENDING


def test_a_broker_that_refuses_the_refund_leaves_it_to_the_beat_retry(
    card_invoice, stripe_on, members, actor_for, refund_worker, django_capture_on_commit_callbacks
):
    from invoicing.models import Payment, PaymentKind, PaymentStatus
    from invoicing.services import credit_note_create, invoice_collect, payments_retry_pending

    invoice_collect(invoice_id=card_invoice.pk)
    refund_worker.side_effect = ConnectionError("broker down")
    with django_capture_on_commit_callbacks(execute=True):
        credit_note_create(
            invoice_id=card_invoice.pk,
            actor=actor_for(members[Role.FINANCE]),
            amount=1_000_000,
            reason="x",
        )  # no error for the person who issued it
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    assert refund.status == PaymentStatus.PENDING
    assert payments_retry_pending(older_than_seconds=0)["refunds"] == 1
    refund.refresh_from_db()
    assert refund.status == PaymentStatus.SUCCEEDED


# --- 9. a collection lost before its payment row is found by the beat ---------------------


def test_the_beat_collects_an_invoice_whose_collection_task_was_lost(
    org, month_calls, stripe_on, django_capture_on_commit_callbacks
):
    from unittest import mock

    from invoicing.models import Invoice, Payment, PaymentStatus
    from invoicing.services import payments_retry_pending
    from invoicing.tasks import collect_invoice

    stripe_on.card_for(org)
    # Given the broker is down when the invoice is finalized: no task, no payment row
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    with (
        mock.patch.object(collect_invoice, "delay", side_effect=ConnectionError("broker down")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        invoice_finalize(invoice_id=draft.pk)  # no error for whoever finalized it
    invoice = Invoice.objects.get(pk=draft.pk)
    assert invoice.status == InvoiceStatus.FINALIZED and not Payment.objects.exists()
    # When the beat runs within the grace for a late task, it waits
    assert payments_retry_pending(older_than_seconds=0)["lost_collections"] == 0
    # Then later it charges the card, once, and never again
    done = payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)
    assert done["lost_collections"] == 1 and done["unavailable"] is False
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.PAID
    assert Payment.objects.get(invoice=invoice).status == PaymentStatus.SUCCEEDED
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    assert len(stripe_on.payment_intents(org)) == 1


def test_the_beat_leaves_invoices_it_should_not_collect(
    org, other_org, month_calls, stripe_on, members, actor_for
):
    from invoicing import stripe_adapter
    from invoicing.models import Payment
    from invoicing.services import invoice_collect, invoice_mark_paid, payments_retry_pending

    # A customer without a card: nothing is tried (no failed payment every beat)
    stripe_adapter.customer_ensure(organization_id=org.pk)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    assert not Payment.objects.exists()
    # A declined attempt is not charged again by the beat
    stripe_on.card_for(org, number="4000000000000341")
    assert invoice_collect(invoice_id=invoice.pk) == "failed"
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    # A (partial) payment recorded by hand: finance is on it
    Payment.objects.all().delete()
    invoice_mark_paid(
        invoice_id=invoice.pk, actor=actor_for(members[Role.FINANCE]), reference="T", amount_minor=1
    )
    assert (
        payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)["lost_collections"] == 0
    )
    assert len(stripe_on.payment_intents(org)) == 1  # the declined one only


def test_the_lost_collection_sweep_stops_at_an_outage(org, month_calls, stripe_on):
    from invoicing.models import Payment
    from invoicing.services import payments_retry_pending

    stripe_on.card_for(org)
    invoice_finalize(invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk)
    stripe_on.outage()
    done = payments_retry_pending(older_than_seconds=0, lost_after_seconds=0)
    assert done["unavailable"] is True and done["lost_collections"] == 0
    assert not Payment.objects.exists()


# --- 10. the API schema (invoicing included) generates without a warning -------------------


def test_the_api_schema_generates_without_warnings(tmp_path):
    from django.core.management import call_command

    out = tmp_path / "schema.yml"
    # --fail-on-warn: a colliding enum name (StatusE75Enum) or any other warning fails
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = out.read_text()
    assert "SubAccountStatusEnum" in schema and "NodeStatusEnum" in schema
    assert "StatusE75Enum" not in schema
