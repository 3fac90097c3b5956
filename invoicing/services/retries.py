"""What an outage or a lost webhook left pending, retried: ``payment_sync``
asks Stripe where one pending card payment stands, and the beat's
``payments_retry_pending`` sends pending refunds, collections and recent
top-ups again and collects invoices whose collection task was lost. Every
step is idempotent (see ``collection``), so a retry of work that was only
late changes nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db.models import F, Q
from django.utils import timezone as tz

from invoicing import stripe_adapter
from invoicing.models import (
    BillingProfile,
    Invoice,
    InvoiceStatus,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
)
from invoicing.services.collection import invoice_collect, payment_intent_apply
from invoicing.services.refunds import refund_execute

logger = logging.getLogger(__name__)


def payment_sync(*, payment_id: int) -> str:
    """Ask Stripe where a pending card payment stands (a webhook may be lost)."""
    payment = Payment.objects.filter(pk=payment_id).first()
    if payment is None or not payment.stripe_payment_intent_id:
        return "nothing_to_sync"
    if payment.kind == PaymentKind.REFUND:
        return refund_execute(payment_id=payment_id)
    return payment_intent_apply(
        intent=stripe_adapter.payment_intent_retrieve(payment.stripe_payment_intent_id)
    )


# How many never-collected invoices one beat run looks at (each costs a Stripe call).
LOST_COLLECTIONS_PER_RUN = 100


def _lost_collections(*, issued_before) -> list[int]:
    """Finalized invoices with something due whose collection never started:
    the task was lost before it wrote its payment row (the broker was down
    at finalization). Only organizations with a Stripe customer, and only
    invoices with no card attempt and no pending or succeeded payment at all
    (a declined card is not charged again by the beat; finance decides)."""
    attempted = Payment.objects.filter(kind=PaymentKind.INVOICE).filter(
        Q(method=PaymentMethod.STRIPE)
        | Q(status__in=[PaymentStatus.PENDING, PaymentStatus.SUCCEEDED, PaymentStatus.DISPUTED])
    )
    customers = BillingProfile.objects.exclude(stripe_customer_id="")
    candidates = (
        Invoice.objects.filter(
            status=InvoiceStatus.FINALIZED,
            issued_at__lt=issued_before,
            organization_id__in=customers.values("organization_id"),
        )
        .exclude(pk__in=attempted.filter(invoice__isnull=False).values("invoice_id"))
        .filter(amount_due_initial_minor__gt=F("due_reduced_minor") + F("paid_minor"))
        .defer("pdf", "buyer")
        .order_by("issued_at", "pk")
    )
    found, has_card = [], {}
    for invoice in candidates[: LOST_COLLECTIONS_PER_RUN * 2]:
        if invoice.amount_due_minor <= 0:
            continue
        org_id = invoice.organization_id
        if org_id not in has_card:
            customer = customers.get(organization_id=org_id).stripe_customer_id
            has_card[org_id] = bool(
                stripe_adapter.customer_default_payment_method(customer_id=customer)
            )
        if has_card[org_id]:
            found.append(invoice.pk)
        if len(found) >= LOST_COLLECTIONS_PER_RUN:
            break
    return found


def payments_retry_pending(
    *, older_than_seconds: int = 300, topup_days: int = 2, lost_after_seconds: int = 1800
) -> dict:
    """Retry what an outage or a lost webhook left pending: card refunds,
    invoice collections, and recent top-ups (a sync with Stripe). Rows
    touched in the last ``older_than_seconds`` are left to whoever is
    working on them. Then collect finalized invoices, issued more than
    ``lost_after_seconds`` ago, whose collection task was lost before it
    wrote a payment (``invoice_collect`` is idempotent, so a task that was
    only late changes nothing). Stops at the first outage (the next beat
    goes on)."""
    done = {
        "refunds": 0,
        "collections": 0,
        "lost_collections": 0,
        "topups": 0,
        "unavailable": False,
    }
    if not stripe_adapter.enabled():
        return done
    cutoff = tz.now() - timedelta(seconds=older_than_seconds)
    pending = Payment.objects.filter(
        method=PaymentMethod.STRIPE, status=PaymentStatus.PENDING, updated_at__lt=cutoff
    ).order_by("pk")
    work: list[tuple[str, Callable[..., str], dict[str, Any]]] = [
        ("refunds", refund_execute, {"payment_id": pk})
        for pk in pending.filter(kind=PaymentKind.REFUND).values_list("pk", flat=True)
    ]
    work += [
        ("collections", invoice_collect, {"invoice_id": pk})
        for pk in pending.filter(kind=PaymentKind.INVOICE)
        .values_list("invoice_id", flat=True)
        .distinct()
    ]
    work += [
        ("topups", payment_sync, {"payment_id": pk})
        for pk in pending.filter(
            kind=PaymentKind.TOP_UP, created_at__gte=tz.now() - timedelta(days=topup_days)
        ).values_list("pk", flat=True)
    ]
    if _run(work, done):
        try:
            lost = _lost_collections(issued_before=tz.now() - timedelta(seconds=lost_after_seconds))
        except stripe_adapter.StripeUnavailable:
            done["unavailable"] = True
            return done
        if lost:
            logger.warning("collecting %s invoices whose collection was lost: %s", len(lost), lost)
        _run([("lost_collections", invoice_collect, {"invoice_id": pk}) for pk in lost], done)
    return done


def _run(work: list, done: dict) -> bool:
    """Run the retries in order, counting them in ``done``; False at an outage."""
    for name, fn, kwargs in work:
        try:
            fn(**kwargs)
        except stripe_adapter.StripeUnavailable:
            done["unavailable"] = True
            return False
        except Exception:  # one bad row must not stop the others; logged for finance
            logger.exception("retrying %s %s failed", name, kwargs)
            continue
        done[name] += 1
    return True
