"""Invoicing rules that both the reads (``selectors``) and the writes
(``services``) state: kept here so that selectors never import services."""

from __future__ import annotations

from datetime import UTC, timedelta

from django.conf import settings
from django.utils import timezone as tz
from django.utils.translation import gettext as _

from invoicing.models import Invoice, InvoiceStatus


def finalize_blocker(invoice: Invoice, now=None) -> str | None:
    """Why a draft may not be finalized yet, or None. Finalizing closes the
    month for good (later calls of that month would never be billed), so it
    waits until the month has ended in the organization's time zone and the
    grace period for late usage events has passed, as the monthly run does.
    ``invoice_finalize`` enforces it; the console asks it to explain a
    disabled button."""
    if invoice.status != InvoiceStatus.DRAFT:
        return None
    ready = invoice.period_end + timedelta(hours=settings.INVOICING_GRACE_HOURS)
    if (now or tz.now()) < ready:
        return _(
            "The %(period)s month is still collecting usage until %(until)s UTC;"
            " finalize it after that."
        ) % {"period": invoice.period, "until": f"{ready.astimezone(UTC):%Y-%m-%d %H:%M}"}
    return None


# A usage debit's reason says how many calls its ingest batch held; the
# pattern reads it back (Python ``re`` and the database's regex alike).
USAGE_REASON_RE = r"^[0-9]+ calls?$"


def usage_debit_reason(calls: int) -> str:
    """What a usage debit says (``ledger_usage_debit`` writes it)."""
    return f"{calls} call" if calls == 1 else f"{calls} calls"
