"""What the finance console's pages share: the permissions they need, an
invoice of the current organization (or a 404), minor units given their
micro-unit twins for templates, PDF answers, and whether Stripe is on and
what its script needs on a page."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _

from accounts.facade import NotFound, Perm
from console.kernel.crypto import no_store
from invoicing import selectors, stripe_adapter
from invoicing.money import from_minor
from invoicing.stripe_adapter import StripeError

VIEW = Perm.BILLING_VIEW
MANAGE = Perm.BILLING_MANAGE


def invoice_or_404(request, invoice_id):
    try:
        return selectors.invoice_get(actor=request.actor, invoice_id=invoice_id)
    except NotFound:
        raise Http404("No such invoice in this organization.") from None


def with_micro(obj, *fields):
    """Give ``obj`` the micro-unit twin (``paid_micro``) of each minor-unit
    field (``paid_minor``), so templates format every amount one way."""
    for name in fields:
        setattr(obj, name.replace("_minor", "_micro"), from_minor(getattr(obj, name), obj.currency))
    return obj


INVOICE_MINOR = ("paid_minor", "credited_minor", "amount_due_minor", "amount_due_initial_minor")


def redirect_to_detail(invoice):
    return redirect("invoicing:invoice_detail", invoice.pk)


def pdf_response(data: bytes, filename: str) -> HttpResponse:
    response = HttpResponse(data, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return no_store(response)


def stripe_enabled() -> bool:
    return stripe_adapter.enabled()


def stripe_js_context() -> dict:
    """What a page that runs Stripe.js needs: its URL and our publishable key."""
    return {
        "stripe_js_url": settings.STRIPE_JS_URL,
        "publishable_key": settings.STRIPE_PUBLISHABLE_KEY,
    }


def card_on_file_or_error(actor):
    """(card, error message): the card on file, or why Stripe could not say."""
    try:
        return selectors.card_on_file(actor=actor), ""
    except StripeError as exc:
        return None, _("The card on file cannot be shown just now: %(reason)s") % {
            "reason": exc.message
        }
