"""The gateway end to end with the official openai SDK: plain and streamed
chats, tools, embeddings, models, and every rule a key carries. The usage
events the gateway emits are ingested and compared with what the SDK saw."""

from __future__ import annotations

import http.client
import json

import openai
import pytest

from accounts.services import api_key_revoke
from usage.ingest import ingest_events
from usage.models import CallRecord


def client(gw, raw, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0, **kwargs)


def raw_request(gw, method, path, body=None, headers=None, raw_body=None):
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        payload = raw_body if raw_body is not None else (json.dumps(body) if body else None)
        conn.request(method, path, body=payload, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def auth(raw):
    return {"Authorization": f"Bearer {raw}", "Content-Type": "application/json"}


CHAT = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hello there"}]}


def test_plain_chat_matches_its_call_record(gw, tenant):
    c = client(gw, tenant.raw)
    resp = c.chat.completions.with_raw_response.create(
        model="sim-chat-small",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name three colours."},
            {"role": "assistant", "content": "Red, green, blue."},
            {"role": "user", "content": "Two more."},
        ],
        max_tokens=20,
    )
    completion = resp.parse()
    assert completion.model == "sim-chat-small"
    assert completion.choices[0].message.content
    request_id = resp.headers["x-request-id"]
    [event] = gw.emitter.wait_for(1)
    assert event["request_id"] == request_id
    assert event["status_code"] == 200 and event["error_type"] == ""
    result = ingest_events(gw.emitter.events)
    assert result.accepted == 1
    record = CallRecord.objects.get(request_id=request_id)
    u = completion.usage
    cached = (u.prompt_tokens_details.cached_tokens or 0) if u.prompt_tokens_details else 0
    assert record.input_tokens + record.cache_read_tokens == u.prompt_tokens
    assert record.cache_read_tokens == cached
    assert record.output_tokens == u.completion_tokens
    assert record.organization_id == tenant.org.id and record.api_key_id == tenant.key.id
    assert record.node_id == tenant.node.id
    assert record.cost > 0
    assert record.latency_us >= record.upstream_us > 0


def test_stream_with_and_without_usage_chunk(gw, tenant):
    c = client(gw, tenant.raw)
    chunks = list(
        c.chat.completions.create(
            **CHAT, max_tokens=12, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text
    quiet = list(c.chat.completions.create(**CHAT, max_tokens=12, stream=True))
    assert all(ch.usage is None for ch in quiet)
    events = gw.emitter.wait_for(2)
    assert all(e["stream"] and e["ttft_us"] is not None for e in events)
    # The call without a usage chunk is billed all the same, from the node's usage.
    assert events[1]["output_tokens"] == events[0]["output_tokens"] > 0


def test_tool_call_round_trip(gw, tenant):
    c = client(gw, tenant.raw)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    first = c.chat.completions.create(
        model="sim-chat-small",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools,
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)
    second = c.chat.completions.create(
        model="sim-chat-small",
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ],
        tools=tools,
    )
    assert "sunny" in second.choices[0].message.content


def test_embeddings_and_models(gw, tenant):
    c = client(gw, tenant.raw)
    emb = c.embeddings.create(model="sim-embed", input=["one", "two"])
    assert len(emb.data) == 2 and emb.usage.prompt_tokens > 0
    names = {m.id for m in c.models.list()}
    assert {"sim-chat-small", "sim-chat-large", "sim-embed"} <= names


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({}, CHAT, 401, "missing_api_key"),
        ({"Authorization": "Bearer sk-nope_nope"}, CHAT, 401, "invalid_api_key"),
        (None, {"model": "no-such-model", "messages": CHAT["messages"]}, 404, "model_not_found"),
        (None, {**CHAT, "max_tokens": 100_000}, 400, "context_length_exceeded"),
        (None, {**CHAT, "bogus": 1}, 400, None),
        (None, {"messages": CHAT["messages"]}, 400, None),
    ],
)
def test_bad_requests_get_openai_errors(gw, tenant, headers, body, status, code):
    hdrs = auth(tenant.raw) if headers is None else {"Content-Type": "application/json", **headers}
    got, _, data = raw_request(gw, "POST", "/v1/chat/completions", body, hdrs)
    assert got == status
    err = json.loads(data)["error"]
    assert err["message"] and err["type"]
    if code:
        assert err["code"] == code


