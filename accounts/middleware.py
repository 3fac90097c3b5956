"""Resolve the organization a console request acts in.

The session remembers the chosen organization; a user who is not (or no
longer) a member of it falls back to their first membership. ``request.actor``
is ``None`` for anonymous users and for users with no organization."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import translation

from accounts import two_factor
from accounts.actors import Actor
from accounts.models import Membership

SESSION_KEY = "current_org_id"


def client_ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR")


def _resolve(request) -> Actor | None:
    user = request.user
    if not user.is_authenticated:
        return None
    qs = Membership.objects.select_related("organization", "user").filter(
        user=user, organization__is_active=True
    )
    wanted = request.session.get(SESSION_KEY)
    membership = qs.filter(organization_id=wanted).first() if wanted else None
    if membership is None:
        membership = qs.order_by("organization__name").first()
        if membership is not None:
            request.session[SESSION_KEY] = membership.organization_id
    return Actor(membership, client_ip(request)) if membership else None


class CurrentOrganizationMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.actor = _resolve(request)
        return self.get_response(request)


class RequireTwoFactorMiddleware:
    """A member of an organization that requires two-factor sign-in, without
    a second factor yet, reaches only the page that sets one up (and signing
    out, switching organization, changing the password); every other console
    page redirects there. The REST API (personal access tokens) is not a
    sign-in and is left alone."""

    OPEN_PREFIXES = ("/api/", "/static/", "/healthz", "/billing/stripe/webhook/")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith(self.OPEN_PREFIXES):
            open_paths = {
                reverse(name)
                for name in (
                    "accounts:two_factor",
                    "accounts:logout",
                    "accounts:organization_switch",
                    "accounts:password_change",
                    "accounts:set_language",
                )
            }
            if request.path not in open_paths and two_factor.must_enroll(request):
                return redirect("accounts:two_factor")
        return self.get_response(request)


def supported_language(code: str | None) -> str | None:
    """``code`` when it is one of settings.LANGUAGES, else ``None``."""
    return code if code in dict(settings.LANGUAGES) else None


class UserLanguageMiddleware:
    """A signed-in user's own language (``User.language``, saved when they
    switch) wins over the cookie and the browser's Accept-Language that
    LocaleMiddleware looked at; the response brings the cookie in line, so
    the sign-in page after signing out keeps their language too. A user who
    never chose follows LocaleMiddleware. The REST API under /api/ answers
    in English."""

    def __init__(self, get_response):
        self.get_response = get_response

    # The REST API stays in English whatever the client's Accept-Language:
    # its messages are for programs (and their logs) as much as for people.
    ENGLISH_PREFIXES = ("/api/",)

    def __call__(self, request):
        if request.path.startswith(self.ENGLISH_PREFIXES):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = settings.LANGUAGE_CODE
            return self.get_response(request)
        language = user_language(request)
        if language:
            translation.activate(language)
            request.LANGUAGE_CODE = language
        response = self.get_response(request)
        # Signing in applies the user's language from this response on;
        # signing out leaves the cookie, so the sign-in page keeps it.
        language = user_language(request)
        if language and request.COOKIES.get(_cookie_name()) != language:
            set_language_cookie(response, language)
        return response


def user_language(request) -> str | None:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return supported_language(getattr(user, "language", None))


def _cookie_name() -> str:
    return settings.LANGUAGE_COOKIE_NAME


def set_language_cookie(response, language: str) -> None:
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME,
        language,
        max_age=settings.LANGUAGE_COOKIE_AGE,
        path=settings.LANGUAGE_COOKIE_PATH,
        domain=settings.LANGUAGE_COOKIE_DOMAIN,
        secure=settings.LANGUAGE_COOKIE_SECURE,
        httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
        samesite=settings.LANGUAGE_COOKIE_SAMESITE,
    )
