"""Capacity planning pages: the list with the start form, a test's page with
its progress (htmx polling while it runs), cancel button, chart and table."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounts.facade import DomainError, NotFound, Perm, apply_errors, org_view
from console.features.capacity import services
from console.features.capacity.chart import qps_p99_figure
from console.features.capacity.forms import LoadTestForm
from console.features.capacity.knee import P99_RISE, QPS_GROWTH
from console.kernel.money import format_amount


def _exact(micro: int, currency: str) -> str:
    return format_amount(micro, currency, exact=True)


def _get(request, load_test_id: int):
    try:
        return services.get_load_test(request.actor, load_test_id)
    except NotFound:
        raise Http404 from None


def _start(request, form: LoadTestForm):
    data = form.cleaned_data
    try:
        test = services.load_test_start(
            actor=request.actor,
            model=data["model"],
            input_tokens=data["input_tokens"],
            output_tokens=data["output_tokens"],
            prefix_share=data["prefix_share"],
            steps=data["steps"],
            step_seconds=data["step_seconds"],
            budget=data["budget"],
            billing=data["billing"],
            node=data.get("node"),
        )
    except DomainError as exc:
        apply_errors(form, exc)
        return None
    return test


@require_http_methods(["GET", "POST"])
@org_view(Perm.USAGE_VIEW_ALL)
def load_test_list(request):
    may_run = request.actor.can(Perm.ORG_MANAGE)
    currency = request.actor.organization.currency
    nodes = services.pinnable_nodes(request.actor) if services.is_staff(request.actor) else None
    form = LoadTestForm(request.POST or None, currency=currency, nodes=nodes) if may_run else None
    if request.method == "POST":
        if form is None:  # not may_run
            return render(request, "403.html", status=403)
        if form.is_valid():
            test = _start(request, form)
            if test is not None:
                return redirect("capacity:detail", load_test_id=test.pk)
    tests = services.load_tests(request.actor)[:50]
    return render(request, "capacity/list.html", {"form": form, "tests": tests})


def _detail_context(request, test):
    steps = list(test.results.all())
    cost = services.load_test_cost(test)
    return {
        "test": test,
        # To the micro-unit, as the call log shows each call: a short test
        # often costs less than a cent.
        "cost": _exact(cost[0], request.actor.organization.currency) if cost else None,
        "logged_calls": cost[1] if cost else None,
        "steps": steps,
        "figure_json": qps_p99_figure(steps, test.knee_step),
        "knee": next((s for s in steps if s.index == test.knee_step), None),
        "p99_rise": int(P99_RISE * 100),
        "qps_growth": int(QPS_GROWTH * 100),
        "may_cancel": (
            request.actor.can(Perm.ORG_MANAGE) and test.active and not test.cancel_requested
        ),
        "progress_url": reverse("capacity:progress", args=[test.pk]),
    }


@require_http_methods(["GET"])
@org_view(Perm.USAGE_VIEW_ALL)
def load_test_detail(request, load_test_id: int):
    test = _get(request, load_test_id)
    return render(request, "capacity/detail.html", _detail_context(request, test))


@require_http_methods(["GET"])
@org_view(Perm.USAGE_VIEW_ALL)
def load_test_progress(request, load_test_id: int):
    """The progress block; once the run has ended, htmx swaps in the whole result."""
    test = _get(request, load_test_id)
    return render(request, "capacity/_progress.html", _detail_context(request, test))


@require_POST
@org_view(Perm.ORG_MANAGE)
def load_test_cancel(request, load_test_id: int):
    test = _get(request, load_test_id)
    try:
        test = services.load_test_cancel(actor=request.actor, load_test_id=test.pk)
    except DomainError:
        test = _get(request, load_test_id)  # it ended meanwhile: show how
    if request.htmx:
        return render(request, "capacity/_progress.html", _detail_context(request, test))
    return redirect("capacity:detail", load_test_id=test.pk)