def test_malformed_bodies(gw, tenant, settings):
    status, _, data = raw_request(
        gw, "POST", "/v1/chat/completions", raw_body="{not json", headers=auth(tenant.raw)
    )
    assert status == 400 and json.loads(data)["error"]["code"] == "invalid_json"
    status, _, data = raw_request(
        gw,
        "POST",
        "/v1/chat/completions",
        raw_body="a=b",
        headers={**auth(tenant.raw), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 415
    big = json.dumps({**CHAT, "pad": "x" * (settings.GATEWAY_MAX_BODY_BYTES + 10)})
    status, _, data = raw_request(
        gw, "POST", "/v1/chat/completions", raw_body=big, headers=auth(tenant.raw)
    )
    assert status == 413 and json.loads(data)["error"]["code"] == "request_too_large"
    status, _, _ = raw_request(gw, "GET", "/v1/chat/completions", headers=auth(tenant.raw))
    assert status == 405
    # Every refused call of a known key is recorded with its error type, nothing else.
    events = gw.emitter.wait_for(3)
    assert sorted(e["status_code"] for e in events) == [400, 413, 415]


def test_model_allowlist_and_revocation(gw, tenant):
    key, raw = tenant.new_key(allowed_models=["sim-chat-large"])
    c = client(gw, raw)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        c.chat.completions.create(**CHAT)
    assert denied.value.body["code"] == "model_not_allowed"
    assert c.chat.completions.create(model="sim-chat-large", messages=CHAT["messages"])
    api_key_revoke(actor=tenant.actor, key_id=key.id)
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(model="sim-chat-large", messages=CHAT["messages"])


def test_ip_allowlist_and_forwarded_for(gw, tenant, settings):
    _, raw = tenant.new_key(ip_allowlist=["203.0.113.0/24"])
    c = client(gw, raw)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        c.chat.completions.create(**CHAT)
    assert denied.value.body["code"] == "ip_not_allowed"
    # A spoofed X-Forwarded-For from a peer that is not a trusted proxy is ignored.
    spoofed = client(gw, raw, default_headers={"X-Forwarded-For": "203.0.113.7"})
    with pytest.raises(openai.PermissionDeniedError):
        spoofed.chat.completions.create(**CHAT)


def test_trusted_proxy_forwarded_for(tenant, start_gateway, settings):
    settings.GATEWAY_TRUSTED_PROXIES = ["127.0.0.1/32"]
    gw = start_gateway()
    _, raw = tenant.new_key(ip_allowlist=["203.0.113.0/24"])
    via_proxy = client(gw, raw, default_headers={"X-Forwarded-For": "203.0.113.7"})
    assert via_proxy.chat.completions.create(**CHAT).choices
    # The client hop is the rightmost untrusted one; a forged left part changes nothing.
    forged = client(gw, raw, default_headers={"X-Forwarded-For": "203.0.113.7, 198.51.100.1"})
    with pytest.raises(openai.PermissionDeniedError):
        forged.chat.completions.create(**CHAT)
    events = gw.emitter.wait_for(2)
    assert events[0]["client_ip"] == "203.0.113.7"


def test_rate_limit_headers_and_429(gw, tenant):
    _, raw = tenant.new_key(rpm_limit=2)
    c = client(gw, raw)
    ok = c.chat.completions.with_raw_response.create(**CHAT, max_tokens=4)
    assert ok.headers["x-ratelimit-limit-requests"] == "2"
    assert ok.headers["x-ratelimit-remaining-requests"] == "1"
    c.chat.completions.create(**CHAT, max_tokens=4)
    with pytest.raises(openai.RateLimitError) as limited:
        c.chat.completions.create(**CHAT, max_tokens=4)
    assert limited.value.body["code"] == "rpm_limit_exceeded"
    assert int(limited.value.response.headers["retry-after"]) >= 1
    assert limited.value.response.headers["x-ratelimit-remaining-requests"] == "0"


def test_database_outage_keeps_known_keys_working(gw, tenant, monkeypatch):
    """While the database is unreachable, a key seen before keeps working from the
    cache (a revocation still arrives by pub/sub); an unseen key gets a 503 in the
    protocol's format with Retry-After, never a 500."""
    from django.db import OperationalError

    c = client(gw, tenant.raw)
    assert c.chat.completions.create(**CHAT).choices
    _, unseen = tenant.new_key()
    monkeypatch.setattr(gw.gateway.state, "key_ttl", 0)  # every call reloads its key

    def down(fn, *args):
        raise OperationalError("connection refused")

    monkeypatch.setattr(gw.gateway.state, "run_db", _async(down))
    assert c.chat.completions.create(**CHAT).choices
    status, headers, data = raw_request(gw, "POST", "/v1/chat/completions", CHAT, auth(unseen))
    assert status == 503 and headers["retry-after"] == "1"
    assert json.loads(data)["error"]["code"] == "auth_unavailable"


def _async(fn):
    async def wrapper(*args):
        return fn(*args)

    return wrapper


def test_a_change_heard_off_the_event_loop_stops_the_key_at_once(gw, tenant):
    """A revocation marked by another thread (the Redis listener's) is obeyed by
    the next call, before the event loop has applied the message."""
    c = client(gw, tenant.raw)
    assert c.chat.completions.create(**CHAT).choices
    from accounts.models import ApiKey

    ApiKey.objects.filter(pk=tenant.key.id).update(status="revoked")  # no message sent
    assert c.chat.completions.create(**CHAT).choices  # still cached
    gw.gateway.state._mark(f"key:{tenant.key.id}")  # as the listener thread does
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(**CHAT)
