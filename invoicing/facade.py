"""What other apps may use of ``invoicing``: its one public face.

Other apps import from here and nowhere else in ``invoicing`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``invoicing`` modules import each other directly, never this module. Only the
console's top (analytics pages, the soak, commands) imports it: no app below
invoicing does, and the gateway learns of balance changes through
``console.hooks``.

Published: the prepaid ledger (``LedgerEntry``, ``LedgerKind``,
``ledger_entry_create``, ``prepaid_balance``), the invoice preview the soak
reconciles against (``invoice_preview``), and ``billing_series`` (with
``BillingSeries`` and the legend of each series, ``BILLING_BASES``), what
the analytics Billing page draws; ``overdue_invoices`` (finalized, past due,
unpaid), what the alert rules watch.
"""

from __future__ import annotations

from invoicing.models import LedgerEntry, LedgerKind
from invoicing.selectors import (
    BILLING_BASES,
    BillingSeries,
    billing_series,
    overdue_invoices,
    prepaid_balance,
)
from invoicing.services import invoice_preview, ledger_entry_create

__all__ = [
    "BILLING_BASES",
    "BillingSeries",
    "LedgerEntry",
    "LedgerKind",
    "billing_series",
    "invoice_preview",
    "ledger_entry_create",
    "overdue_invoices",
    "prepaid_balance",
]
