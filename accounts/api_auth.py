"""REST API authentication with personal access tokens (``Authorization: Bearer pat_…``)."""

from __future__ import annotations

from rest_framework import authentication, exceptions, permissions

from accounts.actors import Actor
from accounts.services import personal_access_token_authenticate


class PersonalAccessTokenAuthentication(authentication.BaseAuthentication):
    keyword = "bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword or not raw.strip().startswith("pat_"):
            return None
        token = personal_access_token_authenticate(raw.strip())
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked access token.")
        if token.read_only and request.method not in permissions.SAFE_METHODS:
            # Whatever the view's own permissions: a read-only token never writes.
            raise exceptions.PermissionDenied(
                "This access token is read-only; use a read-and-write token to make changes.",
                code="read_only_token",
            )
        # The token pins the organization and role it acts with.
        request._request.actor = Actor(token.membership, request._request.META.get("REMOTE_ADDR"))
        return token.membership.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'
