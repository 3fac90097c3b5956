"""Console pages of the accounts app. Each view parses input, calls one
service or selector, and renders the page (or, for htmx, just the partial)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from accounts import selectors, services
from accounts.decorators import apply_errors, org_view
from accounts.errors import DomainError, NotFound
from accounts.forms import (
    AcceptNewUserForm,
    InviteForm,
    MemberRemoveForm,
    OrganizationForm,
    RoleForm,
    SubAccountForm,
    TokenForm,
)
from accounts.middleware import SESSION_KEY
from accounts.models import Membership, Role, User, role_noun
from accounts.permissions import Perm, can_view_keys, has_perm
from console.kernel.crypto import no_store
from console.kernel.money import amount_input, micro_to_decimal


def page_of(request, qs, per_page=50):
    return Paginator(qs, per_page).get_page(request.GET.get("page"))


def _object_id(value) -> int | None:
    """A posted id: a positive integer that fits the 64-bit id columns, else None."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    number = int(value)
    return number if 0 < number < 2**63 else None


def flash_error(request, exc: DomainError) -> None:
    messages.error(request, exc.message)


# --- organization ------------------------------------------------------------


@require_POST
@org_view()
def organization_switch(request):
    org_id = _object_id(request.POST.get("organization"))
    if (
        org_id is None
        or not Membership.objects.filter(
            user=request.user, organization_id=org_id, organization__is_active=True
        ).exists()
    ):
        messages.error(request, _("You are not a member of that organization."))
    else:
        request.session[SESSION_KEY] = org_id
    return redirect("console:overview")


@org_view(Perm.ORG_VIEW)
def organization_settings(request):
    actor = request.actor
    org = actor.organization
    cap = org.developer_key_cap
    form = OrganizationForm(
        request.POST or None,
        initial={
            "name": org.name,
            "timezone": org.timezone,
            "developer_key_cap": "" if cap is None else micro_to_decimal(cap).normalize(),
        },
    )
    if request.method == "POST":
        if not actor.can(Perm.ORG_MANAGE):
            return render(
                request, "403.html", {"reason": _("Your role cannot change settings.")}, status=403
            )
        if form.is_valid():
            try:
                services.organization_update(actor=actor, **form.cleaned_data)
            except DomainError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, _("Settings saved."))
                return redirect("accounts:organization_settings")
    return render(request, "accounts/organization.html", {"form": form, "org": org})


# --- members and invitations -------------------------------------------------


INVITE_LINK_SESSION_KEY = "accounts.invite_link"


@org_view(Perm.MEMBERS_VIEW)
def member_list(request):
    actor = request.actor
    invite_form = InviteForm(request.POST or None)
    invite_link = None
    if request.method == "POST":
        if not actor.can(Perm.MEMBERS_MANAGE):
            return render(
                request, "403.html", {"reason": _("Your role cannot invite members.")}, status=403
            )
        if invite_form.is_valid():
            try:
                invitation, raw = services.invitation_create(
                    actor=actor, **invite_form.cleaned_data
                )
            except DomainError as exc:
                apply_errors(invite_form, exc)
            else:
                # The link is shown once, on the page this redirects to, to
                # whoever invited (the token is stored hashed; the session
                # holds it until that page pops it): to copy into a chat when
                # the e-mail does not arrive.
                messages.success(
                    request, _("Invitation sent to %(email)s.") % {"email": invitation.email}
                )
                request.session[INVITE_LINK_SESSION_KEY] = settings.CONSOLE_BASE_URL + reverse(
                    "accounts:invitation_accept", args=[raw]
                )
                return redirect("accounts:members")
    else:
        invite_link = request.session.pop(INVITE_LINK_SESSION_KEY, None)
        if not actor.can(Perm.MEMBERS_MANAGE):
            invite_link = None
    members = list(selectors.member_list(actor=actor))
    owners = [m for m in members if m.role == Role.OWNER]
    context = {
        "members": members,
        # The last owner can be neither removed nor demoted (the services
        # refuse it): the page does not offer it.
        "last_owner_id": owners[0].pk if len(owners) == 1 else None,
        "invite_link": invite_link,
        "invitations": selectors.invitation_list(actor=actor)[:50]
        if actor.can(Perm.MEMBERS_MANAGE)
        else [],
        "invite_form": invite_form,
        "role_choices": RoleForm.base_fields["role"].choices,
    }
    response = render(request, "accounts/members.html", context)
    # The one answer that shows the link is never stored; the page otherwise is ordinary.
    return no_store(response) if invite_link else response


