"""The one place that talks to Stripe.

Stripe is off unless ``STRIPE_SECRET_KEY`` is set; then finance records
payments by hand and nothing here is called. ``STRIPE_API_BASE`` points
stripe-python elsewhere (localstripe in the tests).

Every write call carries an idempotency key derived from one of our own rows
(``f"invoice-{invoice.id}-pi-{payment.id}"``, ``f"refund-payment-{payment.id}"``),
so a retry after a timeout or a crash gets the object Stripe already made
instead of a second charge or refund.

Errors come out as two kinds, never as stripe-python's own classes:

* ``StripeUnavailable``: connection errors, timeouts, rate limits and 5xx —
  worth retrying later (the Celery task does).
* ``StripeDeclined`` (a card decline, with Stripe's code and message) and
  ``StripeRejected`` (any other 4xx: a bad request, an authentication
  problem) — retrying the same call will not help.

What the services get back are small frozen dataclasses (``Intent``,
``Refund``) with plain values: amounts in the currency's minor unit, lower-
case ISO currency codes as Stripe writes them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import stripe
from django.conf import settings
from django.db import transaction

from accounts.facade import DomainError, Organization
from invoicing.models import BillingProfile

logger = logging.getLogger(__name__)

# The Stripe API version of every request (the ``Stripe-Version`` header) and of
# the objects and events we read: the one stripe-python 16.1 was generated for,
# stated here so that neither an upgraded library nor the account's default in
# Stripe's dashboard moves it silently. Webhook endpoints must be created with
# the same version (Dashboard > Developers > Webhooks, or ``api_version`` when
# creating the endpoint): an event's payload has the shape of the endpoint's
# version. Move it deliberately, with stripe-python, after reading Stripe's
# changelog (tests/invoicing/test_stripe_version.py holds the two together).
STRIPE_API_VERSION = "2026-10-28.endive"
# How often stripe-python itself retries a failed request (with backoff)
# before we see StripeUnavailable; it reuses our idempotency key each time.
MAX_NETWORK_RETRIES = 2
# Seconds a single request to Stripe may take.
TIMEOUT_SECONDS = 30


class StripeError(DomainError):
    """Something went wrong talking to Stripe. A ``DomainError``, so a page
    or the API shows its message instead of a stack trace."""

    code = "stripe_error"
    http_status = 502

    def __init__(self, message: str, *, code: str = "", payment_intent_id: str = ""):
        super().__init__(message)
        self.stripe_code = code
        self.payment_intent_id = payment_intent_id


class StripeUnavailable(StripeError):
    """Stripe could not be reached or failed on its side (5xx, 429): retry later."""

    code = "stripe_unavailable"
    http_status = 503


class StripeDeclined(StripeError):
    """The card was declined (or needs its holder): retrying the same call will not help."""

    code = "card_declined"
    http_status = 402


class StripeRejected(StripeError):
    """Stripe refused the request (4xx other than a decline): a bug or a configuration problem."""

    code = "stripe_rejected"
    http_status = 502


class StripeDisabled(StripeError):
    """Stripe is off (no ``STRIPE_SECRET_KEY``)."""

    code = "stripe_disabled"
    http_status = 409


def enabled() -> bool:
    return bool(settings.STRIPE_SECRET_KEY)


_clients: dict[tuple, stripe.StripeClient] = {}


def client() -> stripe.StripeClient:
    """A ``StripeClient`` for the current settings (one per key and base)."""
    if not enabled():
        raise StripeDisabled("Stripe is not configured (no STRIPE_SECRET_KEY).")
    key = (settings.STRIPE_SECRET_KEY, settings.STRIPE_API_BASE, MAX_NETWORK_RETRIES)
    found = _clients.get(key)
    if found is None:
        kwargs: dict = {
            "stripe_version": STRIPE_API_VERSION,
            "max_network_retries": MAX_NETWORK_RETRIES,
            "http_client": stripe.RequestsClient(timeout=TIMEOUT_SECONDS),
        }
        if settings.STRIPE_API_BASE:
            kwargs["base_addresses"] = {"api": settings.STRIPE_API_BASE.rstrip("/")}
        found = _clients[key] = stripe.StripeClient(settings.STRIPE_SECRET_KEY, **kwargs)
    return found


def _translate(exc: stripe.StripeError) -> StripeError:
    message = getattr(exc, "user_message", None) or str(exc) or exc.__class__.__name__
    code = getattr(exc, "code", None) or ""
    pi_id = ""
    json_body = getattr(exc, "json_body", None)
    body: dict[str, Any] = json_body if isinstance(json_body, dict) else {}
    error = body.get("error")
    err: dict[str, Any] = error if isinstance(error, dict) else {}
    pi = err.get("payment_intent")
    if isinstance(pi, dict):
        pi_id = pi.get("id") or ""
    status = getattr(exc, "http_status", None)
    if isinstance(exc, (stripe.APIConnectionError, stripe.RateLimitError)):
        return StripeUnavailable(f"Stripe is unreachable just now: {message}", code=code)
    if isinstance(exc, stripe.CardError) or status == 402:
        return StripeDeclined(message, code=code, payment_intent_id=pi_id)
    if status is None or status >= 500 or isinstance(exc, stripe.APIError):
        return StripeUnavailable(f"Stripe failed on its side: {message}", code=code)
    return StripeRejected(
        f"Stripe refused the request: {message}", code=code, payment_intent_id=pi_id
    )


def _call(fn, *args, **kwargs) -> dict:
    """Run one stripe-python call; a plain dict back, or one of our errors."""
    try:
        obj = fn(*args, **kwargs)
    except stripe.StripeError as exc:
        ours = _translate(exc)
        logger.warning("stripe call failed (%s): %s", ours.__class__.__name__, ours.message)
        raise ours from exc
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def _id(value) -> str:
    """An expandable field: the id whether Stripe sent the id or the object."""
    if isinstance(value, dict):
        return value.get("id") or ""
    return value or ""


# --- customers --------------------------------------------------------------


def customer_ensure(*, organization_id: int) -> str:
    """The organization's Stripe customer id, created on first use (once:
    under the billing profile's row lock, with an idempotency key from the
    profile's id)."""
    with transaction.atomic():
        BillingProfile.objects.get_or_create(organization_id=organization_id)
        profile = (
            BillingProfile.objects.select_for_update()
            .select_related("organization")
            .get(organization_id=organization_id)
        )
        if profile.stripe_customer_id:
            return profile.stripe_customer_id
        org: Organization = profile.organization
        params: dict = {
            "name": profile.legal_name or org.name,
            "metadata": {"organization_id": str(org.pk)},
        }
        if profile.billing_email:
            params["email"] = profile.billing_email
        customer = _call(
            client().v1.customers.create,
            params=params,
            options={"idempotency_key": f"billing-profile-{profile.pk}-customer"},
        )
        profile.stripe_customer_id = customer["id"]
        profile.save(update_fields=["stripe_customer_id", "updated_at"])
        return profile.stripe_customer_id


