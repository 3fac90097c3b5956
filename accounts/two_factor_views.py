"""Console pages of the TOTP second factor (``accounts.two_factor``): the
code step of sign-in and the account's two-factor settings."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from accounts import throttle, two_factor
from accounts.errors import DomainError
from accounts.models import Role, User
from accounts.signin_views import _wait_message
from console.kernel.crypto import no_store


@require_http_methods(["GET", "POST"])
def login_code(request):
    """Second step of sign-in: a code from the authenticator app or a
    recovery code. Wrong codes count against the same throttle counters, by
    the same rule, as wrong passwords (``accounts.throttle``: per account +
    address, per address, per known device; the account's count across
    addresses never refuses a right code)."""
    pending = two_factor.pending_sign_in(request)
    user = User.objects.filter(pk=pending["user"], is_active=True).first() if pending else None
    if pending is None or user is None:
        messages.info(request, _("Sign in again."))
        return redirect("accounts:login")
    context = {"error": "", "locked": ""}
    if request.method == "POST":
        attempt = throttle.attempt_for(
            request, user.email, throttle.client_address(request), user.pk
        )
        seconds, locked = _wait_message(attempt)
        if seconds > 0:
            response = render(
                request, "accounts/two_factor_code.html", {**context, "locked": locked}, status=429
            )
            response["Retry-After"] = str(seconds)
            return response
        throttle.charge(attempt)
        if two_factor.verify(user, request.POST.get("code", "")):
            throttle.succeeded(attempt)
            del request.session[two_factor.PENDING_KEY]
            login(request, user, backend=pending["backend"])
            response = redirect(pending["next"])
            throttle.remember_device(request, response, user)
            return response
        context["error"] = _("That code is not right (or was used already).")
    return render(request, "accounts/two_factor_code.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request):
    """Turn the second factor on (scan, confirm a code, note the recovery
    codes shown once), make new recovery codes, or turn it off."""
    user = request.user
    action = request.POST.get("action") if request.method == "POST" else None
    context: dict = {"error": "", "codes": None}
    if action == "confirm":
        codes = two_factor.confirm_setup(user, request.POST.get("code", ""))
        if codes is None:
            context["error"] = _(
                "That code is not right; check the time on your phone and try again."
            )
        else:
            context["codes"] = codes
            messages.success(request, _("Two-factor sign-in is on."))
    elif action in ("require", "unrequire") and getattr(request, "actor", None) is not None:
        try:
            two_factor.set_organization_requirement(
                actor=request.actor, required=action == "require"
            )
        except DomainError as exc:
            context["error"] = exc.message
        else:
            return redirect("accounts:two_factor")
    elif action == "disable" and _organization_requires(request):
        context["error"] = _("Your organization requires two-factor sign-in.")
    elif action in ("disable", "regenerate"):
        if not two_factor.verify(user, request.POST.get("code", "")):
            context["error"] = _("That code is not right.")
        elif action == "disable":
            two_factor.disable(user)
            messages.success(request, _("Two-factor sign-in is off."))
            return redirect("accounts:two_factor")
        else:
            context["codes"] = two_factor.issue_recovery_codes(user)
    context = _page(request, context)
    response = render(
        request,
        "accounts/two_factor_settings.html",
        context,
        status=400 if context["error"] else 200,
    )
    # The setup key (and its QR code) and new recovery codes are never stored; the
    # page of a user who has it on, without new codes, is ordinary.
    return no_store(response) if context["codes"] or not context["enabled"] else response


def _page(request, context: dict) -> dict:
    user = request.user
    actor = getattr(request, "actor", None)
    enabled = two_factor.is_enabled(user)
    context["enabled"] = enabled
    context["organization"] = actor.organization if actor else None
    context["is_owner"] = bool(actor and actor.membership.role == Role.OWNER)
    context["required"] = bool(actor and actor.organization.require_two_factor)
    if enabled:
        context["codes_left"] = two_factor.recovery_codes_left(user)
    else:
        device = two_factor.setup_device(user)
        context["qr"] = mark_safe(two_factor.qr_svg(device))  # noqa: S308 - segno's own SVG
        context["secret"] = two_factor.secret_text(device)
    return context


def _organization_requires(request) -> bool:
    actor = getattr(request, "actor", None)
    return bool(actor and actor.organization.require_two_factor)
