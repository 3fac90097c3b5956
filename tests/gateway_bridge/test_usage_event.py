"""The usage event the gateway builds is the usage contract's: for every
protocol and endpoint that records a call, the real gateway's event
round-trips through the wire (``encode``, ``parse``) and ingest into a call
record holding the same values; and the gateway fills exactly the contract's
fields, so the two cannot drift apart."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from gateway_bridge.pipeline import usage_event as stage
from gateway_bridge.usage_mapping import TokenUsage
from tests.gateway_bridge.harness import ListEmitter
from tests.gateway_bridge.test_gateway_openai import raw_request
from usage.events import FIELD_NAMES, STORED_FIELDS, UsageEvent, encode, parse, to_wire
from usage.ingest import ingest_events
from usage.models import CallRecord

CHAT = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hello there"}]}
MESSAGES = {**CHAT, "max_tokens": 32}
HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello there"}]}]}
GEMINI = "/v1beta/models/sim-chat-small"
EMBED = "/v1beta/models/sim-embed"


def _openai(raw):
    return {"Authorization": f"Bearer {raw}", "Content-Type": "application/json"}


def _anthropic(raw):
    return {"x-api-key": raw, "anthropic-version": "2023-06-01", "content-type": "application/json"}


def _gemini(raw):
    return {"x-goog-api-key": raw, "Content-Type": "application/json"}


# (protocol, endpoint, stream, path, body, headers): every call the gateway records.
CASES = [
    ("openai", "chat.completions", False, "/v1/chat/completions", CHAT, _openai),
    ("openai", "chat.completions", True, "/v1/chat/completions", {**CHAT, "stream": True}, _openai),
    ("openai", "completions", False, "/v1/completions",
     {"model": "sim-chat-small", "prompt": "Hello", "max_tokens": 8}, _openai),
    ("openai", "embeddings", False, "/v1/embeddings",
     {"model": "sim-embed", "input": ["a", "b"]}, _openai),
    ("anthropic", "messages", False, "/v1/messages", MESSAGES, _anthropic),
    ("anthropic", "messages", True, "/v1/messages", {**MESSAGES, "stream": True}, _anthropic),
    ("anthropic", "count_tokens", False, "/v1/messages/count_tokens", CHAT, _anthropic),
    ("gemini", "generateContent", False, f"{GEMINI}:generateContent", HELLO, _gemini),
    ("gemini", "streamGenerateContent", True, f"{GEMINI}:streamGenerateContent?alt=sse",
     HELLO, _gemini),
    ("gemini", "embedContent", False, f"{EMBED}:embedContent",
     {"content": {"parts": [{"text": "a"}]}}, _gemini),
    ("gemini", "batchEmbedContents", False, f"{EMBED}:batchEmbedContents",
     {"requests": [{"model": "models/sim-embed", "content": {"parts": [{"text": t}]}}
                   for t in ("a", "b")]}, _gemini),
    ("gemini", "count_tokens", False, f"{GEMINI}:countTokens", HELLO, _gemini),
]  # fmt: skip


class KeepingEmitter(ListEmitter):
    """Keeps the events as the gateway built them, besides their wire dicts."""

    def __init__(self) -> None:
        super().__init__()
        self.built: list = []

    def emit(self, event) -> None:
        self.built.append(event)
        super().emit(event)


@pytest.mark.parametrize(
    ("protocol", "endpoint", "stream", "path", "body", "headers"),
    CASES,
    ids=[f"{c[0]}-{c[1]}{'-stream' if c[2] else ''}" for c in CASES],
)
def test_each_endpoints_event_round_trips_through_the_wire_and_ingest(
    tenant, start_gateway, protocol, endpoint, stream, path, body, headers
):
    # Given the real gateway, whose emitter keeps the events it was handed
    emitter = KeepingEmitter()
    gw = start_gateway(emitter=emitter)
    # When one call of this protocol and endpoint goes through it
    status, resp_headers, data = raw_request(gw, "POST", path, body, headers(tenant.raw))
    assert status == 200, data
    emitter.wait_for(1)
    [built] = emitter.built
    # Then the gateway built the contract's event, describing this call
    assert type(built) is UsageEvent
    assert (built.protocol, built.endpoint, built.stream) == (protocol, endpoint, stream)
    assert built.request_id == resp_headers["x-request-id"]
    assert (built.organization_id, built.api_key_id) == (tenant.org.pk, tenant.key.pk)
    assert built.status_code == 200 and built.error_type == ""
    if endpoint != "count_tokens":  # counted in the gateway: no node, no usage
        assert built.input_tokens + built.cache_read_tokens + built.cache_write_tokens > 0
    # ... whose wire form parses back to the same event
    [wire] = emitter.events
    assert wire == to_wire(built)
    assert UsageEvent.from_dict(wire) == built
    assert parse(wire)._asdict() == {name: getattr(built, name) for name in STORED_FIELDS}
    # ... and ingests into a call record holding the same values
    assert ingest_events([wire]).accepted == 1
    record = CallRecord.objects.get(request_id=built.request_id)
    assert {name: getattr(record, name) for name in STORED_FIELDS} == {
        name: getattr(built, name) for name in STORED_FIELDS
    }


def test_the_gateway_fills_exactly_the_contracts_fields():
    """The ``UsageEvent(...)`` call of the gateway's usage-event stage names
    every field of the contract (``version`` is the contract's own default)."""
    tree = ast.parse(inspect.getsource(stage))
    [call] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "UsageEvent"
    ]
    assert not call.args, "the event is built by keyword"
    filled = {k.arg for k in call.keywords}
    assert filled == set(FIELD_NAMES) - {"version"}
    assert {f.name for f in fields(UsageEvent) if f.name not in filled} == {"version"}


