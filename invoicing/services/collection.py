"""Card payments through Stripe: collecting a finalized invoice off-session,
and applying what Stripe says about a PaymentIntent (an invoice's or a
top-up's) to our ``Payment``. Refunds are in ``refunds``, chargebacks in
``disputes``, top-ups in ``topups``, the beat's retry and sync in
``retries``.

Without ``STRIPE_SECRET_KEY`` none of this runs (finance records payments
by hand with ``invoice_mark_paid`` and ``topup_record_manual``).

Never twice:

* A ``Payment`` row is committed *before* Stripe is called, and the call's
  idempotency key is made from its id, so a retry after a timeout, a crash
  or an outage reuses the same PaymentIntent or Refund. An invoice has at
  most one pending card payment; collecting again reuses it.
* Calls that change a payment hold its row lock (and the invoice's, taken
  first, the order every invoicing service uses), so the Celery task, the
  beat retry and a webhook can race and only one of them acts.
* Stripe's word is checked against our row before anything moves: the
  PaymentIntent id, and the metadata's payment and organization ids, amount,
  currency and customer must all match ``Payment`` and ``BillingProfile``. The
  money lands where *our* row says, never where metadata says.
* The prepaid balance rises only when Stripe says a top-up succeeded: one
  ledger entry whose reference is the PaymentIntent id.
"""

from __future__ import annotations

import logging

from django.db import transaction

from accounts.facade import NotFound
from console.kernel.money import format_amount
from invoicing import stripe_adapter
from invoicing.models import (
    BillingProfile,
    Invoice,
    InvoiceStatus,
    LedgerKind,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
)
from invoicing.money import from_minor
from invoicing.services import outbound
from invoicing.services._common import event, local_today
from invoicing.services.invoices import _apply_payment
from invoicing.services.ledger import ledger_entry_create
from invoicing.stripe_adapter import Intent, StripeDeclined, StripeRejected

logger = logging.getLogger(__name__)

# The payments a PaymentIntent charges (a refund is a Stripe Refund instead).
CHARGED = (PaymentKind.INVOICE, PaymentKind.TOP_UP)


def _fail(payment: Payment, message: str, invoice: Invoice | None = None, **params) -> None:
    payment.status = PaymentStatus.FAILED
    payment.failure_message = (message or "Failed.")[:255]
    payment.save(update_fields=["status", "failure_message", "stripe_payment_intent_id"])
    if invoice is not None:
        kind = "refund_failed" if payment.kind == PaymentKind.REFUND else "payment_failed"
        event(invoice, kind, payment_id=payment.pk, message=payment.failure_message, **params)
    logger.warning("payment %s failed: %s", payment.pk, payment.failure_message)


# --- applying what Stripe says (collection, webhooks, the beat sync) ----------


def _intent_mismatch(payment: Payment, intent: Intent) -> str:
    """Why ``intent`` is not the PaymentIntent of ``payment`` ('' when it is)."""
    if payment.stripe_payment_intent_id and payment.stripe_payment_intent_id != intent.id:
        return "another PaymentIntent"
    if intent.metadata.get("payment_id") != str(payment.pk):
        return "metadata payment_id"
    if intent.metadata.get("organization_id") != str(payment.organization_id):
        return "metadata organization_id"
    if intent.amount != payment.amount_minor or intent.currency != payment.currency.lower():
        return "amount or currency"
    customer = (
        BillingProfile.objects.filter(organization_id=payment.organization_id)
        .values_list("stripe_customer_id", flat=True)
        .first()
    )
    if not customer or intent.customer != customer:
        return "customer"
    return ""


