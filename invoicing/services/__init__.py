"""Business actions of the invoicing app (writes). Each is keyword-only and
runs in one transaction. Other apps reach the ones they need through
``invoicing.facade``. A service that hands work to Celery enqueues the task by
its name (``console.kernel.celery.registered_task``): ``invoicing.tasks`` imports
services, never the reverse."""

from invoicing.services.billing_profile import billing_profile_update
from invoicing.services.cards import (
    card_remove,
    card_setup_apply,
    card_setup_complete,
    card_setup_start,
    invoice_pay_now,
    invoice_payment_client_secret,
)
from invoicing.services.collection import invoice_collect, payment_intent_apply
from invoicing.services.credit_notes import (
    CreditNotePlan,
    credit_note_create,
    credit_note_preview,
)
from invoicing.services.disputes import dispute_apply
from invoicing.services.incident_credits import credit_note_for_incident, incident_credit_preview
from invoicing.services.invoices import (
    invoice_draft,
    invoice_finalize,
    invoice_mark_paid,
    invoice_mark_uncollectible,
    invoice_preview,
    invoice_refresh,
    invoice_void,
)
from invoicing.services.ledger import (
    ledger_entry_create,
    ledger_usage_debit,
    low_balance_check,
    prepaid_adjust,
)
from invoicing.services.monthly_run import invoice_run_month
from invoicing.services.overdue import invoice_notify_overdue, invoices_notify_overdue
from invoicing.services.refunds import refund_apply, refund_execute, refund_mark_paid
from invoicing.services.retries import payment_sync, payments_retry_pending
from invoicing.services.topups import (
    topup_charge_card,
    topup_client_secret,
    topup_create,
    topup_record_manual,
)
from invoicing.services.webhooks import MalformedEvent, stripe_event_receive

__all__ = [
    "CreditNotePlan",
    "MalformedEvent",
    "billing_profile_update",
    "card_remove",
    "card_setup_apply",
    "card_setup_complete",
    "card_setup_start",
    "credit_note_create",
    "credit_note_for_incident",
    "credit_note_preview",
    "dispute_apply",
    "incident_credit_preview",
    "invoice_collect",
    "invoice_draft",
    "invoice_finalize",
    "invoice_mark_paid",
    "invoice_mark_uncollectible",
    "invoice_notify_overdue",
    "invoice_pay_now",
    "invoice_payment_client_secret",
    "invoice_preview",
    "invoice_refresh",
    "invoice_run_month",
    "invoice_void",
    "invoices_notify_overdue",
    "ledger_entry_create",
    "ledger_usage_debit",
    "low_balance_check",
    "payment_intent_apply",
    "payment_sync",
    "payments_retry_pending",
    "prepaid_adjust",
    "refund_apply",
    "refund_execute",
    "refund_mark_paid",
    "stripe_event_receive",
    "topup_charge_card",
    "topup_client_secret",
    "topup_create",
    "topup_record_manual",
]
