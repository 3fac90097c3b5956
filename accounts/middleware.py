"""Resolve the organization a console request acts in.

The session remembers the chosen organization; a user who is not (or no
longer) a member of it falls back to their first membership. ``request.actor``
is ``None`` for anonymous users and for users with no organization."""

from __future__ import annotations

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
        from django.shortcuts import redirect
        from django.urls import reverse

        from accounts import two_factor

        if not request.path.startswith(self.OPEN_PREFIXES):
            open_paths = {
                reverse(name)
                for name in (
                    "accounts:two_factor",
                    "accounts:logout",
                    "accounts:organization_switch",
                    "accounts:password_change",
                )
            }
            if request.path not in open_paths and two_factor.must_enroll(request):
                return redirect("accounts:two_factor")
        return self.get_response(request)
