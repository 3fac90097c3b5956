"""A key in the URL (``?key=``) is Gemini's convention and is taken on Gemini
paths only (docs/gateway.md's protocol table; docs/architecture.md, "Hostile
input"): on OpenAI and Anthropic paths the same key, in the query string
alone, is refused with that protocol's own 401, and no call reaches a node."""

from __future__ import annotations

import json

import pytest

from tests.gateway_bridge.test_gateway_openai import CHAT, raw_request

pytestmark = pytest.mark.django_db(transaction=True)

GEMINI_HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello there"}]}]}
JSON = {"Content-Type": "application/json"}


def test_openai_paths_refuse_a_key_given_only_in_the_query_string(gw, tenant):
    status, _, data = raw_request(
        gw, "POST", f"/v1/chat/completions?key={tenant.raw}", CHAT, headers=JSON
    )
    assert status == 401
    error = json.loads(data)["error"]
    assert error["code"] == "missing_api_key"
    assert "Gemini paths only" in error["message"]
    assert tenant.raw not in data.decode()
    # The same key in the header works.
    status, _, _ = raw_request(
        gw,
        "POST",
        "/v1/chat/completions",
        CHAT,
        headers={**JSON, "Authorization": f"Bearer {tenant.raw}"},
    )
    assert status == 200


def test_anthropic_paths_refuse_a_key_given_only_in_the_query_string(gw, tenant):
    body = {**CHAT, "max_tokens": 8}
    headers = {**JSON, "anthropic-version": "2023-06-01"}
    status, _, data = raw_request(gw, "POST", f"/v1/messages?key={tenant.raw}", body, headers)
    assert status == 401
    answer = json.loads(data)
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "authentication_error"
    assert "Gemini paths only" in answer["error"]["message"]
    status, _, _ = raw_request(
        gw, "POST", "/v1/messages", body, {**headers, "x-api-key": tenant.raw}
    )
    assert status == 200


def test_gemini_paths_still_take_the_key_in_the_query_string(gw, tenant):
    path = f"/v1beta/models/sim-chat-small:generateContent?key={tenant.raw}"
    status, _, data = raw_request(gw, "POST", path, GEMINI_HELLO, JSON)
    assert status == 200 and json.loads(data)["candidates"]
    status, _, data = raw_request(gw, "GET", f"/v1/models?key={tenant.raw}")
    assert status == 200 and "models" in json.loads(data)
