"""What other apps may use of ``invoicing``: its one public face.

Other apps import from here and nowhere else in ``invoicing`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``invoicing`` modules import each other directly, never this module. Only the
console's top (analytics pages, the soak, commands) imports it: no app below
invoicing does, and the gateway learns of balance changes through
``console.hooks``.

Published: the prepaid ledger (``LedgerEntry``, ``LedgerKind``,
``ledger_entry_create``, ``prepaid_balance``), the invoice preview the soak
reconciles against (``invoice_preview``), and ``billing_months`` (with
``BillingMonths``), what the analytics Billing page draws.
"""

from __future__ import annotations

from invoicing.models import LedgerEntry, LedgerKind
from invoicing.selectors import BillingMonths, billing_months, prepaid_balance
from invoicing.services import invoice_preview, ledger_entry_create

__all__ = [
    "BillingMonths",
    "LedgerEntry",
    "LedgerKind",
    "billing_months",
    "invoice_preview",
    "ledger_entry_create",
    "prepaid_balance",
]
