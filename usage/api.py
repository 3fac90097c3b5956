"""REST API for call logs (``/api/v1/calls/``).

The query string is parsed by the console's filter form, so the API accepts
exactly the filters the page does; an invalid one is a 400 naming the field.
Pages are keyset cursors (``before``/``after`` tokens in ``next`` and
``previous``); there is never a COUNT. The CSV export streams."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, renderers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.facade import Actor, IsOrgMember, Perm, ValidationFailed
from console.kernel.crypto import no_store
from console.kernel.db_router import on_replica, replica_reads
from usage import call_csv, logs
from usage.attribution import BY_END_USER, BY_TAG, attribution
from usage.forms import MAX_LATENCY_MS, AttributionQueryForm, CallFilterForm
from usage.serializers import AttributionSerializer, CallPageSerializer, CallRecordSerializer

# Each parameter's schema states what the filter form accepts (usage.forms).
_ID = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
_NO_NUL = r"^[^\u0000]*$"
FILTER_PARAMETERS = [
    OpenApiParameter("from", OpenApiTypes.DATETIME, description="Calls started at or after"),
    OpenApiParameter("to", OpenApiTypes.DATETIME, description="Calls started before"),
    OpenApiParameter("range", str, enum=["1h", "24h", "7d", "30d"], description="Quick range"),
    OpenApiParameter("key", _ID, description="API key id"),
    OpenApiParameter("sub_account", _ID, description="Sub-account id"),
    # No NUL character: the form refuses one in any text (Django's rule for every field).
    OpenApiParameter(
        "model", {"type": "string", "maxLength": 128, "pattern": _NO_NUL}, description="Model name"
    ),
    OpenApiParameter("node", _ID, description="Inference node id"),
    OpenApiParameter(
        "status",
        {"type": "string", "pattern": r"^(ok|errors|4xx|5xx|[1-5][0-9]{2})$"},
        description="ok, errors, 4xx, 429, 5xx or a code",
    ),
    OpenApiParameter(
        "min_latency_ms",
        {"type": "integer", "minimum": 0, "maximum": MAX_LATENCY_MS},
        description="Latency at least this",
    ),
    OpenApiParameter(
        "request_id",
        {"type": "string", "pattern": r"^[A-Za-z0-9._:\-]{1,64}$"},
        description="One request id",
    ),
    OpenApiParameter(
        "tag",
        {
            "type": "array",
            "maxItems": 10,
            # "" (an empty box of the console's form) is no filter.
            "items": {"type": "string", "pattern": r"^([A-Za-z0-9_.\-]{1,32}:[^\u0000]{1,128})?$"},
        },
        explode=True,
        description="key:value; calls carrying this tag. Repeat for calls carrying all of them",
    ),
    OpenApiParameter(
        "end_user",
        {"type": "string", "maxLength": 128, "pattern": _NO_NUL},
        description="Calls for this end user",
    ),
]
_CURSOR = {"type": "string", "maxLength": 400}
PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": logs.MAX_LIMIT},
        description=f"Page size, 1 to {logs.MAX_LIMIT}",
    ),
    OpenApiParameter(
        "sort",
        str,
        enum=list(logs.SORTS),
        description="-time (newest first, the default) or time (oldest first)",
    ),
    OpenApiParameter("before", _CURSOR, description="Cursor: calls older than (from `next`)"),
    OpenApiParameter("after", _CURSOR, description="Cursor: calls newer than (from `previous`)"),
]


class CSVRenderer(renderers.BaseRenderer):
    """Lets ``?format=csv`` and ``Accept: text/csv`` choose the export."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> Any:
        return data


class CallApiView(APIView):
    permission_classes = (permissions.IsAuthenticated, IsOrgMember)

    @property
    def actor(self) -> Actor:
        actor: Actor = self.request._request.actor
        return actor

    def filter_form(self) -> CallFilterForm:
        form = CallFilterForm(self.request.query_params, actor=self.actor)
        if not form.is_valid():
            raise ValidationFailed.from_fields(form.error_fields())
        return form

    def export(self, form: CallFilterForm) -> StreamingHttpResponse:
        filters = form.filters()
        response = StreamingHttpResponse(
            on_replica(call_csv.csv_lines(actor=self.actor, filters=filters, tzinfo=form.tz)),
            content_type="text/csv; charset=utf-8",
        )
        name = call_csv.csv_filename(
            org_slug=self.actor.organization.slug, filters=filters, now=timezone.now()
        )
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return no_store(response)

    def handle_exception(self, exc: Exception) -> Response:
        # Errors are JSON even when the CSV was asked for.
        self.request.accepted_renderer = renderers.JSONRenderer()
        self.request.accepted_media_type = "application/json"
        response: Response = super().handle_exception(exc)
        return response