def customer_default_payment_method(*, customer_id: str) -> str | None:
    """The customer's default payment method (``invoice_settings``), else
    the first card attached to it; ``None`` when there is no card on file."""
    customer = _call(client().v1.customers.retrieve, customer_id)
    default = _id((customer.get("invoice_settings") or {}).get("default_payment_method"))
    if default:
        return default
    cards = _call(
        client().v1.payment_methods.list,
        params={"customer": customer_id, "type": "card", "limit": 1},
    )
    data = cards.get("data") or []
    return data[0]["id"] if data else None


# --- payment intents ----------------------------------------------------------


@dataclass(frozen=True)
class Intent:
    id: str
    status: str
    amount: int
    currency: str
    customer: str = ""
    client_secret: str = ""
    metadata: dict = field(default_factory=dict)
    failure_message: str = ""

    @classmethod
    def from_stripe(cls, data: dict) -> Intent:
        error = data.get("last_payment_error") or {}
        return cls(
            id=data["id"],
            status=data.get("status") or "",
            amount=int(data.get("amount") or 0),
            currency=(data.get("currency") or "").lower(),
            customer=_id(data.get("customer")),
            client_secret=data.get("client_secret") or "",
            metadata=dict(data.get("metadata") or {}),
            failure_message=(error.get("message") or error.get("code") or "")[:255],
        )


