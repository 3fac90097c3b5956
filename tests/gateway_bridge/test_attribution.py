"""Cost attribution through the real gateway: the official SDKs' end-user
fields (OpenAI ``user``, Anthropic ``metadata.user_id``) and the
``x-gateway-tags`` / ``x-gateway-end-user`` headers reach the usage event and
the call record, while the body reaches the vendor as sent; tags or an end
user over the limits, or a required tag missing, are a 400 in the caller's
protocol naming the header or field, before any vendor call or reservation,
and nothing is charged."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime

import anthropic
import openai
import pytest

from accounts.keys import authenticated_view
from accounts.services import sub_account_create
from gateway_bridge.limits import plan
from tests.gateway_bridge.vendor_fixtures import captured, demo_channels, post
from usage.ingest import ingest_events
from usage.models import CallRecord

TAGS = {"x-gateway-tags": "team:search, env:prod"}
HELLO = [{"role": "user", "content": "Hello"}]
GEMINI_HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}


@pytest.fixture
def vendor_gw(vendor, tenant, start_gateway):
    """A gateway over one vendor channel of each kind (sim-gpt, sim-claude, sim-gemini)."""
    demo_channels(vendor.base_url)
    return start_gateway()


def openai_client(gw, raw) -> openai.OpenAI:
    return openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)


def anthropic_client(gw, raw) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=raw, base_url=gw.url, max_retries=0)


def sent_body(vendor) -> dict:
    return json.loads(base64.b64decode(captured(vendor)[-1]["body_base64"]))


def stored(gw, n: int) -> list[CallRecord]:
    events = gw.emitter.wait_for(n)
    ingest_events(events)
    return [CallRecord.objects.get(request_id=e["request_id"]) for e in events]


def test_the_openai_sdks_user_and_tags_are_recorded_and_the_vendor_still_gets_user(
    vendor, vendor_gw, tenant
):
    client = openai_client(vendor_gw, tenant.raw)
    chat = client.chat.completions.create(
        model="sim-gpt", messages=HELLO, max_tokens=8, user="end-user-7", extra_headers=TAGS
    )
    assert chat.choices[0].message.content
    assert sent_body(vendor)["user"] == "end-user-7"  # passed on, not stripped

    [event] = vendor_gw.emitter.wait_for(1)
    assert (event["end_user"], event["tags"]) == ("end-user-7", {"team": "search", "env": "prod"})
    [record] = stored(vendor_gw, 1)
    assert (record.end_user, record.tags) == ("end-user-7", {"team": "search", "env": "prod"})
    assert record.cost > 0


def test_the_anthropic_sdks_metadata_user_id_is_recorded_and_passed_through_natively(
    vendor, vendor_gw, tenant
):
    client = anthropic_client(vendor_gw, tenant.raw)
    message = client.messages.create(
        model="sim-claude",
        max_tokens=16,
        messages=HELLO,
        metadata={"user_id": "acct-9"},
        extra_headers={"x-gateway-tags": "feature:summaries"},
    )
    assert message.content
    assert sent_body(vendor)["metadata"] == {"user_id": "acct-9"}
    [record] = stored(vendor_gw, 1)
    assert (record.end_user, record.tags) == ("acct-9", {"feature": "summaries"})


def test_the_end_user_header_overrides_the_body_field_which_still_reaches_the_vendor(
    vendor, vendor_gw, tenant
):
    client = openai_client(vendor_gw, tenant.raw)
    client.chat.completions.create(
        model="sim-gpt",
        messages=HELLO,
        max_tokens=8,
        user="from-body",
        extra_headers={"x-gateway-end-user": "from-header"},
    )
    assert sent_body(vendor)["user"] == "from-body"
    client.embeddings.create(model="sim-embed", input="hi", user="embedder")  # sim node
    first, second = vendor_gw.emitter.wait_for(2)
    assert first["end_user"] == "from-header"
    assert (second["endpoint"], second["end_user"], second["tags"]) == (
        "embeddings",
        "embedder",
        {},
    )


def test_gemini_takes_the_end_user_and_tags_from_the_headers_only(vendor, vendor_gw, tenant):
    status, answer = post(
        vendor_gw.url,
        "/v1beta/models/sim-gemini:generateContent",
        json.dumps(GEMINI_HELLO).encode(),
        {
            "x-goog-api-key": tenant.raw,
            "content-type": "application/json",
            "x-gateway-end-user": "g-user",
            "x-gateway-tags": "team:地图 ✓".encode(),  # UTF-8 on the wire
        },
    )
    assert status == 200, answer
    status, answer = post(
        vendor_gw.url,
        "/v1beta/models/sim-gemini:generateContent",
        json.dumps(GEMINI_HELLO).encode(),
        {
            "x-goog-api-key": tenant.raw,
            "content-type": "application/json",
            "x-gateway-tags": b"team:\xff",
        },
    )
    assert status == 400
    assert json.loads(answer)["error"]["message"] == "x-gateway-tags is not valid UTF-8."
    first, _refused = stored(vendor_gw, 2)
    assert (first.end_user, first.tags) == ("g-user", {"team": "地图 ✓"})


# (protocol, path, body, auth headers, the error's message in the protocol's body)
ELEVEN_TAGS = ",".join(f"k{i}:v" for i in range(11))


def _openai_refusal(raw, headers, body=None):
    return (
        "/v1/chat/completions",
        body or {"model": "sim-gpt", "messages": HELLO, "max_tokens": 8},
        {"Authorization": f"Bearer {raw}", "content-type": "application/json", **headers},
    )


def _anthropic_refusal(raw, headers, body=None):
    return (
        "/v1/messages",
        body or {"model": "sim-claude", "messages": HELLO, "max_tokens": 8},
        {"x-api-key": raw, "anthropic-version": "2023-06-01", **headers},
    )


def _gemini_refusal(raw, headers, body=None):
    return (
        "/v1beta/models/sim-gemini:generateContent",
        body or GEMINI_HELLO,
        {"x-goog-api-key": raw, "content-type": "application/json", **headers},
    )


def _message(protocol: str, answer: dict) -> str:
    if protocol == "openai":
        assert answer["error"]["type"] == "invalid_request_error"
        return answer["error"]["message"]
    if protocol == "anthropic":
        assert answer["type"] == "error"
        assert answer["error"]["type"] == "invalid_request_error"
        return answer["error"]["message"]
    assert answer["error"]["status"] == "INVALID_ARGUMENT" and answer["error"]["code"] == 400
    return answer["error"]["message"]


REFUSALS = {"openai": _openai_refusal, "anthropic": _anthropic_refusal, "gemini": _gemini_refusal}


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
def test_tags_over_the_limits_are_a_400_in_the_callers_protocol_before_anything_is_spent(
    protocol, vendor, vendor_gw, tenant
):
    # Given a key with a daily cap (so a reservation would show)
    key, raw = tenant.new_key(name=f"capped-{protocol}", spend_cap_daily=10_000_000)
    caps, _ = plan(authenticated_view(key), datetime.now(UTC))
    today = next(c for c in caps if c.code == "key_daily_cap_exceeded")
    refusal = REFUSALS[protocol]
    for headers, problem in (
        ({"x-gateway-tags": ELEVEN_TAGS}, "x-gateway-tags has 11 tags; at most 10"),
        ({"x-gateway-tags": "team"}, "x-gateway-tags: 'team' is not a key:value pair"),
        ({"x-gateway-tags": "team:" + "v" * 129}, "the value of tag 'team' must be 1 to 128"),
    ):
        path, body, all_headers = refusal(raw, headers)
        status, answer = post(vendor_gw.url, path, json.dumps(body).encode(), all_headers)
        assert status == 400, answer
        assert problem in _message(protocol, json.loads(answer))
    # Then no vendor was called, nothing is reserved, and the refused calls cost nothing
    assert captured(vendor) == []
    spent, reserved = vendor_gw.call(lambda: vendor_gw.gateway.limits.store.snapshot(today.key))
    assert (spent, reserved) == (0, 0)
    records = stored(vendor_gw, 3)
    assert {(r.status_code, r.cost, r.input_tokens, r.output_tokens) for r in records} == {
        (400, 0, 0, 0)
    }


def test_an_over_long_end_user_is_served_recorded_shortened_and_sent_as_sent(
    vendor, vendor_gw, tenant
):
    # Claude Code's metadata.user_id: a JSON string of device, account and session ids
    claude_code_user = json.dumps(
        {"device_id": "d" * 64, "account_uuid": "", "session_id": "5" * 36}
    )
    assert len(claude_code_user) > 128
    client = openai_client(vendor_gw, tenant.raw)
    chat = client.chat.completions.create(
        model="sim-gpt", messages=HELLO, max_tokens=8, user="u" * 129
    )
    assert chat.choices[0].message.content
    assert sent_body(vendor)["user"] == "u" * 129
    message = anthropic_client(vendor_gw, tenant.raw).messages.create(
        model="sim-claude", max_tokens=8, messages=HELLO, metadata={"user_id": claude_code_user}
    )
    assert message.content
    assert sent_body(vendor)["metadata"]["user_id"] == claude_code_user
    header_user = "h" * 300
    client.chat.completions.create(
        model="sim-gpt",
        messages=HELLO,
        max_tokens=8,
        extra_headers={"x-gateway-end-user": header_user},
    )
    recorded = [r.end_user for r in stored(vendor_gw, 3)]
    # Then each is its beginning, "~" and 16 hex digits of its SHA-256: 128 characters
    for record, sent in zip(recorded, ("u" * 129, claude_code_user, header_user), strict=True):
        digest = hashlib.sha256(sent.encode()).hexdigest()[:16]
        assert record == sent[:111] + "~" + digest
        assert len(record) == 128


def test_a_required_tag_missing_is_a_400_naming_it_and_the_header_present_it_is_served(
    vendor, vendor_gw, tenant
):
    # Given a sub-account requiring "project" and a key in it requiring "team"
    sub = sub_account_create(actor=tenant.actor, name="Search", required_tag_keys=["project"])
    _, raw = tenant.new_key(name="tagged", sub_account_id=sub.pk, required_tag_keys=["team"])
    client = openai_client(vendor_gw, raw)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="sim-gpt",
            messages=HELLO,
            max_tokens=8,
            extra_headers={"x-gateway-tags": "team:a"},
        )
    assert refused.value.body["code"] == "missing_required_tags"
    assert refused.value.body["param"] == "x-gateway-tags"
    assert (
        "requires the tag(s) project in the x-gateway-tags header" in refused.value.body["message"]
    )
    path, body, headers = _anthropic_refusal(raw, {})
    status, answer = post(vendor_gw.url, path, json.dumps(body).encode(), headers)
    assert status == 400
    assert "tag(s) team, project in the x-gateway-tags" in json.loads(answer)["error"]["message"]
    assert captured(vendor) == []

    chat = client.chat.completions.create(
        model="sim-gpt",
        messages=HELLO,
        max_tokens=8,
        extra_headers={"x-gateway-tags": "team:a,project:b"},
    )
    assert chat.choices[0].message.content
    records = stored(vendor_gw, 3)
    assert [r.status_code for r in records] == [400, 400, 200]
    assert records[-1].tags == {"team": "a", "project": "b"}
