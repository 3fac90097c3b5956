"""Guards for console views: login, an organization to act in, a permission."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils.translation import gettext as _

from accounts.permissions import Perm


def org_view(*perms: Perm, any_of: bool = False):
    """Require a signed-in member of an organization holding ``perms`` (all of
    them, or one with ``any_of``). Other users get a 403 page, never data."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            actor = request.actor
            if actor is None:
                return render(request, "accounts/no_organization.html", status=403)
            checks = [actor.can(p) for p in perms]
            if perms and not (any(checks) if any_of else all(checks)):
                return render(
                    request,
                    "403.html",
                    {"reason": _("Your role cannot open this page.")},
                    status=403,
                )
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def apply_errors(form, exc) -> None:
    """Put a service's field errors on the form (unknown fields go to the top)."""
    for field, messages in (exc.fields or {"__all__": [exc.message]}).items():
        target = field if field in form.fields else None
        for message in messages:
            form.add_error(target, message)
