"""Password reset by e-mail, with Django's own views and tokens.

* The answer to a reset request is the same page whether or not an account
  has the address (Django's form sends only to an active account with a
  usable password, and says nothing either way).
* Throttled, in the cache (shared by every web process when Redis is
  configured): at most ``PASSWORD_RESET_PER_ACCOUNT`` e-mails per address
  typed and ``PASSWORD_RESET_PER_CLIENT`` requests per client address in
  ``PASSWORD_RESET_WINDOW_SECONDS``. Past the per-address limit the request
  is answered as usual and nothing is sent (so the limit says nothing about
  the account either); past the per-client limit the answer is 429.
* Tokens are Django's: they hash the password and the last sign-in, so a
  link stops working once it has been used to set a password (or the user
  signs in), and after ``PASSWORD_RESET_TIMEOUT`` seconds in any case.
* The e-mail goes through the configured backend (by default files under
  ``var/mail``, never the logs: it carries a one-time link).
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.shortcuts import redirect
from django.urls import reverse_lazy
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.middleware import client_ip, supported_language

_PREFIX = "pwreset"


def _digest(*parts: str) -> str:
    # Cache keys never carry what a person typed.
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _count(kind: str, ident: str) -> int:
    """Add one request to the ``kind`` counter of ``ident``; the count so far
    in the current window (which starts at the window's first request)."""
    key = f"{_PREFIX}:{kind}:{_digest(ident)}"
    window = settings.PASSWORD_RESET_WINDOW_SECONDS
    if cache.add(key, 1, timeout=window):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window)
        return 1


class PasswordResetForm(auth_forms.PasswordResetForm):
    """Django's form; the e-mail goes out in the account's own language (the
    one it chose in the console), else in the language of the page."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["email"].label = gettext_lazy("E-mail")

    def send_mail(self, subject_template_name, email_template_name, context, *args, **kwargs):
        language = supported_language(getattr(context.get("user"), "language", None))
        with translation.override(language or translation.get_language()):
            super().send_mail(subject_template_name, email_template_name, context, *args, **kwargs)


class PasswordResetView(auth_views.PasswordResetView):
    form_class = PasswordResetForm
    template_name = "accounts/password_reset_form.html"
    email_template_name = "accounts/password_reset_email.txt"
    subject_template_name = "accounts/password_reset_subject.txt"
    success_url = reverse_lazy("accounts:password_reset_done")

    @property
    def extra_email_context(self):
        """The link is built from ``CONSOLE_BASE_URL`` (the console's public
        address), never from the Host the request came with."""
        return {"console_base_url": settings.CONSOLE_BASE_URL}

    def get_context_data(self, **kwargs):
        kwargs.setdefault("timeout_minutes", max(1, settings.PASSWORD_RESET_TIMEOUT // 60))
        return super().get_context_data(**kwargs)

    def form_valid(self, form):
        client = client_ip(self.request) or "unknown"
        if _count("client", client) > settings.PASSWORD_RESET_PER_CLIENT:
            form.add_error(
                None,
                _("Too many reset requests from your network. Try again in %(n)d minutes.")
                % {"n": max(1, settings.PASSWORD_RESET_WINDOW_SECONDS // 60)},
            )
            response = self.render_to_response(self.get_context_data(form=form), status=429)
            response["Retry-After"] = str(settings.PASSWORD_RESET_WINDOW_SECONDS)
            return response
        email = form.cleaned_data["email"].strip().lower()
        if _count("account", email) > settings.PASSWORD_RESET_PER_ACCOUNT:
            # Answered like any other request: nothing says whether it was sent.
            return redirect(self.get_success_url())
        return super().form_valid(form)


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "accounts/password_reset_done.html"


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "accounts/password_reset_confirm.html"
    success_url = reverse_lazy("accounts:password_reset_complete")


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "accounts/password_reset_complete.html"