def _call_state(**overrides) -> SimpleNamespace:
    """The per-call state the gateway's stages leave behind, by hand."""
    auth = SimpleNamespace(organization_id=3, sub_account_id=None, key_id=9, priority="high")
    state = {
        "request_id": "req_0123456789ab00000001",
        "started": datetime(2025, 3, 4, 10, 15, tzinfo=UTC).timestamp(),
        "entry": SimpleNamespace(auth=auth),
        "model": "sim-chat-small",
        "node_id": 2,
        "protocol": "anthropic",
        "endpoint": "messages",
        "stream": True,
        "status": 200,
        "error_type": "",
        "usage": TokenUsage(input=10, cache_read=20, cache_write=30, output=40, reasoning=5),
        "ttft": 0.05,
        "upstream_s": 0.4,
        "queue_s": 0.001,
        "client_ip": "2001:db8::1",
        "cache_status": "prefix_hit",
    }
    return SimpleNamespace(**{**state, **overrides})


def test_the_event_takes_each_value_from_the_call_state():
    event = stage.usage_event(_call_state(), 0.5, 0.099)
    assert event == UsageEvent(
        request_id="req_0123456789ab00000001",
        started_at=datetime(2025, 3, 4, 10, 15, tzinfo=UTC),
        finished_at=datetime(2025, 3, 4, 10, 15, 0, 500_000, tzinfo=UTC),
        organization_id=3,
        sub_account_id=None,
        api_key_id=9,
        model="sim-chat-small",
        node_id=2,
        protocol="anthropic",
        endpoint="messages",
        stream=True,
        status_code=200,
        error_type="",
        input_tokens=10,
        cache_read_tokens=20,
        cache_write_tokens=30,
        output_tokens=40,
        reasoning_tokens=5,
        ttft_us=50_000,
        latency_us=500_000,
        upstream_us=400_000,
        overhead_us=99_000,
        queue_us=1_000,
        client_ip="2001:db8::1",
        priority=2,
        cache_status="prefix_hit",
    )


def test_failed_calls_and_odd_values_are_made_valid_for_the_contract():
    event = stage.usage_event(
        _call_state(
            status=429,
            error_type="x" * 100,
            model=None,
            endpoint="unknown",
            ttft=None,
            upstream_s=None,
            usage=TokenUsage(output=3, reasoning=9),
        ),
        0.001,
        0.001,
    )
    assert event.error_type == "x" * 64
    assert (event.model, event.endpoint) == ("(unknown)", "chat.completions")
    assert (event.ttft_us, event.upstream_us) == (None, None)
    assert event.reasoning_tokens == 3  # reasoning is part of output
    assert stage.usage_event(_call_state(status=503, error_type=""), 1, 0).error_type == "error"
    parse(to_wire(event))  # valid on the wire


def test_the_wire_spells_timestamps_as_the_gateway_always_has():
    """``encode`` writes what ``datetime.isoformat`` wrote before the contract
    was a dataclass, so the worker (and copy_stamp's fast path) read it alike."""
    for started in (1_741_083_300.0, 1_741_083_300.123456, 1_741_083_300.000001):
        event = stage.usage_event(_call_state(started=started), 0.25, 0.0)
        wire = to_wire(event)
        assert wire["started_at"] == datetime.fromtimestamp(started, UTC).isoformat()
        assert wire["finished_at"] == datetime.fromtimestamp(started + 0.25, UTC).isoformat()
        assert list(wire) == list(FIELD_NAMES)
    assert encode([event]) == b"[" + encode(event) + b"]"
