"""Console pages of the usage app: per-call logs (with an htmx detail panel,
a live tail and CSV export) and the models & prices page."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
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
from usage.models import CallRecord

_CALLS = (Perm.USAGE_VIEW_ALL, Perm.USAGE_VIEW_OWN)
_View = Callable[..., HttpResponse]


def _page(*perms: Perm, any_of: bool = False) -> Callable[[_View], _View]:
    """A console page of this app: GET only, for a member of an organization
    holding ``perms`` (all of them, or one with ``any_of``; ``org_view``)."""

    def wrap(view: _View) -> _View:
        page: _View = require_GET(org_view(*perms, any_of=any_of)(view))
        return page

    return wrap


def _form(request: HttpRequest) -> CallFilterForm:
    return CallFilterForm(request.GET, actor=request.actor)


def _status_options() -> list[tuple[str, str]]:
    return [*logs.status_class_labels().items(), ("404", _("not found (404)"))]


def _cost_places(calls: Iterable[CallRecord], default: int | None = None) -> int | None:
    """One number of decimals for every cost on a page (the most any of its
    costs needs to be exact), so the column lines up; ``default`` (the page's,
    for rows the live tail adds) when it is at least that."""
    needed = max((exact_places(c.cost, c.currency) for c in calls), default=None)
    if default is not None and (needed is None or needed <= default):
        return default
    return needed


def _render_logs(
    request: HttpRequest, form: CallFilterForm, page: logs.CallPage | None
) -> HttpResponse:
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


@_page(*_CALLS, any_of=True)
@replica_reads
def call_list(request: HttpRequest) -> HttpResponse:
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


@_page(*_CALLS, any_of=True)
@replica_reads
def call_tail(request: HttpRequest) -> HttpResponse:
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


@_page(*_CALLS, any_of=True)
@replica_reads
def call_detail(request: HttpRequest, request_id: str) -> HttpResponse:
    try:
        call = logs.call_get(actor=request.actor, request_id=request_id)
    except NotFound:
        raise Http404("No such call in this organization.") from None
    logs.resolve_names([call])
    template = "usage/_call_detail.html" if request.htmx else "usage/call_detail.html"
    return render(request, template, {"call": call})


@_page(*_CALLS, any_of=True)
def call_export(request: HttpRequest) -> HttpResponse:
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


@_page()
def model_list(request: HttpRequest) -> HttpResponse:
    actor = request.actor
    context = {
        "rows": catalog.model_price_list(actor=actor),
        "unknown_unpriced": catalog.unpriced_unknown_models(actor=actor),
        "show_needs_price": actor.can(Perm.ORG_MANAGE),
        "org": actor.organization,
    }
    return render(request, "usage/models.html", context)
