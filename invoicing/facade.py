"""What other apps may use of ``invoicing``: its one public face.

Other apps import from here and nowhere else in ``invoicing`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``invoicing`` modules import each other directly, never this module. Only the
console's top (analytics pages, the soak, commands) imports it: no app below
invoicing does, and the gateway learns of balance changes through
``console.kernel.hooks``.

Published: the prepaid ledger (``LedgerKind``, ``ledger_entry_create``,
``prepaid_balance``, ``ledger_total``), the invoice preview the soak
reconciles against (``invoice_preview``), and ``billing_series`` (with
``BillingSeries`` and the legend of each series, ``BILLING_BASES``), what
the analytics Billing page draws; the SLA ledger's month so far
(``sla_figures`` of the ``current_period``, a ``SlaFigures``; shares as
``percent_text``), what the overview shows finance; ``overdue_invoices``
(finalized, past due, unpaid), what the alert rules watch.
"""

from __future__ import annotations

from invoicing.models import LedgerKind
from invoicing.models.sla import percent_text
from invoicing.selectors import (
    BILLING_BASES,
    BillingSeries,
    billing_series,
    ledger_total,
    overdue_invoices,
    prepaid_balance,
)
from invoicing.services import invoice_preview, ledger_entry_create
from invoicing.services.sla import SlaFigures, current_period, sla_figures

__all__ = [
    "BILLING_BASES",
    "BillingSeries",
    "LedgerKind",
    "SlaFigures",
    "billing_series",
    "current_period",
    "invoice_preview",
    "ledger_entry_create",
    "ledger_total",
    "overdue_invoices",
    "percent_text",
    "prepaid_balance",
    "sla_figures",
]
