"""The emitter publishes the usage contract's events as standard JSON Celery
messages, encoded once by orjson: any worker decodes them with kombu's own
JSON decoder into the wire dicts ingest parses."""

from __future__ import annotations

from datetime import UTC, datetime

from kombu import serialization

from gateway_bridge.emitter import SERIALIZER
from usage.events import UsageEvent, to_wire

T0 = datetime(2025, 3, 4, 10, 15, tzinfo=UTC)


def _event(n: int) -> UsageEvent:
    return UsageEvent(
        request_id=f"req-{n:08d}", started_at=T0, finished_at=T0.replace(microsecond=n),
        organization_id=3, sub_account_id=None, api_key_id=9, model="sim-chat-small",
        node_id=1, protocol="openai", endpoint="chat.completions", stream=False,
        status_code=200, error_type="", input_tokens=10 + n, cache_read_tokens=0,
        cache_write_tokens=0, output_tokens=5, reasoning_tokens=0, ttft_us=None,
        latency_us=1000, upstream_us=900, overhead_us=100, queue_us=0,
        client_ip="203.0.113.7", priority=1, cache_status="miss",
    )  # fmt: skip


def test_a_published_batch_is_a_json_message_any_worker_decodes():
    batch = [_event(1), _event(2), to_wire(_event(3))]  # a replayed wire dict among them
    body = ([batch], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
    content_type, encoding, payload = serialization.dumps(body, serializer=SERIALIZER)
    assert (content_type, encoding) == ("application/json", "utf-8")
    args, kwargs, _embed = serialization.loads(
        payload, content_type, encoding, accept={"application/json"}
    )
    assert args == [[to_wire(e) for e in batch]] and kwargs == {}
    assert args[0][0]["finished_at"] == "2025-03-04T10:15:00.000001+00:00"


def test_registering_the_encoder_leaves_kombus_json_as_is():
    assert serialization.registry.type_to_name["application/json"] == "json"
    assert serialization.registry.name_to_type["json"] == "application/json"
    # Other publishers (e.g. the circuit reporter) may still choose kombu's json.
    content_type, _, payload = serialization.dumps({"at": 1.5}, serializer="json")
    assert content_type == "application/json" and b'"at"' in payload.encode()
