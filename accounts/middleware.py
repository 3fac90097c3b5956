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
