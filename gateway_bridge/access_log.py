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

``start`` (the ASGI lifespan) picks how the lines are written. With logging
as the settings configure it (one stream handler, ``LOG_FORMAT`` plain or
json), the line is formatted here without a record, by that formatter's
``line`` (the same line its ``format`` writes), and handed to a
``console.kernel.logs.LineSink`` that writes the lines of the last 50 ms at
once; handlers attached to the logger itself still get each
record. With any other logging set-up the records go through logging,
written off the event loop (``offload``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from console.kernel.logs import LineSink, line_sink, offload
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


_sink: LineSink | None = None
_users = 0
_lock = threading.Lock()


def start() -> Callable[[], None]:
    """Begin writing this process's access lines; returns ``stop``, which
    writes what is pending. Gateways in one process share one writer (the
    last ``stop`` ends it)."""
    global _sink, _users
    with _lock:
        if _users == 0:
            _sink = line_sink(logger.name)
        _users += 1
        sink = _sink
    if sink is None:
        stop_offload = offload(logger.name)
    else:
        logger.propagate = False  # the sink writes what propagation would have
    stopped = False

    def stop() -> None:
        global _sink, _users
        nonlocal stopped
        if sink is None:
            stop_offload()
        with _lock:
            if stopped:
                return
            stopped = True
            _users -= 1
            if _users or sink is None:
                return
            _sink = None
            logger.propagate = True
        sink.stop()

    return stop


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def finish(call: Call, elapsed: float, overhead: float) -> None:
    """The call is over: end its span, write its access line."""
    auth = call.entry.auth if call.entry is not None else None
    if call.span is not None:
        _end_span(call, auth)
    if not logger.isEnabledFor(_INFO):
        return
    extra = fields(call, auth, elapsed, overhead)
    sink = _sink
    if sink is not None:
        message = f"{call.protocol} {call.endpoint} {call.status}"
        sink.write(sink.formatter.line(time.time(), "INFO", logger.name, message, extra))
        if not logger.handlers:
            return
    logger.info("%s %s %s", call.protocol, call.endpoint, call.status, extra=extra)


def fields(
    call: Call, auth: AuthenticatedKey | None, elapsed: float, overhead: float
) -> dict[str, object]:
    """The access line's fields (the record's ``extra``)."""
    usage = call.usage
    return {
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
    }


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