def payment_intent_create(
    *,
    amount_minor: int,
    currency: str,
    customer_id: str,
    idempotency_key: str,
    metadata: dict[str, str],
    payment_method: str | None = None,
    off_session: bool = False,
    confirm: bool = False,
) -> Intent:
    """A PaymentIntent. With ``off_session`` it is confirmed at once against
    ``payment_method`` (charging a card on file, nobody present); with
    ``confirm`` it is confirmed at once with the cardholder present (a top-up
    from the console: Stripe may answer ``requires_action``, and the page
    finishes 3-D Secure with the client secret); with neither, the page
    confirms it with the client secret."""
    if type(amount_minor) is not int or amount_minor <= 0:
        raise ValueError("amount_minor must be a positive int")
    params: dict = {
        "amount": amount_minor,
        "currency": currency.lower(),
        "customer": customer_id,
        "metadata": {k: str(v) for k, v in metadata.items()},
    }
    if payment_method:
        params["payment_method"] = payment_method
    if off_session:
        params["confirm"] = True
        params["off_session"] = True
    elif confirm:
        params["confirm"] = True
        params["payment_method_types"] = ["card"]  # no redirect methods: no return_url
    return Intent.from_stripe(
        _call(
            client().v1.payment_intents.create,
            params=params,
            options={"idempotency_key": idempotency_key},
        )
    )


def payment_intent_retrieve(payment_intent_id: str) -> Intent:
    return Intent.from_stripe(_call(client().v1.payment_intents.retrieve, payment_intent_id))


# --- refunds ------------------------------------------------------------------


@dataclass(frozen=True)
class Refund:
    id: str
    status: str
    amount: int
    currency: str
    payment_intent: str = ""
    metadata: dict = field(default_factory=dict)
    failure_reason: str = ""

    @classmethod
    def from_stripe(cls, data: dict) -> Refund:
        return cls(
            id=data["id"],
            status=data.get("status") or "",
            amount=int(data.get("amount") or 0),
            currency=(data.get("currency") or "").lower(),
            payment_intent=_id(data.get("payment_intent")),
            metadata=dict(data.get("metadata") or {}),
            failure_reason=(data.get("failure_reason") or "")[:255],
        )


def refund_create(
    *, payment_intent_id: str, amount_minor: int, idempotency_key: str, metadata: dict[str, str]
) -> Refund:
    """Refund part (or all) of a PaymentIntent's charge."""
    if type(amount_minor) is not int or amount_minor <= 0:
        raise ValueError("amount_minor must be a positive int")
    return Refund.from_stripe(
        _call(
            client().v1.refunds.create,
            params={
                "payment_intent": payment_intent_id,
                "amount": amount_minor,
                "metadata": {k: str(v) for k, v in metadata.items()},
            },
            options={"idempotency_key": idempotency_key},
        )
    )


def refund_retrieve(refund_id: str) -> Refund:
    return Refund.from_stripe(_call(client().v1.refunds.retrieve, refund_id))


def refund_find(*, payment_intent_id: str, metadata_key: str, value: str) -> Refund | None:
    """A refund of the PaymentIntent we made earlier (its metadata names our
    row): the guard against refunding twice once Stripe's idempotency key has
    expired (after 24 hours)."""
    listed = _call(
        client().v1.refunds.list, params={"payment_intent": payment_intent_id, "limit": 100}
    )
    for data in listed.get("data") or []:
        if str((data.get("metadata") or {}).get(metadata_key, "")) == value:
            return Refund.from_stripe(data)
    return None


