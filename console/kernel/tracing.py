"""W3C trace context (``traceparent``) and OpenTelemetry spans, both optional
to the reader and cheap on the hot path.

``Trace.incoming(value)`` continues the caller's trace when its
``traceparent`` header is well formed (version ``00``, a 32-hex trace id and
a 16-hex parent id, neither all zeros, lower-case, two hex flags) and starts a
new trace otherwise; either way this hop gets a span id of its own, and
``Trace.header`` is the ``traceparent`` it sends on (same trace id, this
hop's span id as the parent). Pure standard library: no OpenTelemetry needed
to propagate a trace or to put its id in a log line.

A new trace is marked sampled (flags ``01``), as OpenTelemetry's default
sampler would: a node that traces records it. An incoming trace's flags go on
unchanged.

``start_span`` opens an OpenTelemetry span through the API only. It does
nothing (and costs one ``isinstance``) unless an SDK tracer provider was set
(``console.kernel.observability`` sets one when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
configured and the SDK is installed; ``opentelemetry-instrument`` would too).
When it does open one, the span's own ids become the trace's, so what is sent
upstream names the span the exporter reports.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import secrets
from typing import Any

# The API is optional: without it, no spans (pip install .[otel]). Imported by name
# so that the type checker reads the same whether or not this environment has it.
otel_context: Any
otel_trace: Any
try:
    otel_context = importlib.import_module("opentelemetry.context")
    otel_trace = importlib.import_module("opentelemetry.trace")
except ImportError:  # pragma: no cover - depends on the environment
    otel_trace = None
    otel_context = None

_HEX = frozenset("0123456789abcdef")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def _hex(text: str, length: int) -> bool:
    return len(text) == length and _HEX.issuperset(text)


def parse_traceparent(value: str | None) -> tuple[str, str, str] | None:
    """(trace id, parent id, flags) of a valid version-00 ``traceparent``, or None."""
    if not value or len(value) > 128:
        return None
    parts = value.strip().split("-")
    if len(parts) != 4:
        return None
    version, trace_id, parent_id, flags = parts
    if version != "00" or not _hex(flags, 2):
        return None
    if not _hex(trace_id, 32) or trace_id == _ZERO_TRACE:
        return None
    if not _hex(parent_id, 16) or parent_id == _ZERO_SPAN:
        return None
    return trace_id, parent_id, flags


# Ids from a per-process generator seeded from the system's (reseeded in a
# forked child): random enough for trace ids, no system call per request.
_random = random.Random()  # noqa: S311 - identifiers, not secrets


def _reseed() -> None:
    _random.seed(secrets.randbits(128))


_reseed()
os.register_at_fork(after_in_child=_reseed)


def _new_span_id() -> str:
    return format(_random.getrandbits(64) or 1, "016x")


def _new_trace_id() -> str:
    return format(_random.getrandbits(128) or 1, "032x")


class Trace:
    """This hop of a trace: the trace id, the caller's span id (None: this hop
    started the trace), this hop's span id and the flags."""

    __slots__ = ("flags", "parent_id", "span_id", "trace_id")

    def __init__(self, trace_id: str, parent_id: str | None, span_id: str, flags: str):
        self.trace_id = trace_id
        self.parent_id = parent_id
        self.span_id = span_id
        self.flags = flags

    @classmethod
    def incoming(cls, traceparent: str | None) -> Trace:
        """The caller's trace continued, or a new one (a missing or malformed header)."""
        parsed = parse_traceparent(traceparent)
        if parsed is None:
            return cls(_new_trace_id(), None, _new_span_id(), "01")
        trace_id, parent_id, flags = parsed
        return cls(trace_id, parent_id, _new_span_id(), flags)

    @property
    def header(self) -> str:
        """The ``traceparent`` this hop sends on."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


_NO_SDK = (otel_trace.ProxyTracerProvider, otel_trace.NoOpTracerProvider) if otel_trace else ()


def otel_enabled() -> bool:
    """Whether a real (SDK) tracer provider is set: only then are spans made."""
    return otel_trace is not None and not isinstance(otel_trace.get_tracer_provider(), _NO_SDK)


def start_span(name: str, trace: Trace | None = None, attributes: dict | None = None):
    """An OpenTelemetry span named ``name`` (ended by the caller with
    ``span.end()``), child of ``trace``'s caller when it has one; None when no
    SDK is configured. With ``trace``, the span's ids replace the trace's."""
    if not otel_enabled():
        return None
    tracer = otel_trace.get_tracer("console")
    parent = None
    if trace is not None:
        if trace.parent_id is not None:
            remote = otel_trace.SpanContext(
                int(trace.trace_id, 16),
                int(trace.parent_id, 16),
                is_remote=True,
                trace_flags=otel_trace.TraceFlags(int(trace.flags, 16)),
            )
            parent = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(remote))
        else:
            parent = otel_context.Context()  # a root: not whatever span is current
    span = tracer.start_span(
        name,
        context=parent,
        kind=otel_trace.SpanKind.SERVER if trace is not None else otel_trace.SpanKind.INTERNAL,
        attributes=attributes,
    )
    if trace is not None:
        ctx = span.get_span_context()
        if ctx.is_valid:
            trace.trace_id = format(ctx.trace_id, "032x")
            trace.span_id = format(ctx.span_id, "016x")
            trace.flags = format(int(ctx.trace_flags), "02x")
    return span


@contextlib.contextmanager
def span(name: str, attributes: dict | None = None):
    """``with span(name, attributes) as s:`` an OpenTelemetry span around the
    block (``s`` is None without an SDK); an exception is recorded on it."""
    current = start_span(name, None, attributes)
    if current is None:
        yield None
        return
    with otel_trace.use_span(current, end_on_exit=True, record_exception=True):
        yield current
