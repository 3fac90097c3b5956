"""The finance console: invoices (with the running month's preview), their
actions (paying one now with the card on file among them), printable pages
and PDFs, credit notes, the prepaid balance and its ledger, top-ups, the
card on file and the CSV exports, a module per topic:

- ``invoices``: the list, one invoice, its actions, print page and PDF;
- ``credit_notes``: credit notes (previewed, then confirmed; and so refunds),
  incident credits, manual refunds marked paid, PDFs;
- ``balance``: the balance, its ledger, billing settings and top-ups;
- ``cards``: the card on file;
- ``exports``: the CSV exports;
- ``_shared``: permissions and helpers the pages share.

Every page needs ``Perm.BILLING_VIEW`` and every action
``Perm.BILLING_MANAGE`` (finance, owners, admins); everything is read
through ``invoicing.selectors`` (scoped to the current organization, so
another organization's ids are "not found") and written through
``invoicing.services``, whose errors become form errors or messages."""

from invoicing.views.balance import balance, balance_adjust, billing_settings, topup
from invoicing.views.cards import payment_method
from invoicing.views.credit_notes import (
    credit_note_create,
    credit_note_pdf,
    incident_credit,
    refund_mark_paid,
)
from invoicing.views.exports import export_view
from invoicing.views.invoices import (
    invoice_detail,
    invoice_finalize,
    invoice_list,
    invoice_pay,
    invoice_payment,
    invoice_pdf,
    invoice_print,
    invoice_refresh,
    invoice_uncollectible,
    invoice_void,
)

__all__ = [
    "balance",
    "balance_adjust",
    "billing_settings",
    "credit_note_create",
    "credit_note_pdf",
    "export_view",
    "incident_credit",
    "invoice_detail",
    "invoice_finalize",
    "invoice_list",
    "invoice_pay",
    "invoice_payment",
    "invoice_pdf",
    "invoice_print",
    "invoice_refresh",
    "invoice_uncollectible",
    "invoice_void",
    "payment_method",
    "refund_mark_paid",
    "topup",
]
