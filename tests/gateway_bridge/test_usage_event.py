"""The usage event the gateway builds is the usage contract's: for every
protocol and endpoint that records a call, the real gateway's event
round-trips through the wire (``encode``, ``parse``) and ingest into a call
record holding the same values; the gateway fills exactly the contract's
fields, so the two cannot drift apart; and a call served at a channel's cost
price carries the vendor's charge for it, rated half up by the one rule."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from accounts.models import ApiKey
from gateway_bridge.pipeline import usage_event as stage
from gateway_bridge.usage_mapping import TokenUsage
from inference_node.facade import CostPrice
from tests.factories import OrganizationFactory
from tests.gateway_bridge.harness import ListEmitter
from tests.gateway_bridge.test_gateway_openai import raw_request
from usage.events import FIELD_NAMES, STORED_FIELDS, UsageEvent, encode, parse, to_wire
from usage.facade import PPM, rate
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
    # (the simulator node has no cost price and no key pool)
    assert (built.credential_id, built.upstream_cost, built.upstream_currency) == (None, 0, "")
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
    auth = SimpleNamespace(
        organization_id=3, sub_account_id=None, key_id=9, priority="high", test_traffic=False
    )
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
        "credential_id": None,
        "cost_price": None,
        "end_user": "user-42",
        "tags": {"team": "search"},
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
        credential_id=None,
        upstream_cost=0,
        upstream_currency="",
        end_user="user-42",
        tags={"team": "search"},
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


# A vendor's price per million tokens (micro-units): $2.50 in, $0.25 cached,
# $3.125 cache write, $10 out.
VENDOR = CostPrice(
    currency="USD",
    input_per_mtok=2_500_000,
    cache_read_per_mtok=250_000,
    cache_write_per_mtok=3_125_000,
    output_per_mtok=10_000_000,
)


def test_a_call_at_a_cost_price_carries_the_vendors_charge_and_credential():
    # Given a call that went out with credential 41 on a channel priced VENDOR
    state = _call_state(
        credential_id=41,
        cost_price=VENDOR,
        usage=TokenUsage(input=1000, cache_read=2000, cache_write=400, output=300, reasoning=7),
    )
    # When its event is built
    event = stage.usage_event(state, 0.5, 0.01)
    # Then it names the credential and what the vendor charges, in its currency:
    # 1000*2.5 + 2000*0.25 + 400*3.125 + 300*10 = 2500 + 500 + 1250 + 3000 micro-units
    assert event.credential_id == 41
    assert (event.upstream_cost, event.upstream_currency) == (7_250, "USD")
    assert event.upstream_cost == rate((1000, 2000, 400, 300), VENDOR, PPM)


@pytest.mark.parametrize(
    ("tokens", "cost"),
    [
        ((1, 0, 0, 0), 3),  # 2.5 micro-units: a half rounds up
        ((0, 1, 0, 0), 0),  # 0.25 rounds down
        ((0, 0, 0, 1), 10),  # exact
        ((0, 2, 0, 0), 1),  # 0.5 rounds up
        ((3, 0, 0, 0), 8),  # 7.5 rounds up
        ((0, 0, 1, 0), 3),  # 3.125 rounds down
    ],
)
def test_the_vendors_charge_is_rounded_half_up_per_call(tokens, cost):
    inp, cache_read, cache_write, out = tokens
    usage = TokenUsage(input=inp, cache_read=cache_read, cache_write=cache_write, output=out)
    event = stage.usage_event(_call_state(cost_price=VENDOR, usage=usage), 0.1, 0.0)
    assert event.upstream_cost == cost


def test_a_call_without_a_cost_price_has_no_vendor_charge():
    event = stage.usage_event(_call_state(credential_id=None, cost_price=None), 0.1, 0.0)
    assert (event.credential_id, event.upstream_cost, event.upstream_currency) == (None, 0, "")


@pytest.mark.django_db
def test_the_vendors_charge_round_trips_through_the_wire_into_the_call_record():
    # Given the event of a call an EUR channel served with credential 7
    org = OrganizationFactory(name="Initech", slug="initech", currency="EUR")
    key = ApiKey.objects.create(
        organization=org, name="k", public_id="tmargin00001", secret_hash="0" * 64
    )
    auth = SimpleNamespace(organization_id=org.pk, sub_account_id=None, key_id=key.pk,
                           priority="normal", test_traffic=False)  # fmt: skip
    eur = CostPrice("EUR", 1_000_000, 100_000, 1_250_000, 4_000_000)
    state = _call_state(
        entry=SimpleNamespace(auth=auth),
        started=datetime.now(UTC).timestamp() - 5,
        credential_id=7,
        cost_price=eur,
        usage=TokenUsage(input=1234, cache_read=5678, cache_write=9, output=321),
    )
    built = stage.usage_event(state, 0.5, 0.01)
    # When it travels the wire and is ingested
    wire = to_wire(built)
    assert (wire["credential_id"], wire["upstream_currency"]) == (7, "EUR")
    assert ingest_events([wire]).accepted == 1
    # Then the call record holds the credential and the vendor's charge as rated
    record = CallRecord.objects.get(request_id=built.request_id)
    assert record.credential_id == 7
    assert record.upstream_cost == rate((1234, 5678, 9, 321), eur, PPM) == 3_097
    assert record.upstream_currency == "EUR" and record.currency == "EUR"


def test_a_load_test_keys_call_is_marked_as_test():
    """A key issued for a load test marked "not billed" (``test_traffic``)
    makes events that say ``is_test``; every other key's say not."""
    auth = SimpleNamespace(
        organization_id=3, sub_account_id=None, key_id=9, priority="normal", test_traffic=True
    )
    event = stage.usage_event(_call_state(entry=SimpleNamespace(auth=auth)), 0.5, 0.01)
    assert event.is_test is True
    assert parse(to_wire(event)).is_test is True
    assert stage.usage_event(_call_state(), 0.5, 0.01).is_test is False
