"""Stripe's webhooks: ``POST /billing/stripe/webhook/``.

1. The signature (``Stripe-Signature: t=…,v1=…``, HMAC-SHA256 of
   ``f"{t}.{payload}"`` with ``STRIPE_WEBHOOK_SECRET``) and its age
   (``STRIPE_WEBHOOK_TOLERANCE_SECONDS``) are checked by stripe-python's
   ``Webhook.construct_event``; a bad or stale one is a 400 with a JSON error.
   The library does not look the other way: a timestamp more than
   ``STRIPE_WEBHOOK_FUTURE_TOLERANCE_SECONDS`` ahead of our clock (clock skew)
   is refused here, so a signature made "tomorrow" cannot be replayed for a day.
2. The verified event goes to ``services.stripe_event_receive``, which
   stores its id and applies it in one transaction: a replay changes
   nothing (200, ``duplicate``), a handler that crashes stores nothing
   (500: Stripe sends it again), and Stripe out of reach is a 503 (sent
   again too). Other types, and objects that are not ours, are acknowledged
   (200) and change nothing. A correctly signed event of the wrong shape
   (``MalformedEvent``: a field of the wrong type) is a 400 and stores
   nothing, never a 500.
"""

from __future__ import annotations

import json
import logging
import time

import stripe
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from invoicing import services, stripe_adapter

logger = logging.getLogger(__name__)


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def _signed_at(header: str) -> int | None:
    """The ``t=`` of a ``Stripe-Signature`` header (None if absent or not a number)."""
    for item in header.split(","):
        name, _, value = item.strip().partition("=")
        if name == "t":
            try:
                return int(value)
            except ValueError:
                return None
    return None


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
    except (ValueError, TypeError, AttributeError):
        # The library parses the verified body into an event object: a body that
        # is not a JSON object fails there.
        return None, _error(400, "invalid_payload", "The body is not a JSON event.")
    signed_at = _signed_at(header)
    skew = settings.STRIPE_WEBHOOK_FUTURE_TOLERANCE_SECONDS
    if signed_at is None or signed_at > time.time() + skew:
        logger.warning("stripe webhook refused: timestamp in the future")
        message = (
            f"The signature's timestamp is more than {skew} seconds in the future; "
            "check the sender's clock."
        )
        return None, _error(400, "future_timestamp", message)
    try:
        data = json.loads(payload)
    except ValueError:
        return None, _error(400, "invalid_payload", "The body is not a JSON event.")
    if not isinstance(data, dict) or not data.get("id") or not data.get("type"):
        return None, _error(400, "invalid_payload", "An event needs an id and a type.")
    if not isinstance(data["id"], str) or not isinstance(data["type"], str):
        return None, _error(400, "invalid_payload", "An event's id and type are strings.")
    return data, None


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> JsonResponse:
    data, refused = _verify(request)
    if refused is not None:
        return refused
    try:
        receipt = services.stripe_event_receive(event=data)
    except services.MalformedEvent as exc:
        logger.warning("stripe event %s refused: %s", str(data["id"])[:255], exc.message)
        return _error(400, "invalid_payload", exc.message)
    except stripe_adapter.StripeUnavailable as exc:
        # A handler needed Stripe (a dispute's charge): let Stripe send it again.
        logger.warning("stripe event %s deferred: %s", str(data["id"])[:255], exc.message)
        return _error(503, "stripe_unavailable", "Stripe is unreachable; send the event again.")
    if receipt.duplicate:
        return JsonResponse({"received": True, "duplicate": True})
    return JsonResponse({"received": True, "outcome": receipt.outcome})
