"""The prepaid balance: its ledger (by keyset, newest first), a manual
adjustment, the billing settings, and top-ups (the card on file charged,
or a bank transfer received recorded by finance)."""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from accounts.facade import BillingMode, DomainError, apply_errors, org_view
from console.kernel.money import format_amount
from console.kernel.timezones import org_zone
from invoicing import exports, selectors, services
from invoicing.forms.balance import (
    AdjustmentForm,
    BillingProfileForm,
    CardTopUpForm,
    ManualTopUpForm,
)
from invoicing.ledger_page import ledger_page
from invoicing.models import PaymentKind
from invoicing.money import from_minor
from invoicing.stripe_adapter import StripeUnavailable
from invoicing.views._shared import (
    MANAGE,
    VIEW,
    card_on_file_or_error,
    stripe_enabled,
    stripe_js_context,
    with_micro,
)

LEDGER_PAGE = 50


def _ledger_page(request):
    """One page of the ledger in the organization's zone, newest first, by
    keyset (``before`` = an entry id): usage debits summed per day with
    their calls, other entries one row each, each with the balance after."""
    return ledger_page(
        actor=request.actor,
        tzinfo=org_zone(request.actor.organization),
        before=request.GET.get("before"),
        size=LEDGER_PAGE,
    )


def _render_balance(request, *, adjust_form=None, profile_form=None):
    actor = request.actor
    org = actor.organization
    profile = selectors.billing_profile_get(actor=actor)
    ledger = _ledger_page(request)
    context = {
        "org": org,
        "balance": selectors.balance_get(actor=actor),
        "profile": profile,
        "entries": ledger.rows,
        "older": ledger.older,
        "first_page": not request.GET.get("before"),
        "may_manage": actor.can(MANAGE),
        "adjust_form": adjust_form or AdjustmentForm(currency=org.currency),
        "profile_form": profile_form
        or BillingProfileForm(
            initial=BillingProfileForm.initial_for(profile), currency=org.currency
        ),
        "exports": [exports.EXPORTS["ledger"]],
    }
    return render(request, "invoicing/balance.html", context)


@require_GET
@org_view(VIEW)
def balance(request):
    return _render_balance(request)


@require_POST
@org_view(MANAGE)
def balance_adjust(request):
    actor = request.actor
    form = AdjustmentForm(request.POST, currency=actor.organization.currency)
    if form.is_valid():
        try:
            entry = services.prepaid_adjust(actor=actor, **form.service_kwargs())
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("%(kind)s recorded.") % {"kind": entry.get_kind_display()})
            return redirect("invoicing:balance")
    return _render_balance(request, adjust_form=form)


@require_POST
@org_view(MANAGE)
def billing_settings(request):
    actor = request.actor
    form = BillingProfileForm(request.POST, currency=actor.organization.currency)
    if form.is_valid():
        try:
            services.billing_profile_update(actor=actor, **form.service_kwargs())
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("Billing settings saved."))
            return redirect("invoicing:balance")
    return _render_balance(request, profile_form=form)


# --- top-ups ---------------------------------------------------------------------------------


def _fresh_key(form):
    """A bound form rendered again gets a new one-time token (the one it
    carried may name a payment already)."""
    form.data = form.data.copy()
    form.data["request_key"] = secrets.token_urlsafe(24)
    return form


@org_view(VIEW)
def topup(request):
    """Card top-ups charge the card on file (Stripe on); a bank transfer
    received is recorded by finance by hand (credited at once). Never a fake
    payment: a card top-up stays pending until Stripe says it succeeded.
    Only for prepaid organizations: a postpaid one gets a page that says so."""
    actor = request.actor
    if request.method == "GET" and "payment" in request.GET:
        return _topup_status(request)
    if actor.organization.billing_mode != BillingMode.PREPAID:
        # Not a form that is then refused: a page that says why there is none.
        return render(
            request,
            "invoicing/topup_prepaid_only.html",
            {"org": actor.organization},
            status=200 if request.method == "GET" else 409,
        )
    currency = actor.organization.currency
    zone = actor.organization.timezone
    stripe_on = stripe_enabled()
    form = CardTopUpForm(currency=currency)
    manual_form = ManualTopUpForm(currency=currency, prefix="manual", timezone_name=zone)
    payment = None
    if request.method == "POST":
        if not actor.can(MANAGE):
            return render(
                request,
                "403.html",
                {"reason": _("Your role cannot top up the balance.")},
                status=403,
            )
        if request.POST.get("action") == "manual":
            manual_form = ManualTopUpForm(
                request.POST, currency=currency, prefix="manual", timezone_name=zone
            )
            recorded = _topup_manual(request, manual_form)
            if recorded is not None:
                return recorded
        elif not stripe_on:
            messages.error(request, _("Card top-ups are off; record a bank transfer instead."))
            return redirect("invoicing:topup")
        else:
            posted = CardTopUpForm(request.POST, currency=currency)
            payment = _topup_card(request, posted)
            if payment is None:
                form = _fresh_key(posted)
            else:
                with_micro(payment, "amount_minor")
    return _topup_page(request, form, manual_form, payment, stripe_on=stripe_on)


