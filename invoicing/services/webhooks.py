"""Stripe's events, received: stored once and dispatched to the service
their type names. The view (``invoicing.webhooks``) checks the signature
first and only then calls ``stripe_event_receive``.

* The event id is stored (``StripeEvent``, unique) in the same transaction
  as its effect, so a replay finds it and changes nothing, and a handler
  that crashes stores nothing (Stripe sends it again).
* One handler per type, each a call into a payment service (``collection``,
  ``refunds``, ``disputes``; ``cards`` for ``setup_intent.*``: a card saved
  on file), which checks the object against our own rows before anything
  moves. Other types, and objects that are not ours, are stored and change
  nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from invoicing import stripe_adapter
from invoicing.models import StripeEvent
from invoicing.services.cards import card_setup_apply
from invoicing.services.collection import payment_intent_apply
from invoicing.services.disputes import dispute_apply
from invoicing.services.refunds import refund_apply
from invoicing.stripe_adapter import Intent, Refund, SetupIntent

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StripeEventReceipt:
    """What receiving an event did: ``duplicate`` when its id was stored
    already (nothing done), else the handler's ``outcome``."""

    outcome: str = ""
    duplicate: bool = False


def _payment_intent(obj: dict) -> str:
    return payment_intent_apply(intent=Intent.from_stripe(obj))


def _setup_intent(obj: dict) -> str:
    return card_setup_apply(setup_intent=SetupIntent.from_stripe(obj))


def _refund(obj: dict) -> str:
    return refund_apply(refund=Refund.from_stripe(obj))


def _charge_refunded(obj: dict) -> str:
    # Older API versions embed the charge's refunds; newer ones do not, and
    # then each refund also arrives as its own refund.updated event.
    refunds = ((obj.get("refunds") or {}).get("data")) or []
    outcomes = [_refund(r) for r in refunds if isinstance(r, dict) and r.get("id")]
    return ", ".join(outcomes) or "no embedded refunds (refund.updated follows)"


def _dispute(obj: dict) -> str:
    pi = obj.get("payment_intent")
    pi = pi.get("id") if isinstance(pi, dict) else pi
    if not pi and obj.get("charge"):
        charge = obj["charge"]
        pi = stripe_adapter.charge_payment_intent(
            charge if isinstance(charge, str) else charge["id"]
        )
    if not pi:
        return "dispute without a PaymentIntent; ignored"
    return dispute_apply(
        payment_intent_id=pi,
        dispute_id=obj.get("id") or "",
        amount_minor=int(obj.get("amount") or 0),
        reason=obj.get("reason") or "",
    )


HANDLERS = {
    "payment_intent.succeeded": _payment_intent,
    "payment_intent.payment_failed": _payment_intent,
    "payment_intent.canceled": _payment_intent,
    "charge.refunded": _charge_refunded,
    "refund.created": _refund,
    "refund.updated": _refund,
    "refund.failed": _refund,
    "charge.dispute.created": _dispute,
    "setup_intent.succeeded": _setup_intent,
    "setup_intent.setup_failed": _setup_intent,
}


def stripe_event_receive(*, event: dict) -> StripeEventReceipt:
    """Store a verified Stripe event (a dict with ``id`` and ``type``) and
    apply it, in one transaction. A replayed id returns a duplicate receipt
    and changes nothing. ``StripeUnavailable`` (a handler needed Stripe, a
    dispute's charge say) rolls it all back, so the event can come again."""
    event_id, type_ = str(event["id"])[:255], str(event["type"])[:64]
    obj = (event.get("data") or {}).get("object") or {}
    handler = HANDLERS.get(type_)
    with transaction.atomic():
        try:
            with transaction.atomic():
                stored = StripeEvent.objects.create(event_id=event_id, type=type_, payload=event)
        except IntegrityError:
            logger.info("stripe event %s (%s) replayed; nothing to do", event_id, type_)
            return StripeEventReceipt(duplicate=True)
        if handler is None:
            outcome = "ignored: unhandled type"
            logger.info("stripe event %s of unhandled type %s acknowledged", event_id, type_)
        elif not isinstance(obj, dict) or not obj.get("id"):
            outcome = "ignored: no object"
        else:
            outcome = handler(obj)
            stored.handled = True
        stored.outcome = str(outcome)[:255]
        stored.save(update_fields=["handled", "outcome"])
    logger.info("stripe event %s (%s): %s", event_id, type_, stored.outcome)
    return StripeEventReceipt(outcome=stored.outcome)
