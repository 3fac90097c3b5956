"""Console pages for gateway API keys: the list, issuing a key (its secret
shown once), a key's page and its edits, rotating, collecting a secret
someone else's rotation made, and revoking. Pages that show a secret are
never stored (``console.kernel.crypto.no_store``)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from accounts import selectors, services
from accounts.decorators import apply_errors, org_view
from accounts.errors import DomainError
from accounts.forms import ApiKeyEditForm, ApiKeyForm, RotateForm
from accounts.models import ApiKeyStatus
from accounts.permissions import Perm
from accounts.views import flash_error, limits_initial, page_of
from console.kernel.crypto import no_store

KEY_PERMS = (Perm.KEYS_VIEW_ALL, Perm.KEYS_MANAGE_OWN)


@org_view(*KEY_PERMS, any_of=True)
def api_key_list(request):
    actor = request.actor
    status = request.GET.get("status") or None
    if status not in (None, *ApiKeyStatus.values):
        status = None
    keys = selectors.api_key_list(actor=actor, status=status)
    page = page_of(request, keys)
    spend = selectors.api_key_spend(actor=actor, keys=page.object_list)
    for key in page.object_list:
        key.spend_bars = spend.get(key.pk, ())
    filters = [(None, _("all")), *((s, s) for s in ApiKeyStatus.values)]
    return render(
        request,
        "accounts/api_keys.html",
        {"page": page, "status": status, "filters": filters},
    )


def _key_form(request, data=None):
    actor = request.actor
    return ApiKeyForm(
        data,
        sub_accounts=selectors.sub_accounts_for_key_form(actor=actor),
        tz_name=actor.organization.timezone,
        model_names=selectors.model_choices(actor=actor),
    )


@org_view(Perm.KEYS_MANAGE_OWN)
def api_key_create(request):
    actor = request.actor
    form = _key_form(request, request.POST or None)
    template = "accounts/_api_key_form.html" if request.htmx else "accounts/api_key_new.html"
    if request.method == "POST" and form.is_valid():
        try:
            key, raw = services.api_key_issue(actor=actor, **form.service_kwargs())
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            template = (
                "accounts/_api_key_secret.html" if request.htmx else "accounts/api_key_secret.html"
            )
            return no_store(
                render(request, template, {"key": key, "raw_key": raw, "created": True})
            )
    return render(request, template, {"form": form})


@org_view(*KEY_PERMS, any_of=True)
def api_key_detail(request, key_id: int):
    actor = request.actor
    try:
        key = services.get_api_key(actor, key_id, for_change=False)
    except DomainError:
        raise Http404 from None
    may_change = actor.can(Perm.KEYS_MANAGE_ALL) or (
        actor.can(Perm.KEYS_MANAGE_OWN) and key.owner_id == actor.user.pk
    )
    initial = {
        "name": key.name,
        "ip_allowlist": "\n".join(key.ip_allowlist),
        "priority": key.priority,
        "expires_at": key.expires_at,
        **limits_initial(key),
    }
    form = ApiKeyEditForm(
        request.POST or None,
        initial=initial,
        tz_name=actor.organization.timezone,
        model_names=selectors.model_choices(actor=actor, sub_account=key.sub_account),
    )
    if request.method == "POST":
        if not may_change:
            return render(
                request, "403.html", {"reason": _("Your role cannot change this key.")}, status=403
            )
        if form.is_valid():
            try:
                services.api_key_update(actor=actor, key_id=key.pk, **form.service_kwargs())
            except DomainError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, _("Key saved."))
                return redirect("accounts:api_key_detail", key.pk)
    return render(
        request,
        "accounts/api_key_detail.html",
        {
            "key": key,
            "form": form,
            "may_change": may_change,
            "rotate_form": RotateForm(),
            "secret_waiting": bool(key.pending_secret) and key.owner_id == actor.user.pk,
            "spend_bars": selectors.api_key_spend(actor=actor, keys=[key]).get(key.pk, ()),
        },
    )


@org_view(Perm.KEYS_MANAGE_OWN)
def api_key_rotate(request, key_id: int):
    actor = request.actor
    try:
        key = services.get_api_key(actor, key_id)
    except DomainError:
        raise Http404 from None
    form = RotateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            key, raw = services.api_key_rotate(actor=actor, key_id=key.pk, **form.cleaned_data)
        except DomainError as exc:
            flash_error(request, exc)
            return redirect("accounts:api_key_detail", key.pk)
        # ``raw`` is "" when the permission matrix keeps the secret for the owner.
        return no_store(
            render(
                request,
                "accounts/api_key_secret.html",
                {"key": key, "raw_key": raw, "rotated": True},
            )
        )
    return render(request, "accounts/api_key_rotate.html", {"key": key, "form": form})


@require_POST
@org_view(Perm.KEYS_MANAGE_OWN)
def api_key_collect_secret(request, key_id: int):
    """The key's owner collects, once, the new secret someone else's rotation made."""
    try:
        raw = services.api_key_collect_secret(actor=request.actor, key_id=key_id)
        key = services.get_api_key(request.actor, key_id, for_change=False)
    except DomainError:
        raise Http404 from None
    if not raw:
        messages.error(request, _("There is no new secret waiting for you on this key."))
        return redirect("accounts:api_key_detail", key.pk)
    return no_store(
        render(
            request, "accounts/api_key_secret.html", {"key": key, "raw_key": raw, "rotated": True}
        )
    )


@org_view(Perm.KEYS_MANAGE_OWN)
def api_key_revoke(request, key_id: int):
    actor = request.actor
    try:
        key = services.get_api_key(actor, key_id)
    except DomainError:
        raise Http404 from None
    if request.method == "POST":
        try:
            services.api_key_revoke(actor=actor, key_id=key.pk)
        except DomainError as exc:
            flash_error(request, exc)
        else:
            messages.success(
                request,
                _("Key '%(name)s' (%(prefix)s…) revoked.")
                % {"name": key.name, "prefix": key.prefix},
            )
        return redirect("accounts:api_keys")
    return render(request, "accounts/api_key_revoke.html", {"key": key})
