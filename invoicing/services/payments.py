"""Card payments through Stripe: collecting finalized invoices, refunds of
card-paid invoices, prepaid top-ups, and what Stripe's webhooks tell us.

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
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone as tz

from accounts.audit import audit_record
from accounts.errors import Conflict, NotFound, ValidationFailed
from accounts.models import BillingMode, Organization
from accounts.permissions import Perm
from console.money import format_amount
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
from invoicing.money import PPM, from_minor, to_minor
from invoicing.services._common import event
from invoicing.services.invoices import _apply_payment
from invoicing.services.ledger import ledger_entry_create
from invoicing.stripe_adapter import Intent, Refund, StripeDeclined, StripeRejected

logger = logging.getLogger(__name__)

CHARGED = (PaymentKind.INVOICE, PaymentKind.TOP_UP)
# Stripe's smallest charge is about half a currency unit; we ask for one whole unit.
MIN_TOP_UP_UNITS = 1


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
        payment.save(update_fields=["status", "failure_message", "stripe_payment_intent_id"])
        if payment.kind == PaymentKind.INVOICE and invoice is not None:
            was = invoice.status
            _apply_payment(invoice, payment.amount_minor)
            event(
                invoice,
                "payment_succeeded",
                payment_id=payment.pk,
                amount_minor=payment.amount_minor,
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
            event(invoice, "collection_started", payment_id=payment.pk, amount_minor=due)
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
                "kind": PaymentKind.INVOICE.value,
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


# --- refunds --------------------------------------------------------------------


def _refund_mismatch(payment: Payment, refund: Refund) -> str:
    if payment.stripe_refund_id and payment.stripe_refund_id != refund.id:
        return "another refund"
    if refund.payment_intent != payment.stripe_payment_intent_id:
        return "PaymentIntent"
    if refund.metadata.get("payment_id") != str(payment.pk):
        return "metadata payment_id"
    if refund.metadata.get("organization_id") != str(payment.organization_id):
        return "metadata organization_id"
    if refund.amount != payment.amount_minor or refund.currency != payment.currency.lower():
        return "amount or currency"
    return ""


def _settle_refund(payment: Payment, refund: Refund) -> str:
    invoice = payment.invoice
    if refund.status == "succeeded":
        if payment.status != PaymentStatus.PENDING:
            return f"already_{payment.status}"
        payment.status = PaymentStatus.SUCCEEDED
        payment.failure_message = ""
        payment.save(update_fields=["status", "failure_message"])
        if invoice is not None:
            event(invoice, "refunded", payment_id=payment.pk, amount_minor=payment.amount_minor)
        return "succeeded"
    if refund.status in ("failed", "canceled"):
        if payment.status == PaymentStatus.FAILED:
            return "already_failed"
        _fail(payment, refund.failure_reason or f"Refund {refund.status}.", invoice)
        return "failed"
    return refund.status  # pending, requires_action


def refund_execute(*, payment_id: int) -> str:
    """Send a pending card refund (made by ``credit_note_create`` on a card-
    paid invoice) to Stripe, as a partial refund of the invoice's
    PaymentIntent. Idempotent: a settled refund is left alone, a sent one is
    only looked up, and before sending we look for a refund that names this
    row (the idempotency key is ``refund-payment-{id}``). A Stripe outage
    raises ``StripeUnavailable``; the refund stays pending for the retry."""
    if not stripe_adapter.enabled():
        return "stripe_off"
    outage = None
    with transaction.atomic():
        payment = (
            Payment.objects.select_for_update(of=("self",))
            .select_related("invoice")
            .filter(pk=payment_id)
            .first()
        )
        if payment is None:
            raise NotFound("No such payment.")
        if payment.kind != PaymentKind.REFUND or payment.method != PaymentMethod.STRIPE:
            raise Conflict("This payment is not a card refund.")
        if payment.status != PaymentStatus.PENDING:
            return f"already_{payment.status}"
        if not payment.stripe_payment_intent_id:
            _fail(payment, "No card payment to refund.", payment.invoice)
            return "failed"
        if payment.stripe_refund_id:
            refund = stripe_adapter.refund_retrieve(payment.stripe_refund_id)
        else:
            refund = stripe_adapter.refund_find(
                payment_intent_id=payment.stripe_payment_intent_id,
                metadata_key="payment_id",
                value=str(payment.pk),
            )
        if refund is None:
            payment.attempts += 1
            try:
                refund = stripe_adapter.refund_create(
                    payment_intent_id=payment.stripe_payment_intent_id,
                    amount_minor=payment.amount_minor,
                    idempotency_key=f"refund-payment-{payment.pk}",
                    metadata={
                        "kind": PaymentKind.REFUND.value,
                        "payment_id": payment.pk,
                        "organization_id": payment.organization_id,
                        "credit_note": payment.reference,
                    },
                )
            except stripe_adapter.StripeUnavailable as exc:
                payment.failure_message = f"Attempt {payment.attempts}: {exc.message}"[:255]
                payment.save(update_fields=["attempts", "failure_message"])
                outage = exc
            except (StripeDeclined, StripeRejected) as exc:
                payment.save(update_fields=["attempts"])
                _fail(payment, exc.message, payment.invoice, code=exc.stripe_code)
                return "failed"
        if outage is None:
            why = _refund_mismatch(payment, refund)
            if why:
                logger.error("refund %s does not match payment %s (%s)", refund.id, payment.pk, why)
                return f"mismatch: {why}"
            payment.stripe_refund_id = refund.id
            payment.save(update_fields=["attempts", "stripe_refund_id"])
            return _settle_refund(payment, refund)
    raise outage


def refund_apply(*, refund: Refund) -> str:
    """What a webhook (``refund.*``, ``charge.refunded``) says about a refund."""
    with transaction.atomic():
        found = Payment.objects.filter(kind=PaymentKind.REFUND, stripe_refund_id=refund.id).first()
        if found is None:
            pid = refund.metadata.get("payment_id", "")
            if pid.isdigit():
                found = Payment.objects.filter(
                    pk=int(pid), kind=PaymentKind.REFUND, method=PaymentMethod.STRIPE
                ).first()
        if found is None:
            logger.info("stripe refund %s is not ours; ignored", refund.id)
            return "unknown_refund"
        payment = (
            Payment.objects.select_for_update(of=("self",))
            .select_related("invoice")
            .get(pk=found.pk)
        )
        why = _refund_mismatch(payment, refund)
        if why:
            logger.warning("refund %s does not match payment %s (%s)", refund.id, payment.pk, why)
            return f"mismatch: {why}"
        if not payment.stripe_refund_id:
            payment.stripe_refund_id = refund.id
            payment.save(update_fields=["stripe_refund_id"])
        return _settle_refund(payment, refund)


# --- disputes -------------------------------------------------------------------


def dispute_apply(*, payment_intent_id: str, dispute_id: str, amount_minor: int, reason: str):
    """A chargeback opened on one of our card payments: the payment is marked
    disputed, the invoice and the audit log say so. Money is not moved here:
    finance answers the dispute in Stripe and corrects with a credit note or
    a ledger adjustment once it is decided."""
    with transaction.atomic():
        found = Payment.objects.filter(
            stripe_payment_intent_id=payment_intent_id, kind__in=CHARGED
        ).first()
        if found is None:
            logger.info("stripe dispute %s on an unknown payment; ignored", dispute_id)
            return "unknown_payment_intent"
        if found.invoice_id:
            Invoice.objects.select_for_update().get(pk=found.invoice_id)
        payment = (
            Payment.objects.select_for_update(of=("self",))
            .select_related("invoice")
            .get(pk=found.pk)
        )
        if payment.status == PaymentStatus.DISPUTED:
            return "already_disputed"
        payment.status = PaymentStatus.DISPUTED
        payment.failure_message = f"Disputed ({reason or 'no reason given'}): {dispute_id}"[:255]
        payment.save(update_fields=["status", "failure_message"])
        params = {"dispute": dispute_id, "amount_minor": amount_minor, "reason": reason}
        if payment.invoice is not None:
            event(payment.invoice, "payment_disputed", payment_id=payment.pk, **params)
        audit_record(
            actor=None,
            organization=Organization.objects.get(pk=payment.organization_id),
            action="payment.disputed",
            target=payment,
            params=params,
        )
        logger.warning("payment %s disputed: %s", payment.pk, params)
        return "disputed"


# --- top-ups --------------------------------------------------------------------


def _topup_checks(actor, amount_minor) -> Organization:
    actor.require(Perm.BILLING_MANAGE)
    org = Organization.objects.get(pk=actor.organization_id)
    if org.billing_mode != BillingMode.PREPAID:
        raise ValidationFailed.from_fields(
            {"__all__": "Only prepaid organizations top up; this one is invoiced monthly."}
        )
    if type(amount_minor) is not int:
        raise ValidationFailed.from_fields(
            {"amount": f"Give the amount as a whole number of {org.currency}'s smallest unit."}
        )
    if amount_minor <= 0:
        raise ValidationFailed.from_fields({"amount": "Top up a positive amount."})
    lowest = to_minor(MIN_TOP_UP_UNITS * PPM, org.currency)
    if amount_minor < lowest:
        least = format_amount(from_minor(lowest, org.currency), org.currency)
        raise ValidationFailed.from_fields({"amount": f"A top-up is at least {least}."})
    highest = to_minor(settings.INVOICING_MAX_TOP_UP * PPM, org.currency)
    if amount_minor > highest:
        most = format_amount(from_minor(highest, org.currency), org.currency)
        raise ValidationFailed.from_fields({"amount": f"A single top-up is at most {most}."})
    return org


def _new_topup(org, actor, amount_minor: int, *, request_key: str = "", **audit) -> Payment:
    """A pending card top-up (its row committed before Stripe hears of it)
    and its audit event."""
    payment = Payment.objects.create(
        organization=org,
        kind=PaymentKind.TOP_UP,
        method=PaymentMethod.STRIPE,
        status=PaymentStatus.PENDING,
        currency=org.currency,
        amount_minor=amount_minor,
        attempts=1,
        request_key=request_key,
        created_by=actor.user,
    )
    audit_record(
        actor=actor,
        action="topup.create",
        target=payment,
        params={"amount_minor": amount_minor, "currency": org.currency, **audit},
    )
    return payment


def _topup_intent(payment: Payment, customer_id: str, **options) -> Intent:
    """The top-up's PaymentIntent (idempotency key ``topup-{payment.id}-pi``,
    the metadata a webhook finds the row by)."""
    return stripe_adapter.payment_intent_create(
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        customer_id=customer_id,
        idempotency_key=f"topup-{payment.pk}-pi",
        metadata={
            "kind": PaymentKind.TOP_UP.value,
            "payment_id": payment.pk,
            "organization_id": payment.organization_id,
        },
        **options,
    )


def topup_create(*, actor, amount_minor: int) -> Payment:
    """Start a card top-up of ``amount_minor`` (the currency's minor unit) for
    the actor's prepaid organization: a pending ``TOP_UP`` payment and its
    PaymentIntent (idempotency key ``topup-{payment.id}-pi``).

    The returned payment carries ``client_secret`` (not stored: Stripe.js
    confirms a card entered on the page with it); later,
    ``topup_client_secret`` fetches it again. The console charges the card
    on file instead (``services.cards.topup_charge_card``). The balance rises
    only when the ``payment_intent.succeeded`` webhook arrives."""
    org = _topup_checks(actor, amount_minor)
    if not stripe_adapter.enabled():
        raise ValidationFailed.from_fields(
            {"__all__": "Card top-ups are off (Stripe is not configured); pay by bank transfer."}
        )
    customer_id = stripe_adapter.customer_ensure(organization_id=org.pk)
    with transaction.atomic():
        payment = _new_topup(org, actor, amount_minor)
        intent = _topup_intent(payment, customer_id)
        payment.stripe_payment_intent_id = intent.id
        payment.save(update_fields=["stripe_payment_intent_id"])
    payment.client_secret = intent.client_secret
    return payment


def topup_client_secret(*, actor, payment_id: int) -> str:
    """The client secret of a pending card top-up of the actor's organization,
    for the page that confirms it (fetched from Stripe, never stored)."""
    actor.require(Perm.BILLING_MANAGE)
    payment = Payment.objects.filter(
        pk=payment_id,
        organization_id=actor.organization_id,
        kind=PaymentKind.TOP_UP,
        method=PaymentMethod.STRIPE,
    ).first()
    if payment is None or not payment.stripe_payment_intent_id:
        raise NotFound("No such top-up.")
    if payment.status not in (PaymentStatus.PENDING, PaymentStatus.FAILED):  # failed: try again
        raise Conflict(f"This top-up is {payment.get_status_display().lower()} already.")
    return stripe_adapter.payment_intent_retrieve(payment.stripe_payment_intent_id).client_secret


def topup_record_manual(*, actor, amount_minor: int, reference: str) -> Payment:
    """Finance records a top-up paid by bank transfer: credited at once.
    The transfer's reference makes it idempotent (recording it twice returns
    the first payment)."""
    org = _topup_checks(actor, amount_minor)
    reference = (reference or "").strip()[:100]
    if not reference:
        raise ValidationFailed.from_fields({"reference": "Give the transfer's reference."})
    with transaction.atomic():
        Organization.objects.select_for_update().get(pk=org.pk)
        existing = Payment.objects.filter(
            organization=org,
            kind=PaymentKind.TOP_UP,
            method=PaymentMethod.BANK_TRANSFER,
            reference=reference,
        ).first()
        if existing is not None:
            return existing
        payment = Payment.objects.create(
            organization=org,
            kind=PaymentKind.TOP_UP,
            method=PaymentMethod.BANK_TRANSFER,
            status=PaymentStatus.SUCCEEDED,
            currency=org.currency,
            amount_minor=amount_minor,
            reference=reference,
            created_by=actor.user,
        )
        ledger_entry_create(
            organization_id=org.pk,
            kind=LedgerKind.TOP_UP,
            amount=from_minor(amount_minor, org.currency),
            reference=f"transfer:{reference}",
            reason=f"Bank transfer top-up {reference}",
            created_by=actor.user,
            currency=org.currency,
        )
        audit_record(
            actor=actor,
            action="topup.record_manual",
            target=payment,
            params={"amount_minor": amount_minor, "reference": reference},
        )
    return payment


# --- the beat retry ---------------------------------------------------------------


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
    work = [
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
