"""Stripe's webhooks: ``POST /billing/stripe/webhook/``.

1. The signature (``Stripe-Signature: t=…,v1=…``, HMAC-SHA256 of
   ``f"{t}.{payload}"`` with ``STRIPE_WEBHOOK_SECRET``) and its age
   (``STRIPE_WEBHOOK_TOLERANCE_SECONDS``) are checked by stripe-python's
   ``Webhook.construct_event``; a bad or stale one is a 400 with a JSON error.
2. The event id is stored (``StripeEvent``, unique) in the same transaction
   as its effect, so a replay finds it and changes nothing (200), and a
   handler that crashes stores nothing (500: Stripe sends it again).
3. One handler per type, each a call into ``invoicing.services.payments``
   (``.cards`` for ``setup_intent.*``: a card saved on file), which checks
   the object against our own rows before anything moves.
   Other types, and objects that are not ours, are acknowledged (200) and
   change nothing.
"""

from __future__ import annotations

import json
import logging

import stripe
from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from invoicing.models import StripeEvent
from invoicing.services import cards, payments
from invoicing.stripe_adapter import Intent, Refund, SetupIntent

logger = logging.getLogger(__name__)


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def _payment_intent(obj: dict) -> str:
    return payments.payment_intent_apply(intent=Intent.from_stripe(obj))


def _setup_intent(obj: dict) -> str:
    return cards.card_setup_apply(setup_intent=SetupIntent.from_stripe(obj))


def _refund(obj: dict) -> str:
    return payments.refund_apply(refund=Refund.from_stripe(obj))


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
        from invoicing import stripe_adapter

        charge = obj["charge"]
        pi = stripe_adapter.charge_payment_intent(
            charge if isinstance(charge, str) else charge["id"]
        )
    if not pi:
        return "dispute without a PaymentIntent; ignored"
    return payments.dispute_apply(
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


def _verify(request: HttpRequest):
    """The event as a dict, or the 400/503 response that refuses it."""
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret:
        return None, _error(503, "not_configured", "Stripe webhooks are not configured here.")
    payload = request.body
    header = request.headers.get("Stripe-Signature", "")
    try:
        stripe.Webhook.construct_event(
            payload, header, secret, tolerance=settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS
        )
    except stripe.SignatureVerificationError as exc:
        # The library checks the signature first and the age after it.
        if str(exc).startswith("Timestamp outside the tolerance zone"):
            message = (
                "The signature's timestamp is older than "
                f"{settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS} seconds; refusing a replay."
            )
            logger.warning("stripe webhook refused: stale timestamp")
            return None, _error(400, "stale_timestamp", message)
        logger.warning("stripe webhook refused: %s", exc)
        return None, _error(400, "invalid_signature", f"Invalid Stripe signature: {exc}")
    except ValueError:
        return None, _error(400, "invalid_payload", "The body is not a JSON event.")
    try:
        data = json.loads(payload)
    except ValueError:
        return None, _error(400, "invalid_payload", "The body is not a JSON event.")
    if not isinstance(data, dict) or not data.get("id") or not data.get("type"):
        return None, _error(400, "invalid_payload", "An event needs an id and a type.")
    return data, None


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> JsonResponse:
    data, refused = _verify(request)
    if refused is not None:
        return refused
    event_id, type_ = str(data["id"])[:255], str(data["type"])[:64]
    obj = (data.get("data") or {}).get("object") or {}
    handler = HANDLERS.get(type_)
    try:
        with transaction.atomic():
            try:
                with transaction.atomic():
                    stored = StripeEvent.objects.create(event_id=event_id, type=type_, payload=data)
            except IntegrityError:
                logger.info("stripe event %s (%s) replayed; nothing to do", event_id, type_)
                return JsonResponse({"received": True, "duplicate": True})
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
    except payments.stripe_adapter.StripeUnavailable as exc:
        # A handler needed Stripe (a dispute's charge): let Stripe send it again.
        logger.warning("stripe event %s deferred: %s", event_id, exc.message)
        return _error(503, "stripe_unavailable", "Stripe is unreachable; send the event again.")
    logger.info("stripe event %s (%s): %s", event_id, type_, stored.outcome)
    return JsonResponse({"received": True, "outcome": stored.outcome})
