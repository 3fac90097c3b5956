"""Stripe's events, received: stored once and dispatched to the service
their type names. The view (``invoicing.webhooks``) checks the signature
first and only then calls ``stripe_event_receive``.

* The event id is stored (``StripeEvent``, unique) in the same transaction
  as its effect, so a replay finds it and changes nothing, and a handler
  that crashes stores nothing (Stripe sends it again).
* The event's shape is checked before anything is stored: ``data.object``
  must be an object whose fields have Stripe's types (``MalformedEvent``
  otherwise, which the view answers with 400), so a correctly signed but
  malformed event never reaches a handler half-parsed.
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


class MalformedEvent(ValueError):
    """A verified event whose shape is not Stripe's: nothing is stored."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


# What reading a field of the wrong type raises in the ``from_stripe`` parsers.
_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError)


def _parse(cls, obj: dict):
    """``cls.from_stripe(obj)``, its id a string, or ``MalformedEvent``."""
    try:
        parsed = cls.from_stripe(obj)
    except _SHAPE_ERRORS as exc:
        raise MalformedEvent(f"The event's {cls.__name__.lower()} is malformed ({exc}).") from None
    for name in ("id", "customer", "payment_intent", "payment_method"):
        value = getattr(parsed, name, "")
        if not isinstance(value, str):
            raise MalformedEvent(f"The event's {cls.__name__.lower()} has a malformed {name}.")
    return parsed


def _count(obj: dict, name: str) -> int:
    value = obj.get(name) or 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedEvent(f"'{name}' must be a whole number.")
    return value


def _string_id(value, what: str) -> str:
    """An expandable field (an id or an object with one) as its id."""
    if isinstance(value, dict):
        value = value.get("id")
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise MalformedEvent(f"'{what}' must be an id or an object with one.")
    return value


@dataclass(frozen=True)
class StripeEventReceipt:
    """What receiving an event did: ``duplicate`` when its id was stored
    already (nothing done), else the handler's ``outcome``."""

    outcome: str = ""
    duplicate: bool = False


def _payment_intent(obj: dict) -> str:
    return payment_intent_apply(intent=_parse(Intent, obj))


def _setup_intent(obj: dict) -> str:
    return card_setup_apply(setup_intent=_parse(SetupIntent, obj))


def _refund(obj: dict) -> str:
    return refund_apply(refund=_parse(Refund, obj))


def _charge_refunded(obj: dict) -> str:
    # Older API versions embed the charge's refunds; newer ones do not, and
    # then each refund also arrives as its own refund.updated event.
    embedded = obj.get("refunds") or {}
    refunds = (embedded.get("data") if isinstance(embedded, dict) else None) or []
    if not isinstance(embedded, dict) or not isinstance(refunds, list):
        raise MalformedEvent("'refunds' must be a list object.")
    if not all(isinstance(r, dict) for r in refunds):
        raise MalformedEvent("Each embedded refund must be an object.")
    refunds = [_parse(Refund, r) for r in refunds if r.get("id")]
    outcomes = [refund_apply(refund=r) for r in refunds]
    return ", ".join(outcomes) or "no embedded refunds (refund.updated follows)"


def _dispute(obj: dict) -> str:
    pi = _string_id(obj.get("payment_intent"), "payment_intent")
    charge = _string_id(obj.get("charge"), "charge")
    amount = _count(obj, "amount")
    reason = obj.get("reason") or ""
    if not isinstance(reason, str):
        raise MalformedEvent("'reason' must be a string.")
    if obj.get("charge") and not charge:
        raise MalformedEvent("'charge' must be an id or an object with one.")
    if not pi and charge:
        pi = stripe_adapter.charge_payment_intent(charge)
    if not pi:
        return "dispute without a PaymentIntent; ignored"
    return dispute_apply(
        payment_intent_id=pi, dispute_id=obj["id"], amount_minor=amount, reason=reason
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


def _envelope(event) -> tuple[str, str, dict]:
    """The event's id, type and object, or ``MalformedEvent``."""
    if not isinstance(event, dict):
        raise MalformedEvent("An event must be a JSON object.")
    event_id, type_ = event.get("id"), event.get("type")
    if not isinstance(event_id, str) or not event_id or not isinstance(type_, str) or not type_:
        raise MalformedEvent("An event needs an id and a type, both strings.")
    data = event.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise MalformedEvent("The event's 'data' must be an object.")
    obj = data.get("object")
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise MalformedEvent("The event's 'data.object' must be an object.")
    return event_id[:255], type_[:64], obj


def stripe_event_receive(*, event: dict) -> StripeEventReceipt:
    """Store a verified Stripe event (a dict with ``id`` and ``type``) and
    apply it, in one transaction. A replayed id returns a duplicate receipt
    and changes nothing. ``StripeUnavailable`` (a handler needed Stripe, a
    dispute's charge say) rolls it all back, so the event can come again;
    ``MalformedEvent`` (a field of the wrong type) stores nothing either."""
    event_id, type_, obj = _envelope(event)
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
        elif not obj.get("id"):
            outcome = "ignored: no object"
        elif not isinstance(obj["id"], str):
            raise MalformedEvent("The event object's id must be a string.")
        else:
            outcome = handler(obj)
            stored.handled = True
        stored.outcome = str(outcome)[:255]
        stored.save(update_fields=["handled", "outcome"])
    logger.info("stripe event %s (%s): %s", event_id, type_, stored.outcome)
    return StripeEventReceipt(outcome=stored.outcome)
