"""Card refunds through Stripe: a credit note on a card-paid invoice makes a
pending ``REFUND`` payment (``credit_notes``); ``refund_execute`` sends it
to Stripe as a partial refund of the invoice's PaymentIntent, and
``refund_apply`` applies what Stripe's webhooks say about it; a refund by
bank transfer is marked paid by finance (``refund_mark_paid``). Same rules as
``collection``: the row is committed before Stripe is called, its id makes
the idempotency key, and Stripe's word is checked against the row."""

from __future__ import annotations

import logging
from datetime import date

from django.db import transaction
from django.utils.translation import gettext as _

from accounts.facade import Conflict, NotFound, Perm, ValidationFailed, audit_record
from console.kernel.money import format_amount
from invoicing import stripe_adapter
from invoicing.models import Invoice, Payment, PaymentKind, PaymentMethod, PaymentStatus
from invoicing.services._common import event, local_today
from invoicing.services._payments import paid_on_day, require_free_reference, save_with_reference
from invoicing.services.collection import _fail
from invoicing.stripe_adapter import Refund, StripeDeclined, StripeRejected

logger = logging.getLogger(__name__)


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
        payment.paid_on = local_today(payment.organization.timezone)
        payment.save(update_fields=["status", "failure_message", "paid_on"])
        if invoice is not None:
            shown = format_amount(payment.amount_minor, payment.currency, unit="minor")
            event(invoice, "refunded", payment_id=payment.pk, amount=shown)
        return "succeeded"
    if refund.status in ("failed", "canceled"):
        if payment.status == PaymentStatus.FAILED:
            return "already_failed"
        _fail(payment, refund.failure_reason or f"Refund {refund.status}.", invoice)
        return "failed"
    return refund.status  # pending, requires_action


def _lock_card_refund(payment_id: int) -> Payment:
    """The card refund's row, locked (with its invoice)."""
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
    return payment


def _known_refund(payment: Payment) -> stripe_adapter.Refund | None:
    """The Stripe refund already made for this row, if any: the one it
    records, else one whose metadata names it (sent before a crash)."""
    if payment.stripe_refund_id:
        return stripe_adapter.refund_retrieve(payment.stripe_refund_id)
    return stripe_adapter.refund_find(
        payment_intent_id=payment.stripe_payment_intent_id,
        metadata_key="payment_id",
        value=str(payment.pk),
    )


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
        payment = _lock_card_refund(payment_id)
        if payment.status != PaymentStatus.PENDING:
            return f"already_{payment.status}"
        if not payment.stripe_payment_intent_id:
            _fail(payment, "No card payment to refund.", payment.invoice)
            return "failed"
        refund = _known_refund(payment)
        if refund is None:
            payment.attempts += 1
            try:
                refund = stripe_adapter.refund_create(
                    payment_intent_id=payment.stripe_payment_intent_id,
                    amount_minor=payment.amount_minor,
                    idempotency_key=f"refund-payment-{payment.pk}",
                    metadata={
                        "kind": str(PaymentKind.REFUND),
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
        if refund is not None:  # found or made: no outage
            why = _refund_mismatch(payment, refund)
            if why:
                logger.error("refund %s does not match payment %s (%s)", refund.id, payment.pk, why)
                return f"mismatch: {why}"
            payment.stripe_refund_id = refund.id
            payment.save(update_fields=["attempts", "stripe_refund_id"])
            return _settle_refund(payment, refund)
    assert outage is not None  # no refund: an outage stopped it
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


def refund_mark_paid(*, actor, payment_id: int, reference: str, paid_on: date | None = None):
    """Finance paid a pending manual refund (a credit note's refund by bank
    transfer) out by hand: the refund is settled with the transfer's
    reference (unique in the organization, like every payment recorded by
    hand; the credit note stays linked) and the day it was paid (default
    today in the organization's time zone; not in the future, not before
    the credit note). Audited; the invoice's history says it too."""
    actor.require(Perm.BILLING_MANAGE)
    reference = (reference or "").strip()[:128]
    if not reference:
        raise ValidationFailed.from_fields({"reference": _("Give the transfer's reference.")})
    with transaction.atomic():
        found = Payment.objects.filter(
            pk=payment_id, organization_id=actor.organization_id, kind=PaymentKind.REFUND
        ).first()
        if found is None:
            raise NotFound("No such refund.")
        invoice = None
        if found.invoice_id:  # the invoice's lock first, the order every service takes
            invoice = Invoice.objects.select_for_update().get(pk=found.invoice_id)
        payment = (
            Payment.objects.select_for_update(of=("self",))
            .select_related("credit_note", "organization")
            .get(pk=found.pk)
        )
        if payment.method == PaymentMethod.STRIPE:
            raise Conflict(_("A card refund is paid by Stripe, not marked paid by hand."))
        if payment.status != PaymentStatus.PENDING:
            raise Conflict(
                _("This refund is %(status)s already.")
                % {"status": payment.get_status_display().lower()}
            )
        note = payment.credit_note
        day = paid_on_day(
            paid_on,
            timezone_name=payment.organization.timezone,
            not_before=note.created_at if note is not None else payment.created_at,
            not_before_what=_("the credit note was issued"),
        )
        require_free_reference(payment.organization_id, reference, exclude_pk=payment.pk)
        payment.reference = reference
        payment.paid_on = day
        payment.status = PaymentStatus.SUCCEEDED
        payment.failure_message = ""
        save_with_reference(
            payment, update_fields=["reference", "paid_on", "status", "failure_message"]
        )
        shown = format_amount(payment.amount_minor, payment.currency, unit="minor")
        params = {
            "credit_note": note.number if note is not None else "",
            "amount": shown,
            "reference": reference,
            "paid_on": day.isoformat(),
        }
        if invoice is not None:
            event(invoice, "refund_paid", actor, **params)
        audit_record(actor=actor, action="refund.mark_paid", target=payment, params=params)
    return payment
