"""Console pages of the usage app: per-call logs (with an htmx detail panel,
a live tail and CSV export) and the models & prices page."""

from __future__ import annotations

from django.http import Http404, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from accounts.facade import NotFound, Perm, org_view
from console.kernel.crypto import no_store
from console.kernel.db_router import on_replica, replica_reads
from console.kernel.money import exact_places
from usage import call_csv, catalog, logs
from usage.forms import CallFilterForm

_CALLS = (Perm.USAGE_VIEW_ALL, Perm.USAGE_VIEW_OWN)


def _form(request) -> CallFilterForm:
    return CallFilterForm(request.GET, actor=request.actor)


def _status_options():
    return [*logs.status_class_labels().items(), ("404", _("not found (404)"))]


def _cost_places(calls, default: int | None = None) -> int | None:
    """One number of decimals for every cost on a page (the most any of its
    costs needs to be exact), so the column lines up; ``default`` (the page's,
    for rows the live tail adds) when it is at least that."""
    needed = max((exact_places(c.cost, c.currency) for c in calls), default=None)
    if default is not None and (needed is None or needed <= default):
        return default
    return needed


def _render_logs(request, form: CallFilterForm, page: logs.CallPage | None):
    form.prepare_choices()
    params = form.filter_params()
    sort = params.get("sort") or logs.NEWEST_FIRST
    context = {
        "form": form,
        "page": page,
        "params": params,
        "sort": sort,
        "oldest_first": sort == logs.OLDEST_FIRST,
        "live": request.GET.get("live") == "1"
        and page is not None
        and page.newer is None
        and sort == logs.NEWEST_FIRST,
        "status_options": _status_options(),
        "cost_places": _cost_places(page.calls) if page else None,
    }
    return render(request, "usage/calls.html", context)


@require_GET
@org_view(*_CALLS, any_of=True)
@replica_reads
def call_list(request):
    """The logs page. Invalid filters are shown on the form, with no rows."""
    form = _form(request)
    page = None
    if form.is_valid():
        page = logs.call_page(
            actor=request.actor,
            filters=form.filters(),
            limit=form.page_size,
            before=form.cleaned_data["before_cursor"],
            after=form.cleaned_data["after_cursor"],
            sort=form.sort_order,
        )
    return _render_logs(request, form, page)


@require_GET
@org_view(*_CALLS, any_of=True)
@replica_reads
def call_tail(request):
    """Rows newer than ``after`` (the newest one shown), for the live tail."""
    form = _form(request)
    if not form.is_valid():
        return render(request, "usage/_call_rows.html", {"calls": []}, status=400)
    page = logs.call_tail(
        actor=request.actor, filters=form.filters(), after=form.cleaned_data["after_cursor"]
    )
    places = request.GET.get("places", "")
    shown = int(places) if places.isdigit() and int(places) <= 6 else None
    return render(
        request,
        "usage/_call_rows.html",
        {"calls": page.calls, "cost_places": _cost_places(page.calls, shown)},
    )


@require_GET
@org_view(*_CALLS, any_of=True)
@replica_reads
def call_detail(request, request_id: str):
    try:
        call = logs.call_get(actor=request.actor, request_id=request_id)
    except NotFound:
        raise Http404("No such call in this organization.") from None
    logs.resolve_names([call])
    template = "usage/_call_detail.html" if request.htmx else "usage/call_detail.html"
    return render(request, template, {"call": call})


@require_GET
@org_view(*_CALLS, any_of=True)
def call_export(request):
    """The filtered calls as CSV, streamed in keyset chunks."""
    form = _form(request)
    if not form.is_valid():
        return _render_logs(request, form, None)
    filters = form.filters()
    response = StreamingHttpResponse(
        on_replica(
            call_csv.csv_lines(
                actor=request.actor, filters=filters, tzinfo=form.tz, request=request
            )
        ),
        content_type="text/csv; charset=utf-8",
    )
    name = call_csv.csv_filename(
        org_slug=request.actor.organization.slug, filters=filters, now=timezone.now()
    )
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return no_store(response)


@require_GET
@org_view()
def model_list(request):
    actor = request.actor
    context = {
        "rows": catalog.model_price_list(actor=actor),
        "unknown_unpriced": catalog.unpriced_unknown_models(actor=actor),
        "show_needs_price": actor.can(Perm.ORG_MANAGE),
        "org": actor.organization,
    }
    return render(request, "usage/models.html", context)
