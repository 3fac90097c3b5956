"""Invoicing: the prepaid ledger, billing profiles, invoices and their lines,
credit notes, payments and Stripe events. Money is integer micro-units of the
organization's currency throughout; only the ``*_minor`` columns hold the
currency's minor unit (cents), converted once (see ``invoicing.money``)."""

from invoicing.models.cards import CardSetup, CardSetupStatus
from invoicing.models.invoices import (
    CreditNote,
    CreditNoteEffect,
    CreditNoteLine,
    Invoice,
    InvoiceEvent,
    InvoiceLine,
    InvoiceRun,
    InvoiceSequence,
    InvoiceStatus,
    LineKind,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
    RunStatus,
    StripeEvent,
    TokenClass,
    credit_description,
    line_description,
)
from invoicing.models.ledger import BillingProfile, DocumentLanguage, LedgerEntry, LedgerKind
from invoicing.models.sla import SlaMonth, SlaStatus, SlaTarget

__all__ = [
    "BillingProfile",
    "CardSetup",
    "CardSetupStatus",
    "CreditNote",
    "CreditNoteEffect",
    "CreditNoteLine",
    "DocumentLanguage",
    "Invoice",
    "InvoiceEvent",
    "InvoiceLine",
    "InvoiceRun",
    "InvoiceSequence",
    "InvoiceStatus",
    "LedgerEntry",
    "LedgerKind",
    "LineKind",
    "Payment",
    "PaymentKind",
    "PaymentMethod",
    "PaymentStatus",
    "RunStatus",
    "SlaMonth",
    "SlaStatus",
    "SlaTarget",
    "StripeEvent",
    "TokenClass",
    "credit_description",
    "line_description",
]
