"""Prepaid top-ups: by card (a PaymentIntent confirmed on the page with
Stripe.js, ``topup_create``, or the card on file charged from the console,
``topup_charge_card``) and by bank transfer, recorded by finance
(``topup_record_manual``). A card top-up's payment row is committed before
Stripe is called (idempotency key ``topup-{payment.id}-pi``) and the balance
rises only when Stripe says it succeeded (``collection.payment_intent_apply``,
from the webhook or the beat's sync); a transfer is credited at once."""

from __future__ import annotations

from datetime import date

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from accounts.facade import (
    BillingMode,
    Conflict,
    NotFound,
    Organization,
    Perm,
    ValidationFailed,
    audit_record,
)
from console.kernel.money import PPM, format_amount
from invoicing import stripe_adapter
from invoicing.models import LedgerKind, Payment, PaymentKind, PaymentMethod, PaymentStatus
from invoicing.money import from_minor, to_minor
from invoicing.services import outbound
from invoicing.services._payments import (
    paid_on_day,
    reference_holder,
    reference_taken,
    save_with_reference,
)
from invoicing.services.cards import _require_stripe
from invoicing.services.ledger import ledger_entry_create
from invoicing.stripe_adapter import Intent, StripeDeclined, StripeRejected

# Stripe's smallest charge is about half a currency unit; we ask for one whole unit.
MIN_TOP_UP_UNITS = 1


