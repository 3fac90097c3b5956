"""Vendors that answer badly: an unknown status, HTML, an error body in their
own shape, a stream cut short. The client gets its own protocol's error with
the right status, the call is recorded with its error type, the failure
counts against the channel, and no reservation dangles."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.gateway_bridge.test_gateway_faults import garbage_server, reserved_on
from tests.gateway_bridge.vendor_fixtures import channel

HTML_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/html\r\ncontent-length: 40\r\n\r\n"
    b"<html><body>upstream is down</body></html>"[:40]
)
TEAPOT = b"HTTP/1.1 418 I'm a teapot\r\ncontent-type: text/html\r\ncontent-length: 6\r\n\r\n<html>"
ANTHROPIC_400 = (
    b'{"type":"error","error":{"type":"invalid_request_error",'
    b'"message":"messages: roles must alternate"}}'
)
CUT_STREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100000\r\n\r\n"
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":'
    b'"message","role":"assistant","model":"claude-sim","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hello the"}}\n\n'
)


def http(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    head = b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (status.encode(), ctype, len(body)) + body


@pytest.mark.parametrize(
    ("reply", "status", "kind"),
    [
        (HTML_503, 502, "server_error"),
        (TEAPOT, 418, "invalid_request_error"),
        (http("400 Bad Request", ANTHROPIC_400), 400, "invalid_request_error"),
    ],
)
def test_an_openai_client_gets_its_own_error_for_a_bad_anthropic_answer(
    tenant, start_gateway, settings, reply, status, kind
):
    settings.GATEWAY_RETRIES = 0
    key, raw = tenant.new_key(spend_cap_daily=10**12)
    with garbage_server(reply) as url:
        node = channel(url, "anthropic", "sim-claude", "claude-sim")
        gw = start_gateway()
        client = openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(
                model="sim-claude", messages=[{"role": "user", "content": "Hi"}], max_tokens=8
            )
    error = failed.value
    assert error.status_code == status
    assert error.body["type"] == kind and "<html" not in error.body["message"]
    if status == 400:
        assert "roles must alternate" in error.body["message"]  # the vendor's own words
    (event,) = gw.emitter.wait_for(1)
    assert event["status_code"] == status and event["error_type"]
    assert event["node_id"] == node.pk and event["output_tokens"] == 0
    assert reserved_on(gw, key) == 0


def test_a_native_stream_cut_short_is_billed_for_what_came_and_recorded(
    tenant, start_gateway, settings
):
    key, raw = tenant.new_key(spend_cap_daily=10**12)
    with garbage_server(CUT_STREAM) as url:
        channel(url, "anthropic", "sim-claude", "claude-sim")
        gw = start_gateway()
        client = anthropic.Anthropic(api_key=raw, base_url=gw.url, max_retries=0)
        texts = []

        def read():
            with client.messages.stream(
                model="sim-claude", max_tokens=32, messages=[{"role": "user", "content": "Hi"}]
            ) as stream:
                texts.extend(stream.text_stream)

        with pytest.raises(anthropic.APIError):  # the vendor's break reaches the SDK as an error
            read()
    assert texts == ["Hello the"]  # what the vendor sent was relayed as it came
    (event,) = gw.emitter.wait_for(1)
    assert event["status_code"] >= 500 and event["error_type"]
    assert event["input_tokens"] == 12  # the vendor's own count from message_start
    assert reserved_on(gw, key) == 0


def test_an_anthropic_client_gets_the_vendors_error_body_natively(tenant, start_gateway):
    with garbage_server(http("400 Bad Request", ANTHROPIC_400)) as url:
        channel(url, "anthropic", "sim-claude", "claude-sim")
        gw = start_gateway()
        client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as failed:
            client.messages.create(
                model="sim-claude", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
            )
    assert failed.value.body["error"]["message"] == "messages: roles must alternate"
    (event,) = gw.emitter.wait_for(1)
    assert event["status_code"] == 400 and event["error_type"] == "invalid_request_error"
