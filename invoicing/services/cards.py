"""The card on file: saving one through a Stripe SetupIntent, removing it,
and paying an invoice with it now (charging it for a top-up is
``topups.topup_charge_card``).

Saving a card:

1. ``card_setup_start`` commits a ``CardSetup`` row, then asks Stripe for a
   SetupIntent on the organization's (lazy) customer, ``usage=off_session``,
   with an idempotency key and metadata from the row's id. Its client secret
   goes to the page (never stored); Stripe.js confirms the card there.
2. The page posts the SetupIntent id back: ``card_setup_complete`` looks the
   row up in the actor's organization (another's is not found), retrieves
   the SetupIntent from Stripe (the browser's word is never taken) and
   applies it. The ``setup_intent.succeeded`` webhook applies the same
   (``card_setup_apply``); whichever comes second changes nothing.
3. Applying checks the SetupIntent against the row (organization, customer),
   attaches the card to our customer if Stripe has not, makes it
   ``invoice_settings.default_payment_method`` and detaches the card it
   replaces. Only a pending row does this, under its row lock, once: a
   replayed or late event cannot bring back a card that was replaced or
   removed since.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone as tz
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.facade import Conflict, NotFound, Organization, Perm, ValidationFailed, audit_record
from invoicing import stripe_adapter
from invoicing.models import (
    BillingProfile,
    CardSetup,
    CardSetupStatus,
    Invoice,
    InvoiceStatus,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
)
from invoicing.services.collection import invoice_collect
from invoicing.stripe_adapter import SetupIntent, StripeRejected

logger = logging.getLogger(__name__)

# A started setup whose SetupIntent still waits for a card is offered again
# for this long (a second click on "Add a card" makes no second SetupIntent).
SETUP_REUSE = timedelta(hours=1)

STRIPE_OFF = gettext_lazy(
    "Card payments are not set up (Stripe is not configured); pay by bank transfer."
)


def _require_stripe() -> None:
    if not stripe_adapter.enabled():
        raise ValidationFailed.from_fields({"__all__": str(STRIPE_OFF)})


def _customer_id(organization_id: int) -> str:
    return (
        BillingProfile.objects.filter(organization_id=organization_id)
        .values_list("stripe_customer_id", flat=True)
        .first()
        or ""
    )


# --- saving a card ----------------------------------------------------------------


def card_setup_start(*, actor) -> CardSetup:
    """A SetupIntent for the actor's organization to save a card with. The
    returned row carries ``client_secret`` (not stored) for Stripe.js."""
    actor.require(Perm.BILLING_MANAGE)
    _require_stripe()
    org_id = actor.organization_id
    customer_id = stripe_adapter.customer_ensure(organization_id=org_id)
    recent = (
        CardSetup.objects.filter(
            organization_id=org_id,
            status=CardSetupStatus.PENDING,
            created_at__gte=tz.now() - SETUP_REUSE,
            stripe_customer_id=customer_id,
        )
        .exclude(stripe_setup_intent_id="")
        .order_by("-created_at", "-id")
        .first()
    )
    if recent is not None:
        intent = stripe_adapter.setup_intent_retrieve(recent.stripe_setup_intent_id)
        if intent.status == "requires_payment_method" and intent.customer == customer_id:
            recent.client_secret = intent.client_secret
            return recent
    with transaction.atomic():
        setup = CardSetup.objects.create(
            organization_id=org_id, stripe_customer_id=customer_id, created_by=actor.user
        )
    try:
        intent = stripe_adapter.setup_intent_create(
            customer_id=customer_id,
            idempotency_key=f"card-setup-{setup.pk}-seti",
            metadata={
                "kind": "card_setup",
                "card_setup_id": setup.pk,
                "organization_id": org_id,
            },
        )
    except stripe_adapter.StripeError as exc:
        setup.status = CardSetupStatus.FAILED
        setup.failure_message = exc.message[:255]
        setup.save(update_fields=["status", "failure_message", "updated_at"])
        raise
    setup.stripe_setup_intent_id = intent.id
    setup.save(update_fields=["stripe_setup_intent_id", "updated_at"])
    audit_record(actor=actor, action="card.setup_start", target=setup)
    setup.client_secret = intent.client_secret
    return setup


def _setup_mismatch(setup: CardSetup, intent: SetupIntent) -> str:
    """Why ``intent`` is not the SetupIntent of ``setup`` ('' when it is)."""
    if setup.stripe_setup_intent_id and setup.stripe_setup_intent_id != intent.id:
        return "another SetupIntent"
    if intent.metadata.get("card_setup_id") != str(setup.pk):
        return "metadata card_setup_id"
    if intent.metadata.get("organization_id") != str(setup.organization_id):
        return "metadata organization_id"
    customer = _customer_id(setup.organization_id)
    if not customer or intent.customer != customer or setup.stripe_customer_id != customer:
        return "customer"
    return ""


def _settle_setup(setup: CardSetup, intent: SetupIntent) -> str:
    """Apply a SetupIntent's state to its row (locked, checked)."""
    if setup.status != CardSetupStatus.PENDING:
        return f"already_{setup.status}"
    if intent.status == "succeeded":
        if not intent.payment_method:
            return "no_payment_method"
        customer = setup.stripe_customer_id
        card = stripe_adapter.payment_method_retrieve(intent.payment_method)
        if card.customer and card.customer != customer:
            logger.error("card %s of setup %s belongs to another customer", card.id, setup.pk)
            return "mismatch: payment method customer"
        if not card.customer:  # Stripe attaches it on confirmation; a mock may not
            stripe_adapter.payment_method_attach(
                payment_method_id=card.id,
                customer_id=customer,
                idempotency_key=f"card-setup-{setup.pk}-attach",
            )
        previous = stripe_adapter.customer_default_payment_method(customer_id=customer)
        newer = (
            CardSetup.objects.filter(
                organization_id=setup.organization_id,
                status=CardSetupStatus.SUCCEEDED,
                created_at__gt=setup.created_at,
            )
            .exclude(pk=setup.pk)
            .exists()
        )
        setup.status = CardSetupStatus.SUCCEEDED
        setup.stripe_payment_method_id = card.id
        setup.failure_message = ""
        setup.save(
            update_fields=["status", "stripe_payment_method_id", "failure_message", "updated_at"]
        )
        if newer:  # a card saved later is the default already: keep it
            logger.info("card setup %s succeeded after a newer one; not the default", setup.pk)
            return "superseded"
        stripe_adapter.customer_default_payment_method_set(
            customer_id=customer,
            payment_method_id=card.id,
            idempotency_key=f"card-setup-{setup.pk}-default",
        )
        if previous and previous != card.id:
            _detach_quietly(previous)
        audit_record(
            actor=None,
            organization=Organization.objects.get(pk=setup.organization_id),
            action="card.saved",
            target=setup,
            params={"brand": card.brand, "last4": card.last4, "replaced": bool(previous)},
        )
        return "succeeded"
    if intent.status in ("canceled", "requires_payment_method") and (
        intent.status == "canceled" or intent.failure_message
    ):
        setup.status = CardSetupStatus.FAILED
        setup.failure_message = (intent.failure_message or f"Card setup {intent.status}.")[:255]
        setup.save(update_fields=["status", "failure_message", "updated_at"])
        return "failed"
    return intent.status  # requires_payment_method (no attempt yet), requires_action, processing


