"""What a client gets wrong with the Responses API, answered in OpenAI's error
shape with the right status, and a stream the client cuts: billed for what
was generated, nothing left reserved, nothing stored."""

from __future__ import annotations

import http.client
import json
import socket

import openai
import pytest

from tests.gateway_bridge.conftest import register_node
from tests.gateway_bridge.test_gateway_faults import reserved_on, slow_node  # noqa: F401

FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}


def client(gw, raw) -> openai.OpenAI:
    return openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "invalid_value"),
        ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, "input[0]", "unsupported"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", "invalid_value"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", "missing_required_parameter"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]}, "tools[0].parameters", "invalid_function_parameters"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"properties": []}}]}, "tools[0].parameters", "invalid_function_parameters"),
        ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name", "invalid_value"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0]", "unsupported"),
        ({"tools": [FUNCTION], "tool_choice": {"type": "web_search"}}, "tool_choice", "unsupported"),
        ({"tools": [FUNCTION], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice", "invalid_value"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", "invalid_value"),
        ({"max_output_tokens": 0}, "max_output_tokens", "integer_below_min_value"),
        ({"background": True}, "background", "unsupported_parameter"),
        ({"input": []}, "input", "empty_array"),
    ],
)  # fmt: skip
def test_bad_requests_get_openai_errors(gw, tenant, fields, param, code):
    with pytest.raises(openai.BadRequestError) as refused:
        client(gw, tenant.raw).responses.create(
            model="sim-chat-small", input="Hello", extra_body=fields
        )
    error = refused.value.body
    assert refused.value.status_code == 400
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")


def test_a_coding_agents_default_tools_and_unknown_fields_are_dropped_and_named(gw, tenant):
    # Codex sends its hosted web search and a namespace of sub-agent functions
    # with every turn; a self-hosted node cannot run them
    codex_tools = [
        FUNCTION,
        {"type": "namespace", "name": "multi_agent_v1", "tools": [FUNCTION]},
        {"type": "web_search", "external_web_access": False},
    ]
    raw = client(gw, tenant.raw).responses.with_raw_response.create(
        model="sim-chat-small",
        input="Hello",
        tools=codex_tools,
        extra_body={"frobnicate": 1},
    )
    assert raw.http_response.status_code == 200
    assert raw.parse().output  # the node's answer: a call of the function
    assert raw.headers["x-gateway-dropped"] == (
        "frobnicate: a field the translation does not carry; "
        "tools[1]: the 'namespace' tool; tools[2]: the 'web_search' tool"
    )
    plain = client(gw, tenant.raw).responses.with_raw_response.create(
        model="sim-chat-small", input="Hello", tools=[FUNCTION]
    )
    assert "x-gateway-dropped" not in plain.headers


def test_unknown_previous_response_and_wrong_method(gw, tenant):
    c = client(gw, tenant.raw)
    with pytest.raises(openai.NotFoundError) as missing:
        c.responses.create(
            model="sim-chat-small", previous_response_id="resp_doesnotexist", input="Hi"
        )
    assert missing.value.body["code"] == "previous_response_not_found"
    assert missing.value.body["param"] == "previous_response_id"
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request("POST", "/v1/responses/resp_x", headers={"Authorization": f"Bearer {tenant.raw}"})
    resp = conn.getresponse()
    assert resp.status == 405 and resp.getheader("allow") == "GET, DELETE"
    assert json.loads(resp.read())["error"]["code"] == "method_not_allowed"
    conn.close()


def test_a_stream_the_client_cuts_is_billed_for_what_was_generated(
    tenant,
    start_gateway,
    slow_node,  # noqa: F811
):
    tenant.node.delete()
    register_node(slow_node.base_url, name="slow")
    key, raw = tenant.new_key(spend_cap_daily=10**12)
    gw = start_gateway()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    body = {
        "model": "sim-chat-small",
        "input": "Write a long story about the sea.",
        "max_output_tokens": 400,
        "stream": True,
    }
    conn.request(
        "POST",
        "/v1/responses",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    assert resp.status == 200
    response_id = None
    deltas = 0
    while deltas < 10:
        line = resp.fp.readline()
        if line.startswith(b"data: "):
            event = json.loads(line[6:])
            response_id = response_id or event.get("response", {}).get("id")
            deltas += event["type"] == "response.output_text.delta"
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    [event] = gw.emitter.wait_for(1, timeout=15)
    assert event["status_code"] == 499 and event["error_type"] == "client_disconnected"
    assert event["endpoint"] == "responses"
    assert 5 <= event["output_tokens"] < 100  # what was generated, not the budget
    assert reserved_on(gw, key) == 0
    with pytest.raises(openai.NotFoundError):  # an unfinished response is not stored
        client(gw, raw).responses.retrieve(response_id)