def _topup_checks(actor, amount_minor) -> Organization:
    actor.require(Perm.BILLING_MANAGE)
    org = Organization.objects.get(pk=actor.organization_id)
    if org.billing_mode != BillingMode.PREPAID:
        raise ValidationFailed.from_fields(
            {"__all__": _("Only prepaid organizations top up; this one is invoiced monthly.")}
        )
    if type(amount_minor) is not int:
        raise ValidationFailed.from_fields(
            {
                "amount": _("Give the amount as a whole number of %(currency)s's smallest unit.")
                % {"currency": org.currency}
            }
        )
    if amount_minor <= 0:
        raise ValidationFailed.from_fields({"amount": _("Top up a positive amount.")})
    lowest = to_minor(MIN_TOP_UP_UNITS * PPM, org.currency)
    if amount_minor < lowest:
        least = format_amount(from_minor(lowest, org.currency), org.currency)
        raise ValidationFailed.from_fields(
            {"amount": _("A top-up is at least %(least)s.") % {"least": least}}
        )
    highest = to_minor(settings.INVOICING_MAX_TOP_UP * PPM, org.currency)
    if amount_minor > highest:
        most = format_amount(from_minor(highest, org.currency), org.currency)
        raise ValidationFailed.from_fields(
            {"amount": _("A single top-up is at most %(most)s.") % {"most": most}}
        )
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
        params={"amount": format_amount(amount_minor, org.currency, unit="minor"), **audit},
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
            "kind": str(PaymentKind.TOP_UP),
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
    on file instead (``topup_charge_card``). The balance rises
    only when the ``payment_intent.succeeded`` webhook arrives."""
    org = _topup_checks(actor, amount_minor)
    if not stripe_adapter.enabled():
        raise ValidationFailed.from_fields(
            {"__all__": _("Card top-ups are off (Stripe is not configured); pay by bank transfer.")}
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
        raise Conflict(
            _("This top-up is %(status)s already.")
            % {"status": payment.get_status_display().lower()}
        )
    return stripe_adapter.payment_intent_retrieve(payment.stripe_payment_intent_id).client_secret


def topup_record_manual(
    *, actor, amount_minor: int, reference: str, paid_on: date | None = None
) -> Payment:
    """Finance records a top-up paid by bank transfer: credited at once.

    The transfer's reference makes it idempotent: recording it again
    changes nothing and returns the first payment with ``duplicate = True``
    (the page then says when it was recorded and for how much). A reference
    already used for another kind of payment (an invoice paid by transfer)
    is refused. ``paid_on``: the day the money arrived (default today in the
    organization's time zone, never in the future)."""
    org = _topup_checks(actor, amount_minor)
    reference = (reference or "").strip()[:100]
    if not reference:
        raise ValidationFailed.from_fields({"reference": _("Give the transfer's reference.")})
    day = paid_on_day(paid_on, timezone_name=org.timezone)
    with transaction.atomic():
        Organization.objects.select_for_update().get(pk=org.pk)
        existing = reference_holder(org.pk, reference)
        if existing is not None:
            if existing.kind == PaymentKind.TOP_UP:
                existing.duplicate = True
                return existing
            raise reference_taken(existing)
        payment = save_with_reference(
            Payment(
                organization=org,
                kind=PaymentKind.TOP_UP,
                method=PaymentMethod.BANK_TRANSFER,
                status=PaymentStatus.SUCCEEDED,
                currency=org.currency,
                amount_minor=amount_minor,
                reference=reference,
                paid_on=day,
                created_by=actor.user,
            )
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
            params={
                "amount": format_amount(amount_minor, org.currency, unit="minor"),
                "reference": reference,
                "paid_on": day.isoformat(),
            },
        )
        outbound.topup_succeeded(payment)
    payment.duplicate = False
    return payment


def _card_topup_row(org, actor, amount_minor: int, request_key: str) -> Payment:
    """The card top-up's payment row, committed: the one ``request_key`` made
    already (a double submit: ``duplicate``) or a new one."""
    with transaction.atomic():
        Organization.objects.select_for_update().get(pk=org.pk)
        existing = (
            Payment.objects.filter(
                organization=org, kind=PaymentKind.TOP_UP, request_key=request_key
            ).first()
            if request_key
            else None
        )
        if existing is not None:
            existing.client_secret = ""
            existing.requires_action = False
            existing.duplicate = True
            return existing
        try:
            with transaction.atomic():
                payment = _new_topup(org, actor, amount_minor, request_key=request_key, card=True)
        except IntegrityError as exc:  # pragma: no cover - the org lock serializes these
            raise Conflict(_("This top-up was submitted already.")) from exc
    payment.client_secret = ""
    payment.requires_action = False
    payment.duplicate = False
    return payment


def topup_charge_card(*, actor, amount_minor: int, request_key: str = "") -> Payment:
    """Top up the actor's prepaid organization by charging its card on file,
    confirmed here with the manager present. The payment is committed before
    Stripe is called (idempotency key ``topup-{payment.id}-pi``); the same
    ``request_key`` (the form's one-time token) returns the same payment, so
    a double submit charges once.

    The returned payment carries ``client_secret`` and ``requires_action``:
    when the bank asks for 3-D Secure, the page finishes it with
    ``stripe.confirmCardPayment``. Either way the balance rises only when the
    ``payment_intent.succeeded`` webhook (or the beat's sync) says so."""
    org = _topup_checks(actor, amount_minor)
    _require_stripe()
    request_key = (request_key or "").strip()[:64]
    customer_id = stripe_adapter.customer_ensure(organization_id=org.pk)
    method = stripe_adapter.customer_default_payment_method(customer_id=customer_id)
    if method is None:
        raise ValidationFailed.from_fields(
            {"__all__": _("No card on file: add one on the payment method page first.")}
        )
    payment = _card_topup_row(org, actor, amount_minor, request_key)
    if payment.duplicate:
        return payment
    try:
        intent = _topup_intent(payment, customer_id, payment_method=method, confirm=True)
    except (StripeDeclined, StripeRejected) as exc:
        payment.stripe_payment_intent_id = exc.payment_intent_id
        payment.status = PaymentStatus.FAILED
        payment.failure_message = exc.message[:255]
        payment.save(update_fields=["status", "failure_message", "stripe_payment_intent_id"])
        return payment
    except stripe_adapter.StripeUnavailable as exc:
        # Nothing is known to be charged. Should Stripe have charged after
        # all, its payment_intent.succeeded webhook still finds this row (the
        # metadata names it) and credits it.
        payment.status = PaymentStatus.FAILED
        payment.failure_message = exc.message[:255]
        payment.save(update_fields=["status", "failure_message"])
        raise
    payment.stripe_payment_intent_id = intent.id
    update = ["stripe_payment_intent_id"]
    if intent.status == "requires_payment_method" and intent.failure_message:
        payment.status = PaymentStatus.FAILED
        payment.failure_message = intent.failure_message
        update += ["status", "failure_message"]
    payment.save(update_fields=update)
    if intent.status == "requires_action":
        payment.client_secret = intent.client_secret
        payment.requires_action = True
    return payment
