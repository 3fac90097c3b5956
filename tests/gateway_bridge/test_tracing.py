"""Observability of a gateway call (issue 20): one JSON access line per call
with its fields and no secret; the caller's W3C ``traceparent`` continued to
the node or vendor channel (a new trace when it is missing or malformed); an
OpenTelemetry span for the call and for its ingest when an SDK is set."""

from __future__ import annotations

import http.client
import json
import logging
import time

import pytest
from opentelemetry import trace as otel_trace

from console.kernel import tracing
from console.kernel.logs import JsonFormatter
from tests.gateway_bridge.conftest import NODE_TOKEN
from tests.gateway_bridge.vendor_fixtures import captured, channel, post
from usage.tasks import ingest_batch

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
CHAT = {
    "model": "sim-chat-small",
    "messages": [{"role": "user", "content": "Hello there"}],
    "max_tokens": 5,
}
FIELDS = {
    "ts", "level", "logger", "message", "request_id", "trace_id", "organization_id", "key",
    "model", "protocol", "endpoint", "status", "error", "stream", "node", "cache",
    "prompt_tokens", "output_tokens", "latency_ms", "ttft_ms", "upstream_ms", "queue_ms",
    "overhead_ms",
}  # fmt: skip


class Lines(logging.Handler):
    """The access lines, formatted as LOG_FORMAT=json writes them."""

    def __init__(self):
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))

    def wait_for(self, count: int, timeout: float = 5.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.lines) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return [json.loads(line) for line in self.lines]


@pytest.fixture
def access():
    logger = logging.getLogger("gateway_bridge.access")
    handler = Lines()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def call(gw, path, body, headers):
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def headers(raw, **extra):
    return {"Authorization": f"Bearer {raw}", "Content-Type": "application/json", **extra}


def sent_upstream(base_url: str, token: str, request_id: str) -> dict:
    """The headers of the request the gateway sent for ``request_id``."""
    status, body = post(
        base_url, "/admin/requests", None, {"Authorization": f"Bearer {token}"}, method="GET"
    )
    assert status == 200
    for entry in reversed(json.loads(body)["requests"]):
        if entry["headers"].get("x-request-id") == request_id:
            return entry["headers"]
    raise AssertionError(f"the node saw no request {request_id}")