def _settle_intent(payment: Payment, intent: Intent, invoice: Invoice | None) -> str:
    """Apply a PaymentIntent's state to its payment (rows locked, checked)."""
    if intent.status == "succeeded":
        if payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.DISPUTED):
            return "already_succeeded"
        payment.status = PaymentStatus.SUCCEEDED
        payment.failure_message = ""
        payment.stripe_payment_intent_id = intent.id
        payment.paid_on = local_today(payment.organization.timezone)
        payment.save(
            update_fields=["status", "failure_message", "stripe_payment_intent_id", "paid_on"]
        )
        if payment.kind == PaymentKind.INVOICE and invoice is not None:
            was = invoice.status
            _apply_payment(invoice, payment.amount_minor)
            event(
                invoice,
                "payment_succeeded",
                payment_id=payment.pk,
                amount=format_amount(payment.amount_minor, payment.currency, unit="minor"),
                payment_intent=intent.id,
            )
            if was not in (InvoiceStatus.FINALIZED, InvoiceStatus.UNCOLLECTIBLE):
                logger.warning("card payment %s landed on a %s invoice", payment.pk, was)
        elif payment.kind == PaymentKind.TOP_UP:
            ledger_entry_create(
                organization_id=payment.organization_id,
                kind=LedgerKind.TOP_UP,
                amount=from_minor(payment.amount_minor, payment.currency),
                reference=intent.id,
                reason=f"Card top-up (payment {payment.pk})",
                created_by=payment.created_by,
                currency=payment.currency,
            )
            outbound.topup_succeeded(payment)
        return "succeeded"
    # requires_payment_method is a failure only after an attempt (a top-up
    # waiting for its page has it too, without an error).
    failed = intent.status == "canceled" or (
        intent.status == "requires_payment_method" and intent.failure_message
    )
    if failed:
        if payment.status != PaymentStatus.PENDING:
            return f"already_{payment.status}"
        payment.stripe_payment_intent_id = intent.id
        _fail(payment, intent.failure_message or f"Payment {intent.status}.", invoice)
        return "failed"
    return intent.status  # processing, requires_action, requires_confirmation: wait


def _locked_payment_for_intent(intent: Intent) -> tuple[Payment | None, Invoice | None]:
    """Our payment for a PaymentIntent, locked (invoice first), or ``(None, None)``."""
    found = Payment.objects.filter(stripe_payment_intent_id=intent.id, kind__in=CHARGED).first()
    if found is None:
        # The webhook can overtake our own save of the PaymentIntent id: the
        # metadata names the row, and _intent_mismatch checks it all.
        pid = intent.metadata.get("payment_id", "")
        if pid.isdigit():
            found = Payment.objects.filter(
                pk=int(pid), kind__in=CHARGED, method=PaymentMethod.STRIPE
            ).first()
    if found is None:
        return None, None
    invoice = None
    if found.invoice_id:
        invoice = Invoice.objects.select_for_update().get(pk=found.invoice_id)
    return Payment.objects.select_for_update().get(pk=found.pk), invoice


def payment_intent_apply(*, intent: Intent) -> str:
    """What a webhook (``payment_intent.*``) or a sync says about a
    PaymentIntent, applied to our payment: idempotent, and nothing moves
    unless the intent matches our row."""
    with transaction.atomic():
        payment, invoice = _locked_payment_for_intent(intent)
        if payment is None:
            logger.info("stripe PaymentIntent %s is not ours; ignored", intent.id)
            return "unknown_payment_intent"
        why = _intent_mismatch(payment, intent)
        if why:
            logger.warning(
                "stripe PaymentIntent %s does not match payment %s (%s); ignored",
                intent.id,
                payment.pk,
                why,
            )
            return f"mismatch: {why}"
        return _settle_intent(payment, intent, invoice)


# --- collecting an invoice ----------------------------------------------------


def _pending_collection(invoice: Invoice) -> Payment | None:
    return (
        Payment.objects.select_for_update()
        .filter(
            invoice=invoice,
            kind=PaymentKind.INVOICE,
            method=PaymentMethod.STRIPE,
            status=PaymentStatus.PENDING,
        )
        .order_by("pk")
        .first()
    )


