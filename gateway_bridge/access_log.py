"""One access-log line per gateway call (logger ``gateway_bridge.access``),
and the end of the call's OpenTelemetry span.

``finish`` runs once per call, when it is over (``Gateway._finish``, beside
the metrics and the usage event). The line's fields:

    request_id, trace_id, organization_id, key (the key's public prefix,
    ``sk-<id>``: never the secret), model, protocol, endpoint, status,
    error (the error code, "" when none), stream, node, cache,
    prompt_tokens (cached or not), output_tokens, latency_ms, ttft_ms,
    upstream_ms, queue_ms, overhead_ms

A call refused before its key was known (401) has no organization or key.
Nothing of the request's headers or body is logged. The dict is built only
when the logger is enabled for INFO (``ACCESS_LOG=false`` turns it off).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway_bridge.pipeline.call import Call

if TYPE_CHECKING:
    from accounts.facade import AuthenticatedKey

logger = logging.getLogger("gateway_bridge.access")
_INFO = logging.INFO
_IN_MESSAGE = ("protocol", "endpoint", "status")  # the plain format does not repeat them

try:
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - spans need the API (start_span makes none then)
    Status = StatusCode = None  # type: ignore[assignment,misc]  # optional dependency


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def finish(call: Call, elapsed: float, overhead: float) -> None:
    """The call is over: end its span, write its access line."""
    auth = call.entry.auth if call.entry is not None else None
    if call.span is not None:
        _end_span(call, auth)
    if not logger.isEnabledFor(_INFO):
        return
    usage = call.usage
    logger.info(
        "%s %s %s",
        call.protocol,
        call.endpoint,
        call.status,
        extra={
            "request_id": call.request_id,
            "trace_id": call.trace.trace_id,
            "organization_id": auth.organization_id if auth is not None else None,
            "key": f"sk-{auth.public_id}" if auth is not None else None,
            "model": call.model,
            "protocol": call.protocol,
            "endpoint": call.endpoint,
            "status": call.status,
            "error": call.error_type if call.status >= 400 else "",
            "stream": call.stream,
            "node": call.node_name,
            "cache": call.cache_status,
            "prompt_tokens": usage.input + usage.cache_read + usage.cache_write,
            "output_tokens": usage.output,
            "latency_ms": _ms(elapsed),
            "ttft_ms": _ms(call.ttft),
            "upstream_ms": _ms(call.upstream_s),
            "queue_ms": _ms(call.queue_s),
            "overhead_ms": _ms(overhead),
            "_in_message": _IN_MESSAGE,
        },
    )


def _end_span(call: Call, auth: AuthenticatedKey | None) -> None:
    span = call.span
    span.set_attribute("gateway.request_id", call.request_id)
    span.set_attribute("gateway.protocol", call.protocol)
    span.set_attribute("gateway.endpoint", call.endpoint)
    span.set_attribute("gateway.model", call.model or "(unknown)")
    span.set_attribute("gateway.stream", call.stream)
    span.set_attribute("http.response.status_code", call.status)
    if auth is not None:
        span.set_attribute("gateway.organization_id", auth.organization_id)
    if call.node_name:
        span.set_attribute("gateway.node", call.node_name)
    if call.status >= 400:
        span.set_attribute("error.type", call.error_type or str(call.status))
        if call.status >= 500 and Status is not None:
            span.set_status(Status(StatusCode.ERROR, call.error_type or None))
    span.end()
