"""One access-log line per console or API request (logger ``console.access``).

The request id is the client's ``X-Request-Id`` when it is sane (1 to 128
letters, digits and ``._:=+-``), else a new ``req_…``; it is set on the
request (``request.request_id``) and sent back in ``X-Request-Id``. A valid
W3C ``traceparent`` is continued (``request.trace``, see ``console.kernel.tracing``),
so the line's ``trace_id`` joins the caller's trace.

The line: ``request_id``, ``trace_id``, ``method``, ``path`` (no query
string), ``status``, ``duration_ms``, ``organization_id`` (the organization
the request acted in, when there is one) and ``user_id``. Never a header, a
cookie or a body; the path is masked (``console.kernel.redact``: an invitation
link's token).
"""

from __future__ import annotations

import logging
import re
import secrets
import time

from console.kernel.redact import redact
from console.kernel.tracing import Trace

logger = logging.getLogger("console.access")

_IN_MESSAGE = ("method", "path", "status")  # the plain format does not repeat them
_SANE_ID = re.compile(r"[A-Za-z0-9._:=+\-]{1,128}")


def request_id_from(value: str | None) -> str:
    """The client's request id when it is sane, else a new one."""
    if value and _SANE_ID.fullmatch(value):
        return value
    return f"req_{secrets.token_hex(12)}"


def _who(request) -> tuple[int | None, int | None]:
    """(organization id, user id) of the request, as far as they are known."""
    actor = getattr(request, "actor", None)
    org_id = actor.organization_id if actor is not None else None
    user = getattr(request, "user", None)
    user_id = user.pk if user is not None and user.is_authenticated else None
    return org_id, user_id


class RequestLogMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        t0 = time.perf_counter()
        meta = request.META
        request.request_id = request_id_from(meta.get("HTTP_X_REQUEST_ID"))
        request.trace = Trace.incoming(meta.get("HTTP_TRACEPARENT"))
        response = self.get_response(request)
        response["X-Request-Id"] = request.request_id
        if logger.isEnabledFor(logging.INFO):
            org_id, user_id = _who(request)
            duration_ms = round((time.perf_counter() - t0) * 1000, 2)
            path = redact(request.path)  # an invitation link's token, on the record too
            logger.info(
                "%s %s %s",
                request.method,
                path,
                response.status_code,
                extra={
                    "request_id": request.request_id,
                    "trace_id": request.trace.trace_id,
                    "method": request.method,
                    "path": path,
                    "status": response.status_code,
                    "duration_ms": duration_ms,
                    "organization_id": org_id,
                    "user_id": user_id,
                    "_in_message": _IN_MESSAGE,
                },
            )
        return response