def _run_action(request, action, success, redirect_to: str):
    """Run one service call for a POST button; report the outcome as a message.
    An object that is not there, or not this organization's, is a 404 like
    every other page's (nothing says whether it exists elsewhere)."""
    try:
        result = action()
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except DomainError as exc:
        flash_error(request, exc)
    else:
        messages.success(request, success(result) if callable(success) else success)
    return redirect(redirect_to)


@require_POST
@org_view(Perm.MEMBERS_MANAGE)
def member_role(request, membership_id: int):
    if not Membership.objects.filter(
        pk=membership_id, organization_id=request.actor.organization_id
    ).exists():
        raise Http404
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Choose one of the listed roles."))
        return redirect("accounts:members")
    return _run_action(
        request,
        lambda: services.membership_change_role(
            actor=request.actor, membership_id=membership_id, **form.cleaned_data
        ),
        lambda m: (
            _("%(email)s is now %(role)s.") % {"email": m.user.email, "role": m.get_role_display()}
        ),
        "accounts:members",
    )


@org_view(Perm.MEMBERS_VIEW)
def member_remove(request, membership_id: int):
    """Confirm removing a member (or leaving), choosing what becomes of their
    API keys: revoked (the default) or handed over to another member."""
    actor = request.actor
    target = (
        Membership.objects.select_related("user")
        .filter(pk=membership_id, organization_id=actor.organization_id)
        .first()
    )
    if target is None:
        raise Http404
    if target.pk != actor.membership.pk and not actor.can(Perm.MEMBERS_MANAGE):
        messages.error(
            request,
            _("Your role (%(role)s) cannot remove members.") % {"role": role_noun(actor.role)},
        )
        return redirect("accounts:members")
    recipients = [
        m
        for m in selectors.member_list(actor=actor).select_related("user")
        if m.pk != target.pk and has_perm(m.role, Perm.KEYS_MANAGE_OWN)
    ]
    form = MemberRemoveForm(request.POST or None, recipients=recipients)
    if request.method == "POST" and form.is_valid():
        try:
            services.membership_remove(actor=actor, membership_id=target.pk, **form.cleaned_data)
        except NotFound as exc:
            raise Http404(exc.message) from exc
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("%(email)s removed.") % {"email": target.user.email})
            if target.pk == actor.membership.pk:
                return redirect("console:overview")
            return redirect("accounts:members")
    keys = selectors.member_keys(actor=actor, user_id=target.user_id)
    return render(
        request,
        "accounts/member_remove.html",
        {"target": target, "form": form, "keys": keys, "leaving": target.pk == actor.membership.pk},
    )


@require_POST
@org_view(Perm.MEMBERS_MANAGE)
def invitation_revoke(request, invitation_id: int):
    return _run_action(
        request,
        lambda: services.invitation_revoke(actor=request.actor, invitation_id=invitation_id),
        _("Invitation withdrawn."),
        "accounts:members",
    )


def invitation_accept(request, token: str):
    """The one-time link from the invitation e-mail."""
    try:
        invitation = services.invitation_lookup(token)
    except DomainError as exc:
        return render(
            request, "accounts/invitation_invalid.html", {"message": exc.message}, status=410
        )
    has_account = User.objects.filter(email__iexact=invitation.email).exists()
    form = AcceptNewUserForm(request.POST or None)
    error = None
    if request.method == "POST":
        try:
            if request.user.is_authenticated:
                membership = services.invitation_accept(
                    raw_token=token, user=request.user, ip=request.META.get("REMOTE_ADDR")
                )
            elif has_account:
                return redirect(f"{reverse('accounts:login')}?next={request.path}")
            elif form.is_valid():
                membership = services.invitation_accept_new_user(
                    raw_token=token, ip=request.META.get("REMOTE_ADDR"), **form.cleaned_data
                )
                login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
            else:
                membership = None
        except DomainError as exc:
            apply_errors(form, exc)
            error = exc.message
            membership = None
        if membership is not None:
            request.session[SESSION_KEY] = membership.organization_id
            messages.success(
                request,
                _("Welcome to %(org)s.") % {"org": membership.organization.name},
            )
            return redirect("console:overview")
    return render(
        request,
        "accounts/invitation_accept.html",
        {"invitation": invitation, "form": form, "has_account": has_account, "error": error},
    )


# --- sub-accounts ------------------------------------------------------------