def _detach_quietly(payment_method_id: str) -> None:
    """Detach a replaced card; one already gone is fine."""
    try:
        stripe_adapter.payment_method_detach(payment_method_id)
    except StripeRejected as exc:
        logger.info("replaced card %s not detached: %s", payment_method_id, exc.message)


def _locked_setup(setup_id: int) -> CardSetup:
    return CardSetup.objects.select_for_update().get(pk=setup_id)


def card_setup_complete(*, actor, setup_intent_id: str) -> str:
    """The page says its SetupIntent is confirmed: ask Stripe, check it is
    this organization's, and make the card the default. Returns what
    happened (``succeeded``, ``already_succeeded``, ``failed``, or a status
    still in progress). A failed setup raises ``ValidationFailed`` with
    Stripe's reason."""
    actor.require(Perm.BILLING_MANAGE)
    _require_stripe()
    setup_intent_id = (setup_intent_id or "").strip()
    found = (
        CardSetup.objects.filter(
            organization_id=actor.organization_id, stripe_setup_intent_id=setup_intent_id
        ).first()
        if setup_intent_id
        else None
    )
    if found is None:
        raise NotFound("No such card setup in this organization.")
    intent = stripe_adapter.setup_intent_retrieve(setup_intent_id)
    with transaction.atomic():
        setup = _locked_setup(found.pk)
        why = _setup_mismatch(setup, intent)
        if why:
            logger.warning("setup intent %s does not match setup %s (%s)", intent.id, setup.pk, why)
            raise Conflict("This card setup does not belong to this organization's customer.")
        outcome = _settle_setup(setup, intent)
    if outcome == "failed" or setup.status == CardSetupStatus.FAILED:
        raise ValidationFailed.from_fields({"__all__": setup.failure_message})
    return outcome