def test_a_call_writes_one_json_access_line_and_continues_the_trace(gw, tenant, access):
    status, resp_headers, _ = call(
        gw, "/v1/chat/completions", CHAT, headers(tenant.raw, traceparent=TRACEPARENT)
    )
    assert status == 200
    request_id = resp_headers["x-request-id"]
    gw.emitter.wait_for(1)
    [line] = access.wait_for(1)
    time.sleep(0.05)
    assert len(access.lines) == 1  # exactly one line per call
    assert set(line) >= FIELDS
    assert line["logger"] == "gateway_bridge.access" and line["level"] == "INFO"
    assert line["request_id"] == request_id
    assert line["trace_id"] == TRACE_ID
    assert line["organization_id"] == tenant.org.id
    assert line["key"] == f"sk-{tenant.key.public_id}"
    assert line["model"] == "sim-chat-small"
    assert (line["protocol"], line["endpoint"]) == ("openai", "chat.completions")
    assert (line["status"], line["error"], line["stream"]) == (200, "", False)
    assert line["node"] == "sim-a"
    assert line["output_tokens"] > 0
    assert line["latency_ms"] >= line["upstream_ms"] > 0
    assert line["overhead_ms"] >= 0
    # Never the secret, in any form.
    secret = tenant.raw.split("_", 1)[1]
    assert secret not in access.lines[0] and tenant.raw not in access.lines[0]
    assert "authorization" not in access.lines[0].lower()

    # The node got the same trace, with the gateway's hop as the parent.
    sent = sent_upstream(tenant.node.base_url, NODE_TOKEN, request_id)
    version, trace_id, parent_id, flags = sent["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert len(parent_id) == 16 and parent_id not in (PARENT_ID, "0" * 16)


@pytest.mark.parametrize(
    "bad",
    [
        "garbage",
        f"01-{TRACE_ID}-{PARENT_ID}-01",  # not version 00
        f"00-{'0' * 32}-{PARENT_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",  # upper case
        f"00-{TRACE_ID}-{PARENT_ID}-01-extra",
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(gw, tenant, access, bad):
    status, resp_headers, _ = call(
        gw, "/v1/chat/completions", CHAT, headers(tenant.raw, traceparent=bad)
    )
    assert status == 200
    [line] = access.wait_for(1)
    trace_id = line["trace_id"]
    assert len(trace_id) == 32 and trace_id not in (TRACE_ID, TRACE_ID.upper(), "0" * 32)
    sent = sent_upstream(tenant.node.base_url, NODE_TOKEN, resp_headers["x-request-id"])
    assert tracing.parse_traceparent(sent["traceparent"])[0] == trace_id


def test_a_streamed_call_and_a_refused_key(gw, tenant, access):
    body = dict(CHAT, stream=True)
    status, _, _ = call(gw, "/v1/chat/completions", body, headers(tenant.raw))
    assert status == 200
    wrong = f"sk-{tenant.key.public_id}_{'x' * 43}"
    status, _, _ = call(gw, "/v1/chat/completions", CHAT, headers(wrong))
    assert status == 401
    streamed, refused = access.wait_for(2)
    assert streamed["stream"] is True and streamed["ttft_ms"] is not None
    assert streamed["status"] == 200
    assert refused["status"] == 401 and refused["error"]
    assert refused["organization_id"] is None and refused["key"] is None
    assert "x" * 43 not in access.lines[1]


@pytest.fixture
def vendor_gw(tenant, vendor, start_gateway):
    """A gateway with an Anthropic channel (started before ``access`` listens:
    starting Django's ASGI application applies LOGGING again)."""
    channel(vendor.base_url, "anthropic", "sim-claude", "claude-sim")
    return start_gateway()


def test_a_vendor_channel_gets_the_trace(vendor_gw, tenant, vendor, access):
    gw = vendor_gw
    status, _, _ = call(
        gw,
        "/v1/messages",
        {"model": "sim-claude", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]},
        headers(tenant.raw, traceparent=TRACEPARENT, **{"anthropic-version": "2023-06-01"}),
    )
    assert status == 200
    [line] = access.wait_for(1)
    assert line["trace_id"] == TRACE_ID and line["protocol"] == "anthropic"
    [sent] = [r for r in captured(vendor) if r["headers"].get("x-request-id") == line["request_id"]]
    assert sent["headers"]["traceparent"].startswith(f"00-{TRACE_ID}-")


# --- OpenTelemetry ----------------------------------------------------------


class FakeSpan(otel_trace.NonRecordingSpan):
    """A span that keeps what it is told (the API only: no SDK here)."""

    def __init__(self, name, context, parent, kind, attributes, ended):
        super().__init__(context)
        self.name, self.parent, self.kind = name, parent, kind
        self.attributes = dict(attributes or {})
        self.ended = ended
        self.status = None

    def set_attribute(self, key, value):
        self.attributes[key] = value

    def set_status(self, status, description=None):
        self.status = status

    def record_exception(self, *args, **kwargs):
        pass

    def end(self, end_time=None):
        self.ended.append(self)


class FakeTracer(otel_trace.Tracer):
    def __init__(self, ended):
        self.ended = ended
        self.counter = 0

    def start_span(self, name, context=None, kind=otel_trace.SpanKind.INTERNAL, attributes=None,
                   links=None, start_time=None, record_exception=True,
                   set_status_on_exception=True):  # fmt: skip
        parent = otel_trace.get_current_span(context).get_span_context()
        self.counter += 1
        trace_id = parent.trace_id if parent.is_valid else 0xABC0 + self.counter
        ctx = otel_trace.SpanContext(
            trace_id, 0x1000 + self.counter, False, otel_trace.TraceFlags(1)
        )
        return FakeSpan(name, ctx, parent, kind, attributes, self.ended)

    def start_as_current_span(self, *args, **kwargs):  # pragma: no cover - unused
        raise NotImplementedError


class FakeProvider(otel_trace.TracerProvider):
    def __init__(self):
        self.ended: list[FakeSpan] = []
        self.tracer = FakeTracer(self.ended)

    def get_tracer(self, *args, **kwargs):
        return self.tracer


@pytest.fixture
def spans(monkeypatch):
    provider = FakeProvider()
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", provider)
    assert tracing.otel_enabled()
    return provider.ended


def test_no_span_without_an_sdk():
    assert not tracing.otel_enabled()
    assert tracing.start_span("gateway.call", tracing.Trace.incoming(None)) is None
    with tracing.span("usage.ingest") as span:
        assert span is None


def test_spans_of_a_call_and_its_ingest(gw, tenant, access, spans):
    status, resp_headers, _ = call(
        gw, "/v1/chat/completions", CHAT, headers(tenant.raw, traceparent=TRACEPARENT)
    )
    assert status == 200
    [line] = access.wait_for(1)
    [span] = [s for s in spans if s.name == "gateway.call"]
    ctx = span.get_span_context()
    # The span is the caller's child, and its ids are what the node was sent.
    assert span.parent.trace_id == int(TRACE_ID, 16) and span.parent.span_id == int(PARENT_ID, 16)
    assert span.kind == otel_trace.SpanKind.SERVER
    sent = sent_upstream(tenant.node.base_url, NODE_TOKEN, resp_headers["x-request-id"])
    assert sent["traceparent"] == f"00-{TRACE_ID}-{ctx.span_id:016x}-01"
    assert line["trace_id"] == TRACE_ID
    assert span.attributes["gateway.model"] == "sim-chat-small"
    assert span.attributes["gateway.protocol"] == "openai"
    assert span.attributes["http.response.status_code"] == 200
    assert span.attributes["gateway.organization_id"] == tenant.org.id

    events = gw.emitter.wait_for(1)
    result = ingest_batch(events)
    assert result["accepted"] == 1
    [ingest] = [s for s in spans if s.name == "usage.ingest"]
    assert ingest.attributes["usage.batch_size"] == 1
    assert ingest.attributes["usage.accepted"] == 1
