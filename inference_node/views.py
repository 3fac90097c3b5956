"""Console pages of the node registry ("Nodes & channels"). Owners and admins
manage the org's own nodes and vendor channels with their key pools; viewers
read; shared platform nodes are shown read-only, without their address,
token, keys or cost prices. API keys are write-only: a page shows a key's hint
(its last four characters), never the key. Each view parses input, calls one
service or selector, and renders the page (or, for htmx, just the partial)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy
from django.views.decorators.http import require_POST

from accounts.facade import (
    DomainError,
    NotFound,
    Perm,
    apply_errors,
    org_view,
)
from accounts.facade import (
    PermissionDenied as DomainPermissionDenied,
)
from inference_node import selectors, services
from inference_node.forms import CredentialForm, NodeForm
from inference_node.models import CredentialStatus, NodeStatus
from inference_node.presets import PRESETS, get_preset


def _forbidden(request, reason: str):
    return render(request, "403.html", {"reason": reason}, status=403)


def _node(request, node_id: int, *, for_change: bool = False):
    """The node, or an exception the caller turns into 404 / 403."""
    try:
        return selectors.get_node(request.actor, node_id, for_change=for_change)
    except NotFound:
        raise Http404 from None


def _rows(nodes):
    return [(node, selectors.missing_models(node), selectors.key_pool(node)) for node in nodes]


def _preset_data() -> dict:
    """What the add form's script fills in when a preset is chosen."""
    return {
        p.key: {
            "kind": p.kind,
            "base_url": p.base_url,
            "api_path": p.api_path,
            "health_check": p.health_check,
            "models": p.models_text,
            "quirks": str(p.quirks),
        }
        for p in PRESETS.values()
    }


@org_view(Perm.NODES_VIEW)
def node_list(request):
    nodes = selectors.node_list(actor=request.actor)
    context = {"rows": _rows(nodes)}
    if request.htmx and request.htmx.target == "node-table":
        return render(request, "inference_node/_node_table.html", context)
    return render(request, "inference_node/nodes.html", context)


@org_view(Perm.NODES_MANAGE)
def node_create(request):
    form = NodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            node = services.node_create(actor=request.actor, **form.service_kwargs())
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(
                request, _("'%(name)s' added; it is probed within seconds.") % {"name": node.name}
            )
            return redirect("inference_node:node_detail", node.pk)
    return render(
        request,
        "inference_node/node_form.html",
        {
            "form": form,
            "presets": PRESETS.values(),
            "preset_data": _preset_data(),
            "chosen": get_preset(form["preset"].value()),
        },
    )


@org_view(Perm.NODES_VIEW)
def node_detail(request, node_id: int):
    actor = request.actor
    node = _node(request, node_id)
    may_change = actor.can(Perm.NODES_MANAGE) and not node.is_shared
    form = NodeForm(request.POST or None, node=node) if may_change else None
    if request.method == "POST":
        if form is None:  # not may_change
            return _forbidden(request, _("Your role cannot change this node."))
        if form.is_valid():
            try:
                services.node_update(actor=actor, node_id=node.pk, **form.service_kwargs())
            except DomainError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, _("Node saved."))
                return redirect("inference_node:node_detail", node.pk)
    return render(
        request,
        "inference_node/node_detail.html",
        {
            "node": node,
            "form": form,
            "may_change": may_change,
            "missing": selectors.missing_models(node),
            "pool": selectors.key_pool(node),
            "key_form": CredentialForm() if may_change else None,
        },
    )


# (heading verb, button, what the node will be, the message once done): translated when shown.
_STATUS_VERBS: dict[str, tuple[Any, Any, Any, Any]] = {
    NodeStatus.DRAINING: (
        pgettext_lazy("node action", "Drain"),
        pgettext_lazy("node action", "Drain node"),
        pgettext_lazy("node", "drained: it finishes running calls and gets no new ones"),
        pgettext_lazy(
            "node", "Node '%(name)s' drained: it finishes running calls and gets no new ones."
        ),
    ),
    NodeStatus.ACTIVE: (
        pgettext_lazy("node action", "Enable"),
        pgettext_lazy("node action", "Enable node"),
        pgettext_lazy("node", "enabled: it gets calls again once healthy"),
        pgettext_lazy("node", "Node '%(name)s' enabled: it gets calls again once healthy."),
    ),
    NodeStatus.DISABLED: (
        pgettext_lazy("node action", "Disable"),
        pgettext_lazy("node action", "Disable node"),
        pgettext_lazy("node", "disabled: it gets no calls and is not probed"),
        pgettext_lazy("node", "Node '%(name)s' disabled: it gets no calls and is not probed."),
    ),
}


def _status_view(request, node_id: int, status: str):
    try:
        node = _node(request, node_id, for_change=True)
    except DomainPermissionDenied as exc:
        return _forbidden(request, exc.message)
    verb, button, outcome, done = _STATUS_VERBS[status]
    if request.method == "POST":
        try:
            services.node_set_status(actor=request.actor, node_id=node.pk, status=status)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, str(done) % {"name": node.name})
        if request.POST.get("next") == "list":
            return redirect("inference_node:nodes")
        return redirect("inference_node:node_detail", node.pk)
    return render(
        request,
        "inference_node/node_confirm.html",
        {"node": node, "verb": verb, "button": button, "outcome": outcome, "status": status},
    )