def charge_payment_intent(charge_id: str) -> str:
    """The PaymentIntent a charge belongs to ('' if none)."""
    return _id(_call(client().v1.charges.retrieve, charge_id).get("payment_intent"))


# --- cards on file: SetupIntents and payment methods ---------------------------


@dataclass(frozen=True)
class SetupIntent:
    id: str
    status: str
    customer: str = ""
    payment_method: str = ""
    usage: str = ""
    client_secret: str = ""
    metadata: dict = field(default_factory=dict)
    failure_message: str = ""

    @classmethod
    def from_stripe(cls, data: dict) -> SetupIntent:
        error = data.get("last_setup_error") or {}
        return cls(
            id=data["id"],
            status=data.get("status") or "",
            customer=_id(data.get("customer")),
            payment_method=_id(data.get("payment_method")),
            usage=data.get("usage") or "",
            client_secret=data.get("client_secret") or "",
            metadata=dict(data.get("metadata") or {}),
            failure_message=(error.get("message") or error.get("code") or "")[:255],
        )


@dataclass(frozen=True)
class Card:
    """A card payment method: what a page may show of it, and whose it is."""

    id: str
    brand: str = ""
    last4: str = ""
    exp_month: int = 0
    exp_year: int = 0
    customer: str = ""

    @classmethod
    def from_stripe(cls, data: dict) -> Card:
        card = data.get("card") or {}
        return cls(
            id=data["id"],
            brand=(card.get("brand") or "").lower(),
            last4=card.get("last4") or "",
            exp_month=int(card.get("exp_month") or 0),
            exp_year=int(card.get("exp_year") or 0),
            customer=_id(data.get("customer")),
        )


def setup_intent_create(
    *, customer_id: str, idempotency_key: str, metadata: dict[str, str]
) -> SetupIntent:
    """A SetupIntent that saves a card for later off-session charges; the
    page confirms it with its client secret (``stripe.confirmCardSetup``)."""
    return SetupIntent.from_stripe(
        _call(
            client().v1.setup_intents.create,
            params={
                "customer": customer_id,
                "usage": "off_session",
                "payment_method_types": ["card"],
                "metadata": {k: str(v) for k, v in metadata.items()},
            },
            options={"idempotency_key": idempotency_key},
        )
    )


def setup_intent_retrieve(setup_intent_id: str) -> SetupIntent:
    return SetupIntent.from_stripe(_call(client().v1.setup_intents.retrieve, setup_intent_id))


def payment_method_retrieve(payment_method_id: str) -> Card:
    return Card.from_stripe(_call(client().v1.payment_methods.retrieve, payment_method_id))


def payment_method_attach(
    *, payment_method_id: str, customer_id: str, idempotency_key: str
) -> Card:
    """Attach a card to the customer (a confirmed SetupIntent with a customer
    attaches it already; then this is skipped by the caller)."""
    return Card.from_stripe(
        _call(
            client().v1.payment_methods.attach,
            payment_method_id,
            params={"customer": customer_id},
            options={"idempotency_key": idempotency_key},
        )
    )


def payment_method_detach(payment_method_id: str) -> Card:
    return Card.from_stripe(_call(client().v1.payment_methods.detach, payment_method_id))


def customer_default_payment_method_set(
    *, customer_id: str, payment_method_id: str, idempotency_key: str | None = None
) -> None:
    """Make ``payment_method_id`` the card invoices and top-ups charge
    (``invoice_settings.default_payment_method``); ``""`` clears it."""
    options = {"idempotency_key": idempotency_key} if idempotency_key else {}
    _call(
        client().v1.customers.update,
        customer_id,
        params={"invoice_settings": {"default_payment_method": payment_method_id}},
        options=options,
    )
