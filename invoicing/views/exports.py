"""The finance CSV exports (``invoicing.exports``), one view per export,
filtered by period and status and streamed."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts.facade import org_view
from console.kernel.crypto import no_store
from console.kernel.db_router import on_replica
from invoicing import exports
from invoicing.forms.lists import (
    PeriodStatusForm,
)
from invoicing.services._common import org_zone
from invoicing.views._shared import (
    VIEW,
)


def export_view(name: str):
    export = exports.EXPORTS[name]

    @require_GET
    @org_view(VIEW)
    def view(request):
        actor = request.actor
        form = PeriodStatusForm(request.GET, statuses=export.statuses, label=export.status_label)
        if not form.is_valid():
            return render(
                request,
                "invoicing/export_error.html",
                {"form": form, "export": export},
                status=400,
            )
        filters = exports.ExportFilters(
            period=form.cleaned_data["period"] or None, status=form.cleaned_data["status"] or None
        )
        response = StreamingHttpResponse(
            on_replica(
                exports.csv_lines(
                    export=export,
                    actor=actor,
                    filters=filters,
                    tzinfo=org_zone(actor.organization.timezone),
                    request=request,
                )
            ),
            content_type="text/csv; charset=utf-8",
        )
        filename = exports.csv_filename(
            export=export, org_slug=actor.organization.slug, filters=filters
        )
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return no_store(response)

    view.__name__ = f"export_{name.replace('-', '_')}"
    return view