@org_view(Perm.NODES_MANAGE)
def node_drain(request, node_id: int):
    return _status_view(request, node_id, NodeStatus.DRAINING)


@org_view(Perm.NODES_MANAGE)
def node_enable(request, node_id: int):
    return _status_view(request, node_id, NodeStatus.ACTIVE)


@org_view(Perm.NODES_MANAGE)
def node_disable(request, node_id: int):
    return _status_view(request, node_id, NodeStatus.DISABLED)


@require_POST
@org_view(Perm.NODES_MANAGE)
def node_test(request, node_id: int):
    try:
        node = _node(request, node_id, for_change=True)
        outcome = services.node_test(actor=request.actor, node_id=node.pk)
    except DomainPermissionDenied as exc:
        return _forbidden(request, exc.message)
    context = {
        "node": outcome.node,
        "result": outcome.result,
        "change": outcome.change,
        "recorded": outcome.recorded,
    }
    template = (
        "inference_node/_node_test_result.html" if request.htmx else "inference_node/node_test.html"
    )
    return render(request, template, context)


# --- the key pool ---------------------------------------------------------------------


def _pool(request, node, *, key_form=None, notice: str = "", error: str = ""):
    """The key pool: the partial for htmx, else back to the node's page."""
    if not request.htmx:
        if notice:
            messages.success(request, notice)
        if error:
            messages.error(request, error)
        return redirect("inference_node:node_detail", node.pk)
    node = selectors.get_node(request.actor, node.pk)
    return render(
        request,
        "inference_node/_key_pool.html",
        {
            "node": node,
            "pool": selectors.key_pool(node),
            "may_change": True,
            "key_form": key_form or CredentialForm(),
            "notice": notice,
            "error": error,
        },
    )


def _credential(request, node_id: int, credential_id: int):
    try:
        return selectors.get_credential(request.actor, node_id, credential_id, for_change=True)
    except NotFound:
        raise Http404 from None


@org_view(Perm.NODES_MANAGE)
def credential_add(request, node_id: int):
    try:
        node = _node(request, node_id, for_change=True)
    except DomainPermissionDenied as exc:
        return _forbidden(request, exc.message)
    form = CredentialForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            key = services.credential_add(actor=request.actor, node_id=node.pk, **form.cleaned_data)
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            return _pool(
                request, node, notice=_("API key %(hint)s added.") % {"hint": key.secret_hint}
            )
    if request.htmx:
        return _pool(request, node, key_form=form)
    return render(
        request,
        "inference_node/credential_form.html",
        {"node": node, "form": form, "title": _("Add an API key")},
    )


@org_view(Perm.NODES_MANAGE)
def credential_edit(request, node_id: int, credential_id: int):
    try:
        key = _credential(request, node_id, credential_id)
    except DomainPermissionDenied as exc:
        return _forbidden(request, exc.message)
    initial = {f: getattr(key, f) for f in services.CREDENTIAL_FIELDS}
    form = CredentialForm(request.POST or None, initial=initial, with_secret=False)
    if request.method == "POST" and form.is_valid():
        try:
            services.credential_update(
                actor=request.actor, credential_id=key.pk, **form.cleaned_data
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("API key %(hint)s saved.") % {"hint": key.secret_hint})
            return redirect("inference_node:node_detail", key.node_id)
    return render(
        request,
        "inference_node/credential_form.html",
        {
            "node": key.node,
            "form": form,
            "key": key,
            "title": _("API key %(hint)s") % {"hint": key.secret_hint},
        },
    )


def _key_action(request, node_id: int, credential_id: int, act, done):
    """``done``: the message once done (lazy, with ``%(hint)s``)."""
    try:
        key = _credential(request, node_id, credential_id)
        act(actor=request.actor, credential_id=key.pk)
    except DomainPermissionDenied as exc:
        return _forbidden(request, exc.message)
    except DomainError as exc:
        return _pool(request, key.node, error=exc.message)
    return _pool(request, key.node, notice=str(done) % {"hint": key.secret_hint})


_KEY_DONE = {
    "disabled": pgettext_lazy("API key", "API key %(hint)s disabled."),
    "enabled": pgettext_lazy("API key", "API key %(hint)s enabled."),
    "removed": pgettext_lazy("API key", "API key %(hint)s removed."),
}


def _set_status(status):
    def act(*, actor, credential_id):
        services.credential_set_status(actor=actor, credential_id=credential_id, status=status)

    return act


@require_POST
@org_view(Perm.NODES_MANAGE)
def credential_disable(request, node_id: int, credential_id: int):
    return _key_action(
        request,
        node_id,
        credential_id,
        _set_status(CredentialStatus.DISABLED),
        _KEY_DONE["disabled"],
    )


@require_POST
@org_view(Perm.NODES_MANAGE)
def credential_enable(request, node_id: int, credential_id: int):
    return _key_action(
        request, node_id, credential_id, _set_status(CredentialStatus.ACTIVE), _KEY_DONE["enabled"]
    )


@require_POST
@org_view(Perm.NODES_MANAGE)
def credential_remove(request, node_id: int, credential_id: int):
    return _key_action(
        request, node_id, credential_id, services.credential_remove, _KEY_DONE["removed"]
    )
