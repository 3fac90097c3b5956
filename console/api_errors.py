"""One error shape for the REST API: ``{"error": {"code", "message", "fields"?}}``."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from accounts.facade import DomainError

logger = logging.getLogger(__name__)


def error_body(code: str, message: str, fields: dict | None = None) -> dict:
    body: dict = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return {"error": body}


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response(
            error_body(exc.code, exc.message, exc.fields or None), status=exc.http_status
        )
    if isinstance(exc, DjangoValidationError):
        fields = exc.message_dict if hasattr(exc, "error_dict") else None
        message = "; ".join(exc.messages)
        return Response(error_body("invalid", message, fields), status=400)
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "Not found."), status=404)
    if isinstance(exc, DjangoPermissionDenied):
        return Response(error_body("permission_denied", str(exc) or "Forbidden."), status=403)
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.exception("unhandled API error", exc_info=exc)
        return Response(
            error_body("server_error", "An internal error occurred; it has been logged."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    if isinstance(exc, exceptions.ValidationError):
        detail = response.data
        fields = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        first = _first_message(fields)
        response.data = error_body("invalid", first or "Invalid input.", fields)
    else:
        code = getattr(exc, "default_code", "error")
        codes = exc.get_codes() if isinstance(exc, exceptions.APIException) else code
        if isinstance(codes, str):
            code = codes
        response.data = error_body(code, _first_message(response.data) or str(exc))
    return response


def _first_message(data) -> str:
    if isinstance(data, dict):
        for key, value in data.items():
            msg = _first_message(value)
            if msg:
                return msg if key in ("detail", "non_field_errors") else f"{key}: {msg}"
        return ""
    if isinstance(data, list):
        return _first_message(data[0]) if data else ""
    return str(data)


def page_not_found(request, exception=None):
    """The 404 handler: a path under ``/api/v1/`` that no route matches (an id
    that is not a number, an unknown collection) answers in the API's error
    shape; every other path gets the console's 404 page."""
    if request.path.startswith("/api/v1/"):
        return JsonResponse(error_body("not_found", "No such API endpoint."), status=404)
    return defaults.page_not_found(request, exception)


# The REST API's list parameters, each documented as an exploded array (the
# call logs' ``tag=key:value``, repeated for calls carrying every tag).
LIST_PARAMETERS = frozenset({"tag"})


class SingleQueryParameterMiddleware:
    """No other REST API parameter is a list (``LIST_PARAMETERS``), so a query
    parameter given twice (``?status=a&status=b``) is a 400 naming it, not
    silently the last one."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/v1/"):
            repeated = {
                name: ["Give this parameter once."]
                for name, values in request.GET.lists()
                if len(values) > 1 and name not in LIST_PARAMETERS
            }
            if repeated:
                name = next(iter(repeated))
                return JsonResponse(
                    error_body("invalid", f"{name}: Give this parameter once.", repeated),
                    status=400,
                )
        return self.get_response(request)
