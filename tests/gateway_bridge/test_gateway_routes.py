"""The route stage through the running gateway: unknown paths answer 404 in
the protocol their prefix implies, a wrong method 405 with Allow, and
neither records a usage event."""

from __future__ import annotations

import json

import pytest

from tests.gateway_bridge.test_gateway_openai import auth, raw_request


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("/v1beta/models/sim-chat-small:explode", lambda b: b["error"]["status"] == "NOT_FOUND"),
        ("/v1/messages/batches", lambda b: b["error"]["type"] == "not_found_error"),
        ("/v1/assistants", lambda b: b["error"]["code"] == "unknown_url"),
    ],
)
def test_unknown_paths_answer_in_their_prefixs_protocol(gw, tenant, path, check):
    status, _, data = raw_request(gw, "POST", path, {"x": 1}, auth(tenant.raw))
    assert status == 404
    assert check(json.loads(data))


def test_a_wrong_method_is_405_with_allow_and_records_nothing(gw, tenant):
    status, headers, data = raw_request(gw, "GET", "/v1/chat/completions", None, auth(tenant.raw))
    assert status == 405
    assert headers["allow"] == "POST"
    assert json.loads(data)["error"]["code"] == "method_not_allowed"
    status, headers, _ = raw_request(gw, "GET", "/v1beta/models/sim-chat-small:generateContent")
    assert (status, headers["allow"]) == (405, "POST")
    # Only a real call leaves an event: send one and see it is the only one.
    status, _, _ = raw_request(
        gw,
        "POST",
        "/v1/chat/completions",
        {"model": "sim-chat-small", "messages": [{"role": "user", "content": "hi"}]},
        auth(tenant.raw),
    )
    assert status == 200
    events = gw.emitter.wait_for(1)
    assert [e["endpoint"] for e in events] == ["chat.completions"]
