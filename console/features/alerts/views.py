"""The alert pages: rules (list, new, edit, delete) and the alert history."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from accounts.facade import DomainError, NotFound, Perm, apply_errors, org_view
from console.features.alerts import display, services
from console.features.alerts.forms import AlertRuleForm

ALERTS = (Perm.BILLING_MANAGE, Perm.KEYS_MANAGE_OWN)


def _rule_or_404(request, rule_id):
    try:
        return services.rule_get(actor=request.actor, rule_id=rule_id)
    except NotFound:
        return None


def _not_found(request):
    return render(request, "404.html", status=404)


@org_view(*ALERTS, any_of=True)
def rules(request):
    actor = request.actor
    items = list(services.rule_list(actor=actor).select_related("organization"))
    open_counts: dict[int, int] = {}
    for incident in services.incident_list(actor=actor, open_only=True).only("rule_id"):
        open_counts[incident.rule_id] = open_counts.get(incident.rule_id, 0) + 1
    for rule in items:
        rule.summary = display.rule_summary(rule)
        rule.target = display.rule_target(rule)
        rule.open_count = open_counts.get(rule.pk, 0)
    return render(request, "alerts/rules.html", {"rules": items})


def _form_page(request, form, rule):
    """The rule form; an htmx request (the kind changed) gets the form alone,
    showing the fields of the chosen kind."""
    form.fields["kind"].widget.attrs.update(
        {
            "hx-get": request.path,
            "hx-trigger": "change",
            "hx-target": "#alert-rule-form",
            "hx-select": "#alert-rule-form",
            "hx-swap": "outerHTML",
            "hx-include": "closest form",
        }
    )
    template = "alerts/_rule_form.html" if request.htmx else "alerts/rule_form.html"
    return render(request, template, {"form": form, "rule": rule})


def _initial_from_query(request) -> dict | None:
    """What an htmx refresh sent (the form's current values), as initial values."""
    if not request.GET.get("kind"):
        return None
    return {k: v for k, v in request.GET.items() if k in AlertRuleForm.base_fields}


@org_view(*ALERTS, any_of=True)
def rule_new(request):
    actor = request.actor
    initial = _initial_from_query(request)
    form = AlertRuleForm(request.POST or None, actor=actor, initial=initial or {"enabled": True})
    if request.method == "POST" and form.is_valid():
        try:
            services.rule_create(actor=actor, data=form.cleaned_data)
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("Alert rule created."))
            return redirect("alerts:rules")
    return _form_page(request, form, None)


@org_view(*ALERTS, any_of=True)
def rule_edit(request, rule_id):
    actor = request.actor
    rule = _rule_or_404(request, rule_id)
    if rule is None:
        return _not_found(request)
    initial = _initial_from_query(request)
    if initial is not None:
        form = AlertRuleForm(actor=actor, rule=rule, initial=initial)
    else:
        form = AlertRuleForm(request.POST or None, actor=actor, rule=rule)
    if request.method == "POST" and form.is_valid():
        try:
            services.rule_update(actor=actor, rule=rule, data=form.cleaned_data)
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, _("Alert rule saved."))
            return redirect("alerts:rules")
    return _form_page(request, form, rule)


@org_view(*ALERTS, any_of=True)
def rule_delete(request, rule_id):
    rule = _rule_or_404(request, rule_id)
    if rule is None:
        return _not_found(request)
    if request.method == "POST":
        services.rule_delete(actor=request.actor, rule=rule)
        messages.success(request, _("Alert rule deleted."))
        return redirect("alerts:rules")
    return render(request, "alerts/rule_delete.html", {"rule": rule})


@org_view(*ALERTS, any_of=True)
def history(request):
    actor = request.actor
    state = request.GET.get("state", "")
    open_only = {"open": True, "resolved": False}.get(state)
    qs = services.incident_list(actor=actor, open_only=open_only)
    rule_id = request.GET.get("rule", "")
    if rule_id.isdigit():
        qs = qs.filter(rule_id=int(rule_id))
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    incidents = display.decorate(page.object_list, actor.organization.currency)
    query = {k: v for k, v in (("state", state), ("rule", rule_id)) if v}
    return render(
        request,
        "alerts/history.html",
        {"page": page, "incidents": incidents, "state": state, "pager_query": urlencode(query)},
    )
