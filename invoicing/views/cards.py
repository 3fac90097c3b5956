"""The card on file: shown (brand, last 4, expiry), added through a Stripe
SetupIntent confirmed on the page and checked here with Stripe, replaced or
removed."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from accounts.facade import DomainError, NotFound, org_view
from invoicing import services
from invoicing.views._shared import (
    MANAGE,
    VIEW,
    card_on_file_or_error,
    stripe_enabled,
    stripe_js_context,
)


@org_view(VIEW)
def payment_method(request):
    """The card on file (brand, last 4, expiry). Billing managers add one
    (a SetupIntent confirmed on the page by Stripe.js, then checked here
    with Stripe), replace it or remove it."""
    actor = request.actor
    stripe_on = stripe_enabled()
    setup = None
    if request.method == "POST":
        if not actor.can(MANAGE):
            return render(
                request, "403.html", {"reason": _("Your role cannot change the card.")}, status=403
            )
        if not stripe_on:
            messages.error(request, _("Card payments are not set up; pay by bank transfer."))
            return redirect("invoicing:payment_method")
        action = request.POST.get("action")
        try:
            if action == "start":
                setup = services.card_setup_start(actor=actor)
            elif action == "confirm":
                return _card_confirmed(request)
            elif action == "remove":
                removed = services.card_remove(actor=actor)
                messages.success(
                    request, _("Card removed.") if removed else _("There was no card on file.")
                )
                return redirect("invoicing:payment_method")
            else:
                messages.error(request, _("Unknown action."))
                return redirect("invoicing:payment_method")
        except DomainError as exc:
            messages.error(request, exc.message)
            return redirect("invoicing:payment_method")
    card, card_error = card_on_file_or_error(actor) if stripe_on else (None, "")
    context = {
        "stripe_on": stripe_on,
        "card": card,
        "card_error": card_error,
        "setup": setup,
        "may_manage": actor.can(MANAGE),
    }
    if setup is not None:
        context.update(stripe_js_context(), client_secret=setup.client_secret)
    return render(request, "invoicing/payment_method.html", context)


def _card_confirmed(request):
    """The page's Stripe.js confirmed a SetupIntent: Stripe is asked, not the page."""
    try:
        outcome = services.card_setup_complete(
            actor=request.actor, setup_intent_id=request.POST.get("setup_intent", "")
        )
    except NotFound:
        raise Http404("No such card setup in this organization.") from None
    except DomainError as exc:
        messages.error(request, _("The card was not saved: %(reason)s") % {"reason": exc.message})
        return redirect("invoicing:payment_method")
    if outcome in ("succeeded", "already_succeeded"):
        messages.success(request, _("Card saved: invoices and top-ups are charged to it."))
    elif outcome == "superseded":
        messages.info(request, _("A card saved since is the one on file."))
    else:
        messages.info(
            request,
            _("The card is not confirmed yet (Stripe says %(outcome)s).") % {"outcome": outcome},
        )
    return redirect("invoicing:payment_method")
