"""The monthly run: once a month has ended everywhere (plus the grace period
for late usage events), every active organization with something to bill
gets its draft invoice for it, one organization per transaction, resumable
after the last one done."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone as tz

from accounts.facade import Organization
from invoicing.models import InvoiceRun, RunStatus
from invoicing.services._common import period_bounds, period_of, previous_period
from invoicing.services.invoices import invoice_draft
from usage.facade import has_billed_calls, has_unbilled_adjustments

logger = logging.getLogger(__name__)


def run_period_due(now=None) -> str | None:
    """The month (UTC calendar) the run may draft now: the one just ended,
    once every time zone's month has ended (UTC-12 ends 12 h after UTC; 14 h
    covers them all) plus the grace period for late usage events."""
    now = now or tz.now()
    grace = timedelta(hours=settings.INVOICING_GRACE_HOURS)
    period = previous_period(period_of(now, "UTC"))
    _start, end = period_bounds(period, "UTC")
    return period if now >= end + timedelta(hours=14) + grace else None


def _billable(org: Organization, period: str) -> bool:
    start, end = period_bounds(period, org.timezone)
    return has_billed_calls(org.pk, start, end) or has_unbilled_adjustments(org.pk, end)


def invoice_run_month(*, period: str | None = None, now=None) -> InvoiceRun | None:
    """Draft every active organization's invoice for ``period`` (default: the
    month due now). Organizations go in id order, each in its own
    transaction that also moves the run's cursor, so a worker killed
    halfway leaves every organization either fully drafted or untouched,
    and the rerun continues after the last one done."""
    period = period or run_period_due(now)
    if period is None:
        return None
    run, _created = InvoiceRun.objects.get_or_create(period=period)
    if run.status == RunStatus.DONE:
        return run
    while True:
        org = (
            Organization.objects.filter(is_active=True, pk__gt=run.processed_through)
            .order_by("pk")
            .first()
        )
        if org is None:
            break
        with transaction.atomic():
            run = InvoiceRun.objects.select_for_update().get(pk=run.pk)
            if run.processed_through >= org.pk:
                continue  # another worker did this one
            if _billable(org, period):
                invoice_draft(organization_id=org.pk, period=period)
                run.drafted += 1
            run.processed_through = org.pk
            run.save(update_fields=["processed_through", "drafted"])
    run.status = RunStatus.DONE
    run.finished_at = tz.now()
    run.save(update_fields=["status", "finished_at"])
    logger.info("invoice run %s: %s drafts", period, run.drafted)
    return run
