"""Signing in, out of the console's own sign-in form: the throttled login
(``accounts.throttle``), the Django admin's login wrapped in the same throttle,
the language switch that also saves a signed-in user's choice, and the
password change page."""

from __future__ import annotations

import functools
import math
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth import BACKEND_SESSION_KEY, logout
from django.contrib.auth import views as auth_views
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST
from django.views.i18n import set_language as django_set_language

from accounts import throttle, two_factor
from accounts.middleware import supported_language
from accounts.models import User


def _wait_words(seconds: int) -> str:
    if seconds < 120:
        return ngettext("%(n)d second", "%(n)d seconds", seconds) % {"n": seconds}
    minutes = math.ceil(seconds / 60)
    return ngettext("%(n)d minute", "%(n)d minutes", minutes) % {"n": minutes}


def _login_attempt(request) -> tuple[throttle.Attempt, int, str]:
    """The throttle's counters for a posted sign-in, the seconds to wait before
    it may be checked (0: now) and, when waiting, what to tell the person."""
    email = (request.POST.get("username") or "").strip()
    user_id = (
        User.objects.filter(email__iexact=email).values_list("pk", flat=True).first()
        if email
        else None
    )
    attempt = throttle.attempt_for(request, email, throttle.client_address(request), user_id)
    seconds, message = _wait_message(attempt)
    return attempt, seconds, message


def _wait_message(attempt: throttle.Attempt) -> tuple[int, str]:
    """Seconds before ``attempt`` may be checked (0: now) and, when waiting,
    what to tell the person (the password and the two-factor code steps)."""
    seconds = math.ceil(throttle.retry_after(attempt))
    message = ""
    if seconds > 0:
        at = timezone.now() + timedelta(seconds=seconds)
        message = _(
            "Too many failed sign-in attempts. Try again in %(wait)s (after %(at)s UTC)."
        ) % {"wait": _wait_words(seconds), "at": f"{at:%H:%M:%S}"}
    return seconds, message


@require_POST
def set_language(request):
    """Django's ``set_language`` (the cookie, back to ``next``), and for a
    signed-in user the choice saved on their account, so it follows them to
    every browser and sign-in."""
    response = django_set_language(request)
    language = supported_language(request.POST.get("language"))
    user = request.user
    if language and user.is_authenticated and user.language != language:
        user.language = language
        user.save(update_fields=["language"])
    return response


class LoginView(auth_views.LoginView):
    """Django's login behind ``accounts.throttle``: per account + address, per
    address and per known device, each failure past the free ones doubles the
    wait before the next attempt; an attempt made too early is answered 429
    with the time to wait, without checking the password. Failures on the
    account from everywhere never refuse the right password; they only leave
    each address one free failure on it."""

    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        attempt, seconds, locked = _login_attempt(request)
        if seconds > 0:
            # An unbound form: the password is not even checked.
            form = self.form_class(request, initial={"username": request.POST.get("username")})
            context = self.get_context_data(form=form, locked=locked)
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(seconds)
            return response
        throttle.charge(attempt)
        self._attempt = attempt
        return super().post(request, *args, **kwargs)

    def form_valid(self, form):
        user = form.get_user()
        if two_factor.is_enabled(user):
            # The right password is no failure; the code step is counted on its own.
            throttle.uncharge(self._attempt)
            two_factor.begin_sign_in(self.request, user, self.get_success_url())
            return redirect("accounts:login_code")
        throttle.succeeded(self._attempt)
        response = super().form_valid(form)
        throttle.remember_device(self.request, response, form.get_user())
        return response


def throttled_login(login_view):
    """``login_view`` (the Django admin's, which ``AccountsConfig.ready`` wraps)
    behind the same throttle as the console's sign-in, so it is no way around it."""

    @functools.wraps(login_view)
    def view(request, *args, **kwargs):
        if request.method != "POST":
            return login_view(request, *args, **kwargs)
        attempt, seconds, locked = _login_attempt(request)
        if seconds > 0:
            response = HttpResponse(locked, status=429, content_type="text/plain; charset=utf-8")
            response["Retry-After"] = str(seconds)
            return response
        throttle.charge(attempt)
        response = login_view(request, *args, **kwargs)
        user = request.user
        if response.status_code == 302 and user.is_authenticated and two_factor.is_enabled(user):
            # The admin's sign-in is no way around the second factor either.
            throttle.uncharge(attempt)
            backend = request.session.get(BACKEND_SESSION_KEY)
            logout(request)
            user.backend = backend
            next_url = request.POST.get("next") or ""
            if not url_has_allowed_host_and_scheme(
                next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
            ):
                next_url = reverse("admin:index")
            two_factor.begin_sign_in(request, user, next_url)
            return redirect("accounts:login_code")
        if response.status_code == 302 and request.user.is_authenticated:
            throttle.succeeded(attempt)
            throttle.remember_device(request, response, request.user)
        return response

    return view


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "accounts/password_change.html"

    def get_success_url(self):
        messages.success(self.request, _("Your password was changed."))
        return reverse("console:overview")