def _topup_page(request, form, manual_form, payment, *, stripe_on: bool):
    """The top-up page: both forms, the card on file, the balance and the
    recent top-ups; with Stripe.js when the card's bank asks for 3-D Secure."""
    actor = request.actor
    card, card_error = (
        card_on_file_or_error(actor) if stripe_on and actor.can(MANAGE) else (None, "")
    )
    context = {
        "form": form,
        "manual_form": manual_form,
        "stripe_on": stripe_on,
        "payment": payment,
        "card": card,
        "card_error": card_error,
        "balance": selectors.balance_get(actor=actor),
        "recent": [
            with_micro(p, "amount_minor")
            for p in selectors.payment_list(actor=actor, kind=PaymentKind.TOP_UP)[:20]
        ],
        "may_manage": actor.can(MANAGE),
    }
    if payment is not None and getattr(payment, "requires_action", False):
        context.update(stripe_js_context(), client_secret=payment.client_secret)
    return render(request, "invoicing/topup.html", context)


def _topup_status(request):
    """One top-up's status (the htmx poll on the top-up page, every few
    seconds while it is pending); another organization's is not found."""
    payment_id = selectors.parse_id(request.GET.get("payment"))
    payment = (
        selectors.payment_list(actor=request.actor, kind=PaymentKind.TOP_UP)
        .filter(pk=payment_id)
        .first()
        if payment_id
        else None
    )
    if payment is None:
        raise Http404("No such top-up in this organization.")
    context = {"payment": payment}
    if request.htmx:  # the page's balance follows the poll
        context["oob_balance"] = selectors.balance_get(actor=request.actor)
    return render(request, "invoicing/_topup_status.html", context)


def _topup_card(request, form):
    """A card top-up charged to the card on file (``topup_charge_card``), or
    None with the form's errors."""
    if not form.is_valid():
        return None
    try:
        payment = services.topup_charge_card(
            actor=request.actor,
            amount_minor=form.cleaned_data["amount"],
            request_key=form.cleaned_data.get("request_key") or "",
        )
    except StripeUnavailable as exc:
        form.add_error(
            None,
            _("%(reason)s Nothing was charged; try again in a moment.") % {"reason": exc.message},
        )
        return None
    except DomainError as exc:
        apply_errors(form, exc)
        return None
    if getattr(payment, "duplicate", False):
        messages.info(request, _("This top-up was submitted already; it was charged once."))
    elif payment.status == "failed":
        messages.error(
            request,
            _("The card was not charged: %(reason)s") % {"reason": payment.failure_message},
        )
    return payment


def _topup_manual(request, form):
    """Record a bank transfer received; a redirect, or None with the form's
    errors. A reference recorded before changes nothing, and the message
    says so: when, and for how much."""
    if not form.is_valid():
        return None
    try:
        payment = services.topup_record_manual(
            actor=request.actor,
            amount_minor=form.cleaned_data["amount"],
            reference=form.cleaned_data["reference"],
            paid_on=form.cleaned_data.get("paid_on"),
        )
    except DomainError as exc:
        apply_errors(form, exc)
        return None
    amount = format_amount(from_minor(payment.amount_minor, payment.currency), payment.currency)
    if getattr(payment, "duplicate", False):
        day = payment.paid_on or payment.created_at.date()
        messages.warning(
            request,
            _(
                "Bank transfer %(reference)s was already recorded on %(day)s for %(amount)s;"
                " nothing was recorded again and the balance did not change."
            )
            % {"reference": payment.reference, "day": day.isoformat(), "amount": amount},
        )
    else:
        messages.success(
            request,
            _("Bank transfer %(reference)s recorded; the balance rose by %(amount)s.")
            % {"reference": payment.reference, "amount": amount},
        )
    return redirect("invoicing:topup")