def card_setup_apply(*, setup_intent: SetupIntent) -> str:
    """What a webhook (``setup_intent.*``) says about a SetupIntent, applied
    to our row: idempotent, and nothing changes unless it matches the row."""
    with transaction.atomic():
        found = CardSetup.objects.filter(stripe_setup_intent_id=setup_intent.id).first()
        if found is None:
            sid = setup_intent.metadata.get("card_setup_id", "")
            if sid.isdigit():
                found = CardSetup.objects.filter(pk=int(sid), stripe_setup_intent_id="").first()
        if found is None:
            logger.info("stripe SetupIntent %s is not ours; ignored", setup_intent.id)
            return "unknown_setup_intent"
        setup = _locked_setup(found.pk)
        why = _setup_mismatch(setup, setup_intent)
        if why:
            logger.warning(
                "stripe SetupIntent %s does not match setup %s (%s); ignored",
                setup_intent.id,
                setup.pk,
                why,
            )
            return f"mismatch: {why}"
        if not setup.stripe_setup_intent_id:
            setup.stripe_setup_intent_id = setup_intent.id
            setup.save(update_fields=["stripe_setup_intent_id", "updated_at"])
        return _settle_setup(setup, setup_intent)


def card_remove(*, actor) -> bool:
    """Remove the card on file (the one invoices and top-ups would charge).
    False when there was none."""
    actor.require(Perm.BILLING_MANAGE)
    _require_stripe()
    customer = _customer_id(actor.organization_id)
    if not customer:
        return False
    with transaction.atomic():
        # One removal at a time per organization (the profile row).
        BillingProfile.objects.select_for_update().get(organization_id=actor.organization_id)
        method = stripe_adapter.customer_default_payment_method(customer_id=customer)
        if method is None:
            return False
        card = stripe_adapter.payment_method_retrieve(method)
        stripe_adapter.customer_default_payment_method_set(
            customer_id=customer, payment_method_id=""
        )
        _detach_quietly(method)
        audit_record(
            actor=actor,
            action="card.removed",
            params={"brand": card.brand, "last4": card.last4},
        )
    return True


# --- paying an invoice with it ------------------------------------------------------


def invoice_pay_now(*, actor, invoice_id: int) -> str:
    """A billing manager pays a finalized invoice now with the card on file:
    the same collection the finalization starts (``invoice_collect``), so a
    second press finds the invoice paid or its one pending payment, never a
    second charge. Returns ``invoice_collect``'s outcome."""
    actor.require(Perm.BILLING_MANAGE)
    _require_stripe()
    invoice = Invoice.objects.filter(pk=invoice_id, organization_id=actor.organization_id).first()
    if invoice is None:
        raise NotFound("No such invoice.")
    if invoice.status != InvoiceStatus.FINALIZED:
        raise Conflict(
            _("This invoice is %(status)s; nothing to pay.")
            % {"status": invoice.get_status_display().lower()}
        )
    audit_record(actor=actor, action="invoice.pay_now", target=invoice)
    return invoice_collect(invoice_id=invoice.pk)


def invoice_payment_client_secret(*, actor, invoice_id: int) -> str:
    """The client secret of an invoice's pending card payment that waits for
    its cardholder (3-D Secure), for the page to finish it; '' if none."""
    actor.require(Perm.BILLING_MANAGE)
    payment = (
        Payment.objects.filter(
            organization_id=actor.organization_id,
            invoice_id=invoice_id,
            kind=PaymentKind.INVOICE,
            method=PaymentMethod.STRIPE,
            status=PaymentStatus.PENDING,
        )
        .exclude(stripe_payment_intent_id="")
        .order_by("-pk")
        .first()
    )
    if payment is None:
        return ""
    intent = stripe_adapter.payment_intent_retrieve(payment.stripe_payment_intent_id)
    return intent.client_secret if intent.status == "requires_action" else ""
