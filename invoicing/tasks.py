"""Celery tasks: thin calls into the services. Tasks import services;
services enqueue a task by its name (``console.kernel.celery.registered_task``) and
never import this module."""

from __future__ import annotations

from celery import shared_task

from invoicing import stripe_adapter
from invoicing.services import (
    invoice_collect,
    invoice_run_month,
    invoices_notify_overdue,
    payments_retry_pending,
    refund_execute,
    sla,
)


@shared_task(name="invoicing.run_monthly", acks_late=True, reject_on_worker_lost=True)
def run_monthly(period: str | None = None) -> int:
    run = invoice_run_month(period=period)
    return run.drafted if run else 0


@shared_task(
    name="invoicing.collect_invoice",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=8,
)
def collect_invoice(self, invoice_id: int) -> str:
    try:
        return invoice_collect(invoice_id=invoice_id)
    except stripe_adapter.StripeUnavailable as exc:
        raise self.retry(exc=exc, countdown=min(3600, 30 * 2**self.request.retries)) from exc


@shared_task(
    name="invoicing.execute_refund",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=8,
)
def execute_refund(self, payment_id: int) -> str:
    """Send a pending card refund (a credit note on a card-paid invoice) to
    Stripe; an outage retries with a backoff, and the beat retry
    (``retry_pending_payments``) picks up whatever is still pending."""
    try:
        return refund_execute(payment_id=payment_id)
    except stripe_adapter.StripeUnavailable as exc:
        raise self.retry(exc=exc, countdown=min(3600, 30 * 2**self.request.retries)) from exc


@shared_task(
    name="invoicing.retry_pending_payments",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=600,
    time_limit=660,
)
def retry_pending_payments() -> dict:
    """Beat: card refunds, collections and top-ups an outage or a lost
    webhook left pending, and finalized invoices whose collection task was
    lost before it started (a no-op while Stripe is off)."""
    return payments_retry_pending()


@shared_task(name="invoicing.sla_evaluate_closed", acks_late=True, reject_on_worker_lost=True)
def sla_evaluate_closed() -> int:
    """Month close of the SLA ledger: each organization's month just ended,
    evaluated once (a breach drafts a credit for finance to approve)."""
    return sla.sla_evaluate_closed()


@shared_task(name="invoicing.notify_overdue", acks_late=True, soft_time_limit=600, time_limit=660)
def notify_overdue() -> int:
    """Beat, hourly: ``invoice.overdue`` for each finalized invoice past its
    due date with an amount due, once per invoice."""
    return invoices_notify_overdue()