def limits_initial(obj) -> dict:
    initial = {
        "allowed_models": list(obj.allowed_models or []),
        "required_tag_keys": ", ".join(obj.required_tag_keys or []),
        "rpm_limit": obj.rpm_limit,
        "tpm_limit": obj.tpm_limit,
    }
    for field in ("spend_cap_daily", "spend_cap_monthly", "spend_cap_lifetime"):
        value = getattr(obj, field)
        initial[field] = amount_input(value)
    return initial


@org_view(Perm.SUBACCOUNTS_VIEW)
def sub_account_list(request):
    actor = request.actor
    form = SubAccountForm(request.POST or None, model_names=selectors.model_choices(actor=actor))
    if request.method == "POST":
        if not actor.can(Perm.SUBACCOUNTS_MANAGE):
            return render(
                request,
                "403.html",
                {"reason": _("Your role cannot create sub-accounts.")},
                status=403,
            )
        if form.is_valid():
            data = dict(form.cleaned_data)
            data.pop("status", None)
            try:
                sub = services.sub_account_create(actor=actor, **data)
            except DomainError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, _("Sub-account '%(name)s' created.") % {"name": sub.name})
                return redirect("accounts:sub_account_detail", sub.pk)
    return render(
        request,
        "accounts/sub_accounts.html",
        {"sub_accounts": selectors.sub_account_list(actor=actor), "form": form},
    )


@org_view(Perm.SUBACCOUNTS_VIEW)
def sub_account_detail(request, sub_account_id: int):
    actor = request.actor
    try:
        sub = services.get_sub_account(actor, sub_account_id)
    except DomainError:
        raise Http404 from None
    form = SubAccountForm(
        request.POST or None,
        initial={"name": sub.name, "status": sub.status, **limits_initial(sub)},
        model_names=selectors.model_choices(actor=actor),
    )
    if request.method == "POST":
        if not actor.can(Perm.SUBACCOUNTS_MANAGE):
            return render(
                request,
                "403.html",
                {"reason": _("Your role cannot change sub-accounts.")},
                status=403,
            )
        try:
            if "members" in request.POST or request.POST.get("action") == "members":
                ids = [i for i in map(_object_id, request.POST.getlist("members")) if i]
                services.sub_account_set_members(
                    actor=actor, sub_account_id=sub.pk, membership_ids=ids
                )
                messages.success(request, _("Members updated."))
                return redirect("accounts:sub_account_detail", sub.pk)
            if form.is_valid():
                services.sub_account_update(actor=actor, sub_account_id=sub.pk, **form.cleaned_data)
                messages.success(request, _("Sub-account saved."))
                return redirect("accounts:sub_account_detail", sub.pk)
        except DomainError as exc:
            apply_errors(form, exc)
    keys = (
        selectors.api_key_list(actor=actor, sub_account_id=sub.pk)
        if can_view_keys(actor.role)
        else []
    )
    return render(
        request,
        "accounts/sub_account_detail.html",
        {
            "sub": sub,
            "form": form,
            "keys": keys,
            "members": selectors.member_list(actor=actor),
            "assigned": set(sub.members.values_list("pk", flat=True)),
        },
    )


# --- audit log and access tokens ---------------------------------------------------


@org_view(Perm.AUDIT_VIEW)
def audit_log(request):
    action = (request.GET.get("action") or "").strip()[:64] or None
    events = selectors.audit_event_list(actor=request.actor, action_prefix=action)
    return render(
        request,
        "accounts/audit.html",
        {"page": page_of(request, events.select_related("actor")), "action": action},
    )


@org_view(Perm.TOKENS_MANAGE_OWN)
def access_tokens(request):
    actor = request.actor
    form = TokenForm(request.POST or None)
    raw = None
    if request.method == "POST":
        if "revoke" in request.POST:
            try:
                services.personal_access_token_revoke(actor=actor, token_id=request.POST["revoke"])
            except DomainError as exc:
                flash_error(request, exc)
            else:
                messages.success(request, _("Token revoked."))
            return redirect("accounts:access_tokens")
        if form.is_valid():
            try:
                _token, raw = services.personal_access_token_issue(
                    actor=actor, **form.service_kwargs()
                )
            except DomainError as exc:
                apply_errors(form, exc)
            else:
                form = TokenForm()
    response = render(
        request,
        "accounts/access_tokens.html",
        {"tokens": selectors.access_token_list(actor=actor), "form": form, "raw_token": raw},
    )
    # The answer that shows a new token is never stored; the list otherwise is ordinary.
    return no_store(response) if raw else response