class CallListView(CallApiView):
    renderer_classes = (renderers.JSONRenderer, CSVRenderer)

    @extend_schema(
        operation_id="calls_list",
        parameters=FILTER_PARAMETERS + PAGE_PARAMETERS,
        responses=CallPageSerializer,
    )
    @replica_reads
    def get(self, request: Request) -> Response | StreamingHttpResponse:
        form = self.filter_form()
        if request.accepted_renderer.format == "csv":
            return self.export(form)
        page = logs.call_page(
            actor=self.actor,
            filters=form.filters(),
            limit=form.page_size,
            before=form.cleaned_data["before_cursor"],
            after=form.cleaned_data["after_cursor"],
            sort=form.sort_order,
        )
        params = form.filter_params()

        def link(**cursor: str) -> str:
            query = urlencode({**params, **cursor}, doseq=True)
            uri: str = request.build_absolute_uri(f"{request.path}?{query}")
            return uri

        older = link(before=page.older) if page.older else None
        newer = link(after=page.newer) if page.newer else None
        if form.sort_order == logs.OLDEST_FIRST:  # ``sort=time``: next is newer
            older, newer = newer, older
        return Response(
            {
                "next": older,
                "previous": newer,
                "results": CallRecordSerializer(page.calls, many=True).data,
            }
        )


class CallExportView(CallApiView):
    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # The answer is CSV whatever Accept says; errors fall back to JSON.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="calls_export",
        parameters=FILTER_PARAMETERS,
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        return self.export(self.filter_form())


class CallDetailView(CallApiView):
    @extend_schema(responses=CallRecordSerializer)
    @replica_reads
    def get(self, request: Request, request_id: str) -> Response:
        call = logs.call_get(actor=self.actor, request_id=request_id)
        logs.resolve_names([call])
        return Response(CallRecordSerializer(call).data)


class SpendAttributionView(CallApiView):
    """Spend grouped by a tag's value (``by=tag&tag_key=team``) or by end
    user (``by=end_user``) over ``from``..``to``: the groups (biggest first,
    the calls without the tag or an end user last, ``value`` null) sum to
    ``total`` to the micro-unit. A developer sees their own keys' calls."""

    @extend_schema(
        operation_id="spend_attribution",
        parameters=[
            OpenApiParameter(
                "from", OpenApiTypes.DATETIME, description="Start (default: 30 days before to)"
            ),
            OpenApiParameter("to", OpenApiTypes.DATETIME, description="End (default: now)"),
            OpenApiParameter(
                "by", str, enum=["tag", "end_user"], description="What groups (default end_user)"
            ),
            OpenApiParameter(
                "tag_key",
                {"type": "string", "pattern": r"^[A-Za-z0-9_.\-]{1,32}$"},
                description="The tag whose values group the spend (with by=tag)",
            ),
            OpenApiParameter("key", _ID, description="Only this API key's calls"),
        ],
        responses=AttributionSerializer,
    )
    @replica_reads
    def get(self, request: Request) -> Response:
        form = AttributionQueryForm(request.query_params, actor=self.actor)
        if not form.is_valid():
            raise ValidationFailed.from_fields(form.error_fields())
        d = form.cleaned_data
        where: dict[str, Any] = {}
        if d.get("key"):
            where["api_key_id"] = d["key"].pk
        elif not self.actor.can(Perm.USAGE_VIEW_ALL):
            where["api_key_id"] = list(
                logs.visible_keys(actor=self.actor).values_list("pk", flat=True)
            )
        logs.call_scope(actor=self.actor)  # refuses a role that sees no usage
        result = attribution(
            organization_id=self.actor.organization_id,
            start=d["from"],
            end=d["to"],
            by=BY_TAG if d["by"] == "tag" else BY_END_USER,
            tag_key=d.get("tag_key") or "",
            where=where,
        )
        return Response(
            AttributionSerializer(
                {
                    "by": d["by"],
                    "tag_key": result.tag_key,
                    "start": d["from"],
                    "end": d["to"],
                    "currency": self.actor.organization.currency,
                    "total": result.total,
                    "groups": result.groups,
                }
            ).data
        )
