"""Business actions of the invoicing app (writes). Each is keyword-only and
runs in one transaction. Other apps import from here."""

from invoicing.services.billing_profile import billing_profile_update
from invoicing.services.credit_notes import credit_note_create, credit_note_for_incident
from invoicing.services.invoices import (
    invoice_draft,
    invoice_finalize,
    invoice_mark_paid,
    invoice_mark_uncollectible,
    invoice_preview,
    invoice_refresh,
    invoice_run_month,
    invoice_void,
)
from invoicing.services.ledger import (
    ledger_entry_create,
    ledger_usage_debit,
    low_balance_check,
    prepaid_adjust,
)
from invoicing.services.payments import (
    dispute_apply,
    invoice_collect,
    payment_intent_apply,
    payment_sync,
    payments_retry_pending,
    refund_apply,
    refund_execute,
    topup_client_secret,
    topup_create,
    topup_record_manual,
)

__all__ = [
    "billing_profile_update",
    "credit_note_create",
    "credit_note_for_incident",
    "dispute_apply",
    "invoice_collect",
    "invoice_draft",
    "invoice_finalize",
    "invoice_mark_paid",
    "invoice_mark_uncollectible",
    "invoice_preview",
    "invoice_refresh",
    "invoice_run_month",
    "invoice_void",
    "ledger_entry_create",
    "ledger_usage_debit",
    "low_balance_check",
    "payment_intent_apply",
    "payment_sync",
    "payments_retry_pending",
    "prepaid_adjust",
    "refund_apply",
    "refund_execute",
    "topup_client_secret",
    "topup_create",
    "topup_record_manual",
]