def invoice_collect(*, invoice_id: int) -> str:
    """Charge a finalized invoice's amount due to the customer's default card,
    off-session. Returns what happened (``succeeded``, ``failed``,
    ``no_payment_method``, ``not_open``, ``nothing_due``, ``stripe_off``,
    or a PaymentIntent status still in progress such as ``processing``).

    A Stripe outage raises ``StripeUnavailable`` (the Celery task retries)
    and leaves the invoice finalized with one pending payment, which the
    retry reuses: same row, same idempotency key, never a second charge."""
    if not stripe_adapter.enabled():
        return "stripe_off"
    invoice = Invoice.objects.filter(pk=invoice_id).first()
    if invoice is None:
        raise NotFound("No such invoice.")
    # 1. The payment row, committed before Stripe hears of it.
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice_id)
        if invoice.status != InvoiceStatus.FINALIZED:
            return "not_open"
        payment = _pending_collection(invoice)
        if payment is None:
            due = invoice.amount_due_minor
            if due <= 0:
                return "nothing_due"
            payment = Payment.objects.create(
                organization_id=invoice.organization_id,
                invoice=invoice,
                kind=PaymentKind.INVOICE,
                method=PaymentMethod.STRIPE,
                status=PaymentStatus.PENDING,
                currency=invoice.currency,
                amount_minor=due,
                reference=invoice.number or "",
            )
            event(
                invoice,
                "collection_started",
                payment_id=payment.pk,
                amount=format_amount(due, invoice.currency, unit="minor"),
            )
    # 2. The charge, under the invoice's and the payment's locks.
    outage = None
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice_id)
        payment = Payment.objects.select_for_update().get(pk=payment.pk)
        if payment.status != PaymentStatus.PENDING:
            return f"already_{payment.status}"
        payment.attempts += 1
        payment.save(update_fields=["attempts"])
        try:
            return _charge(invoice, payment)
        except stripe_adapter.StripeUnavailable as exc:
            payment.failure_message = f"Attempt {payment.attempts}: {exc.message}"[:255]
            payment.save(update_fields=["failure_message"])
            outage = exc
    raise outage


def _charge(invoice: Invoice, payment: Payment) -> str:
    if payment.stripe_payment_intent_id:
        intent = stripe_adapter.payment_intent_retrieve(payment.stripe_payment_intent_id)
        return _settle_intent(payment, intent, invoice)
    due = invoice.amount_due_minor
    if due <= 0:
        _fail(payment, "Nothing left to collect.", invoice)
        return "nothing_due"
    if due != payment.amount_minor:  # a credit note reduced it meanwhile
        payment.amount_minor = due
        payment.save(update_fields=["amount_minor"])
    customer_id = stripe_adapter.customer_ensure(organization_id=invoice.organization_id)
    method = stripe_adapter.customer_default_payment_method(customer_id=customer_id)
    if method is None:
        _fail(payment, "No card on file: add one, or pay by bank transfer.", invoice)
        return "no_payment_method"
    try:
        intent = stripe_adapter.payment_intent_create(
            amount_minor=payment.amount_minor,
            currency=payment.currency,
            customer_id=customer_id,
            payment_method=method,
            off_session=True,
            idempotency_key=f"invoice-{invoice.pk}-pi-{payment.pk}",
            metadata={
                "kind": str(PaymentKind.INVOICE),
                "payment_id": payment.pk,
                "invoice_id": invoice.pk,
                "invoice_number": invoice.number or "",
                "organization_id": invoice.organization_id,
            },
        )
    except (StripeDeclined, StripeRejected) as exc:
        payment.stripe_payment_intent_id = exc.payment_intent_id
        _fail(payment, exc.message, invoice, code=exc.stripe_code)
        return "failed"
    payment.stripe_payment_intent_id = intent.id
    payment.failure_message = ""
    payment.save(update_fields=["stripe_payment_intent_id", "failure_message"])
    return _settle_intent(payment, intent, invoice)
