"""Chargebacks: Stripe says a card payment of ours is disputed. The payment
is marked so, with the invoice's event and the audit log; money moves only
once finance decides (a credit note or a ledger adjustment)."""

from __future__ import annotations

import logging

from django.db import transaction

from accounts.facade import Organization, audit_record
from console.kernel.money import format_amount
from invoicing.models import Invoice, Payment, PaymentStatus
from invoicing.services._common import event
from invoicing.services.collection import CHARGED

logger = logging.getLogger(__name__)


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
        amount = (
            format_amount(amount_minor, payment.currency, unit="minor")
            if amount_minor is not None
            else ""
        )
        params = {"dispute": dispute_id, "amount": amount, "reason": reason}
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
