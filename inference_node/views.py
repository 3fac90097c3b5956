"""Console pages of the node registry. Owners and admins manage the org's own
nodes; viewers read; shared platform nodes are shown read-only, without their
address or token. Each view parses input, calls one service or selector, and
renders the page (or, for htmx, just the partial)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
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
from inference_node.forms import NodeForm
from inference_node.models import NodeStatus


def _forbidden(request, reason: str):
    return render(request, "403.html", {"reason": reason}, status=403)


def _node(request, node_id: int, *, for_change: bool = False):
    """The node, or an exception the caller turns into 404 / 403."""
    try:
        return selectors.get_node(request.actor, node_id, for_change=for_change)
    except NotFound:
        raise Http404 from None


def _rows(nodes):
    return [(node, selectors.missing_models(node)) for node in nodes]


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
            messages.success(request, f"Node '{node.name}' added; it is probed within seconds.")
            return redirect("inference_node:node_detail", node.pk)
    return render(request, "inference_node/node_form.html", {"form": form})


@org_view(Perm.NODES_VIEW)
def node_detail(request, node_id: int):
    actor = request.actor
    node = _node(request, node_id)
    may_change = actor.can(Perm.NODES_MANAGE) and not node.is_shared
    form = NodeForm(request.POST or None, node=node) if may_change else None
    if request.method == "POST":
        if not may_change:
            return _forbidden(request, "Your role cannot change this node.")
        if form.is_valid():
            try:
                services.node_update(actor=actor, node_id=node.pk, **form.service_kwargs())
            except DomainError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, "Node saved.")
                return redirect("inference_node:node_detail", node.pk)
    return render(
        request,
        "inference_node/node_detail.html",
        {
            "node": node,
            "form": form,
            "may_change": may_change,
            "missing": selectors.missing_models(node),
        },
    )


_STATUS_VERBS = {
    NodeStatus.DRAINING: ("Drain", "drained: it finishes running calls and gets no new ones"),
    NodeStatus.ACTIVE: ("Enable", "enabled: it gets calls again once healthy"),
    NodeStatus.DISABLED: ("Disable", "disabled: it gets no calls and is not probed"),
}


def _status_view(request, node_id: int, status: str):
    try:
        node = _node(request, node_id, for_change=True)
    except DomainPermissionDenied as exc:
        return _forbidden(request, exc.message)
    verb, outcome = _STATUS_VERBS[status]
    if request.method == "POST":
        try:
            services.node_set_status(actor=request.actor, node_id=node.pk, status=status)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Node '{node.name}' {outcome}.")
        if request.POST.get("next") == "list":
            return redirect("inference_node:nodes")
        return redirect("inference_node:node_detail", node.pk)
    return render(
        request,
        "inference_node/node_confirm.html",
        {"node": node, "verb": verb, "outcome": outcome, "status": status},
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
    context = {"node": outcome.node, "result": outcome.result, "change": outcome.change}
    template = (
        "inference_node/_node_test_result.html" if request.htmx else "inference_node/node_test.html"
    )
    return render(request, template, context)
