"""The simulator's Anthropic Messages front-end, through the official ``anthropic``
SDK and raw HTTP: answers, the exact stream, prompt caching, thinking, tools,
media counting, validation and errors in Anthropic's shape."""

from __future__ import annotations

import base64
import http.client
import json
import time

import anthropic
import pytest

from console.kernel.tokens import chat_prompt_tokens, count_tokens, media_tokens
from tests.inference_node.server_helpers import (
    TOKEN,
    inprocess_node,
    metric_value,
    parse_named_sse,
)

MODEL = "claude-sim"
VERSION = {"anthropic-version": "2023-06-01"}
SYSTEM = "You are the support assistant of a token-billing console. Answer briefly. " * 4
WEATHER = {
    "name": "get_weather",
    "description": "The weather of a city today.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def node():
    with inprocess_node("--token", TOKEN, "--models", f"gpt-sim,{MODEL},text-embed-sim") as node:
        yield node


@pytest.fixture(autouse=True)
def clean(node):
    node.post("/admin/reset")
    yield
    node.post("/admin/faults", {"fault_429_rate": 0.0, "fault_503_rate": 0.0})


@pytest.fixture
def client(node):
    return anthropic.Anthropic(base_url=node.base_url, api_key=TOKEN, max_retries=0, timeout=10)


def ask(node, body: dict, path: str = "/v1/messages", headers=VERSION):
    return node.post(path, {"model": MODEL, **body}, headers=headers)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def system_tokens(text: str) -> int:
    """Tokens of a system message alone (the template's generation prompt left out)."""
    return len(chat_prompt_tokens([{"role": "system", "content": text}])) - 3


def test_a_plain_message_through_the_sdk(node, client):
    message = client.messages.create(
        model=MODEL, max_tokens=12, messages=user("Tell me about invoices.")
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.model == MODEL
    assert [block.type for block in message.content] == ["text"]
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    usage = message.usage
    assert usage.output_tokens == 12 == count_tokens(message.content[0].text)
    counted = client.messages.count_tokens(model=MODEL, messages=user("Tell me about invoices."))
    assert usage.input_tokens == counted.input_tokens > 0
    assert usage.cache_creation_input_tokens == usage.cache_read_input_tokens == 0
    assert usage.cache_creation.ephemeral_5m_input_tokens == 0
    assert metric_value(node.metrics(), "vllm:generation_tokens_total", MODEL) == 12
    again = client.messages.create(
        model=MODEL, max_tokens=12, messages=user("Tell me about invoices.")
    )
    assert again.content[0].text == message.content[0].text  # deterministic


def test_a_short_answer_ends_its_turn(client):
    message = client.messages.create(model=MODEL, max_tokens=1000, messages=user("Hi"))
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == count_tokens(message.content[0].text) < 1000


def test_the_stream_is_anthropics_exact_event_sequence(node):
    body = {"max_tokens": 8, "messages": user("Stream a short answer.")}
    _, _, plain = ask(node, body)
    status, headers, raw = node.raw(
        "POST",
        "/v1/messages",
        json.dumps({"model": MODEL, **body, "stream": True}).encode(),
        {**VERSION, "authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
    )
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = parse_named_sse(raw.decode())
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        *["content_block_delta"] * 8,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["output_tokens"] == 1
    assert start["usage"]["input_tokens"] == plain["usage"]["input_tokens"]
    assert events[2][1]["content_block"] == {"type": "text", "text": ""}
    text = "".join(data["delta"]["text"] for name, data in events[3:11])
    assert text == plain["content"][0]["text"]
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 8
    assert delta["usage"]["input_tokens"] == plain["usage"]["input_tokens"]
    assert delta["usage"]["cache_read_input_tokens"] == 0


def test_the_sdk_stream_gives_the_same_message(client):
    with client.messages.stream(model=MODEL, max_tokens=9, messages=user("Stream it")) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    plain = client.messages.create(model=MODEL, max_tokens=9, messages=user("Stream it"))
    assert streamed_text == plain.content[0].text == final.content[0].text
    assert final.usage.output_tokens == 9 and final.stop_reason == "max_tokens"


def test_a_cache_breakpoint_writes_then_reads_the_prefix(client):
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    prefix = system_tokens(SYSTEM)

    def call(question: str):
        return client.messages.create(
            model=MODEL, max_tokens=5, system=system, messages=user(question)
        ).usage

    first = call("How do I rotate a key?")
    assert first.cache_creation_input_tokens == prefix
    assert first.cache_creation.ephemeral_5m_input_tokens == prefix
    assert first.cache_read_input_tokens == 0
    total = client.messages.count_tokens(
        model=MODEL, system=system, messages=user("How do I rotate a key?")
    ).input_tokens
    assert first.input_tokens == total - prefix
    second = call("Where are my invoices?")
    assert second.cache_read_input_tokens == prefix
    assert second.cache_creation_input_tokens == 0
    assert second.input_tokens > 0


def test_without_a_breakpoint_nothing_is_cached(client):
    for _ in range(2):
        usage = client.messages.create(
            model=MODEL, max_tokens=5, system=SYSTEM, messages=user("Same question")
        ).usage
        assert usage.cache_creation_input_tokens == usage.cache_read_input_tokens == 0


def test_a_prefix_under_the_minimum_is_not_cached(client):
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):
        usage = client.messages.create(
            model=MODEL, max_tokens=5, system=system, messages=user("Hi")
        ).usage
        assert usage.cache_creation_input_tokens == usage.cache_read_input_tokens == 0


def test_one_hour_and_five_minute_breakpoints_split_the_write(client):
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    question = "Please explain how the monthly invoice is computed for my organization."
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": question, "cache_control": {"type": "ephemeral"}}],
        }
    ]
    usage = client.messages.create(
        model=MODEL, max_tokens=5, system=system, messages=messages
    ).usage
    total = client.messages.count_tokens(model=MODEL, system=system, messages=messages)
    assert usage.cache_creation.ephemeral_1h_input_tokens == system_tokens(SYSTEM)
    assert usage.cache_creation.ephemeral_5m_input_tokens > 0
    assert usage.cache_creation_input_tokens == (
        usage.cache_creation.ephemeral_1h_input_tokens
        + usage.cache_creation.ephemeral_5m_input_tokens
    )
    assert usage.input_tokens == 3  # only the generation prompt follows the last breakpoint
    assert usage.input_tokens + usage.cache_creation_input_tokens == total.input_tokens


def test_a_conversation_reads_what_its_previous_turn_wrote(client):
    def marked(text: str) -> dict:
        block = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
        return {"role": "user", "content": [block]}

    first_turn = [marked("What is the price of one million input tokens?")]
    first = client.messages.create(model=MODEL, max_tokens=5, system=SYSTEM, messages=first_turn)
    written = first.usage.cache_creation_input_tokens
    assert written > 0
    second_turn = [
        {
            "role": "user",
            "content": [{"type": "text", "text": first_turn[0]["content"][0]["text"]}],
        },
        {"role": "assistant", "content": first.content[0].text},
        marked("And of output tokens?"),
    ]
    second = client.messages.create(
        model=MODEL, max_tokens=5, system=SYSTEM, messages=second_turn
    ).usage
    assert second.cache_read_input_tokens == written
    assert second.cache_creation_input_tokens > 0


def test_cache_entries_expire_after_their_scaled_lifetime():
    with inprocess_node("--token", TOKEN, "--cache-ttl-scale", "0.002") as node:  # 5 min = 0.6 s
        system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        body = {"model": "sim-chat-small", "max_tokens": 3, "system": system}

        def usage(question: str) -> dict:
            status, _, data = node.post(
                "/v1/messages", {**body, "messages": user(question)}, headers=VERSION
            )
            assert status == 200, data
            return data["usage"]

        assert usage("one")["cache_creation_input_tokens"] > 0
        assert usage("two")["cache_read_input_tokens"] > 0
        time.sleep(0.8)
        late = usage("three")
        assert late["cache_read_input_tokens"] == 0
        assert late["cache_creation_input_tokens"] > 0


def test_thinking_comes_first_signed_and_counts_as_output(client):
    message = client.messages.create(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=user("Think about caching."),
    )
    thinking, text = message.content
    assert thinking.type == "thinking" and text.type == "text"
    assert thinking.thinking and thinking.signature
    thought = count_tokens(thinking.thinking)
    assert message.usage.output_tokens == thought + count_tokens(text.text)
    assert message.usage.output_tokens_details.thinking_tokens == thought


def test_adaptive_thinking_stays_within_max_tokens(client):
    message = client.messages.create(
        model=MODEL, max_tokens=20, thinking={"type": "adaptive"}, messages=user("Think")
    )
    assert message.content[0].type == "thinking"
    assert message.usage.output_tokens_details.thinking_tokens <= 10
    assert message.usage.output_tokens == 20
    assert message.stop_reason == "max_tokens"


def test_a_streamed_thinking_block_ends_with_its_signature(node):
    body = {
        "model": MODEL,
        "max_tokens": 1500,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": user("Think"),
    }
    headers = {**VERSION, "authorization": f"Bearer {TOKEN}"}
    _, _, raw = node.raw("POST", "/v1/messages", json.dumps(body).encode(), headers)
    events = [data for _, data in parse_named_sse(raw.decode())]
    blocks = [e for e in events if e["type"].startswith("content_block")]
    assert blocks[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    kinds = [e["delta"]["type"] for e in blocks if e["type"] == "content_block_delta"]
    thinking_deltas = kinds.index("signature_delta")
    assert thinking_deltas > 0 and set(kinds[:thinking_deltas]) == {"thinking_delta"}
    assert set(kinds[thinking_deltas + 1 :]) == {"text_delta"}
    stop = next(i for i, e in enumerate(blocks) if e["type"] == "content_block_stop")
    assert blocks[stop - 1]["delta"]["type"] == "signature_delta"
    assert blocks[stop + 1]["content_block"]["type"] == "text"


def test_a_stop_sequence_ends_the_text_and_is_reported(client):
    plain = client.messages.create(model=MODEL, max_tokens=60, messages=user("Say things"))
    text = plain.content[0].text
    stop = text.split()[3]
    cut = client.messages.create(
        model=MODEL, max_tokens=60, stop_sequences=[stop], messages=user("Say things")
    )
    assert cut.stop_reason == "stop_sequence"
    assert cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.find(stop)]


def test_tools_give_a_tool_use_block_then_an_answer_to_its_result(client):
    question = user("What is the weather in Paris?")
    call = client.messages.create(model=MODEL, max_tokens=100, tools=[WEATHER], messages=question)
    assert call.stop_reason == "tool_use"
    (block,) = call.content
    assert block.type == "tool_use" and block.id.startswith("toolu_")
    assert block.name == "get_weather" and block.input == {"city": "Paris"}
    history = [
        *question,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "Sunny"}],
        },
    ]
    answer = client.messages.create(model=MODEL, max_tokens=1000, tools=[WEATHER], messages=history)
    assert answer.stop_reason == "end_turn"
    assert "Sunny" in answer.content[0].text


def test_a_streamed_tool_call_sends_its_input_as_json_deltas(client):
    with client.messages.stream(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=user("the weather in Lyon please"),
    ) as stream:
        partial = [e.delta.partial_json for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert json.loads("".join(partial)) == final.content[0].input == {"city": "Lyon"}
    assert final.stop_reason == "tool_use"


def test_naming_several_tools_calls_each_in_parallel_unless_disabled(client):
    tools = [
        WEATHER,
        {"name": "get_time", "description": "The local time of a city.",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}},
    ]  # fmt: skip
    ask = user("Use get_time and get_weather for Oslo")
    with client.messages.stream(model=MODEL, max_tokens=200, tools=tools, messages=ask) as stream:
        started = [e.content_block for e in stream if e.type == "content_block_start"]
        final = stream.get_final_message()
    # One tool_use block per named tool, in the order the message names them.
    assert [b.name for b in final.content] == ["get_time", "get_weather"]
    assert [b.name for b in started] == ["get_time", "get_weather"]
    assert [b.input for b in final.content] == [{"city": "Oslo"}, {"city": "Oslo"}]
    assert len({b.id for b in final.content}) == 2 and final.stop_reason == "tool_use"
    one = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=tools,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=ask,
    )
    assert len(one.content) == 1 and one.content[0].type == "tool_use"


def _image_block(data: bytes | None = None, url: str | None = None) -> dict:
    if url:
        return {"type": "image", "source": {"type": "url", "url": url}}
    encoded = base64.b64encode(data).decode()
    source = {"type": "base64", "media_type": "image/png", "data": encoded}
    return {"type": "image", "source": source}


@pytest.mark.parametrize(
    ("block", "cost"),
    [
        (_image_block(b"\x89PNG" + bytes(2996)), media_tokens(3000)),
        (_image_block(url="https://example.com/cat.png"), media_tokens(0)),
        (
            {
                "type": "document",
                "source": {
                    "type": "base64",
                    "media_type": "application/pdf",
                    "data": base64.b64encode(b"%PDF" + bytes(7496)).decode(),
                },
            },
            media_tokens(7500),
        ),
    ],
)
def test_images_and_documents_are_counted_by_the_media_rule(client, block, cost):
    text = {"type": "text", "text": "Describe this."}
    plain = client.messages.create(
        model=MODEL, max_tokens=3, messages=[{"role": "user", "content": [text]}]
    )
    with_media = client.messages.create(
        model=MODEL, max_tokens=3, messages=[{"role": "user", "content": [block, text]}]
    )
    assert with_media.usage.input_tokens - plain.usage.input_tokens == cost


def test_earlier_thinking_blocks_are_accepted_in_the_history(client):
    history = [
        *user("Hi"),
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me see.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "ZW5j"},
                {"type": "text", "text": "Hello!"},
            ],
        },
        *user("And now?"),
    ]
    message = client.messages.create(model=MODEL, max_tokens=5, messages=history)
    assert message.usage.output_tokens == 5


def test_the_model_list_takes_anthropics_shape_when_asked(node, client):
    models = list(client.models.list())
    assert [m.id for m in models] == ["gpt-sim", MODEL]  # chat models only
    assert models[0].type == "model" and models[0].display_name == "gpt-sim"
    status, _, page = node.request("GET", "/v1/models", headers=VERSION)
    assert status == 200
    assert page["has_more"] is False
    assert (page["first_id"], page["last_id"]) == ("gpt-sim", MODEL)
    assert set(page["data"][0]) >= {"type", "id", "display_name", "created_at"}
    assert client.models.retrieve(MODEL).id == MODEL
    status, _, openai_list = node.request("GET", "/v1/models")
    assert openai_list["object"] == "list"
    assert [m["id"] for m in openai_list["data"]] == ["gpt-sim", MODEL, "text-embed-sim"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": user("hi")}, "max_tokens: Field required"),
        ({"max_tokens": 5}, "messages: Field required"),
        ({"max_tokens": 5, "messages": [], "top": 1}, "top: Extra inputs are not permitted"),
        (
            {"max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]},
            "messages.0.role: Input should be 'user', 'assistant' or 'system'",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [
                    *user("hi"),
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                    *user("no result"),
                ],
            },
            "`tool_use` ids were found without `tool_result` blocks",
        ),
        (
            {
                "max_tokens": 2000,
                "thinking": {"type": "enabled", "budget_tokens": 2000},
                "messages": user("hi"),
            },
            "`max_tokens` must be greater than `thinking.budget_tokens`",
        ),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "Input tag 'video' found using 'type' does not match",
        ),
    ],
)
def test_invalid_requests_get_anthropics_error_shape(node, body, message):
    status, headers, error = ask(node, body)
    assert status == 400
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert message in error["error"]["message"]
    assert error["request_id"].startswith("req_") and headers["request-id"]


def test_the_version_header_is_required(node):
    status, _, error = ask(node, {"max_tokens": 5, "messages": user("hi")}, headers={})
    assert status == 400
    assert error["error"] == {
        "type": "invalid_request_error",
        "message": "anthropic-version: header is required",
    }


def test_an_unknown_model_is_not_found(client):
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.messages.create(model="claude-nope", max_tokens=5, messages=user("hi"))
    assert raised.value.body["error"]["type"] == "not_found_error"


def test_a_prompt_past_the_context_is_refused(client):
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model=MODEL, max_tokens=8190, messages=user("hi there"))
    assert "exceed context limit" in raised.value.body["error"]["message"]


@pytest.mark.parametrize(
    ("field", "status", "kind"),
    [("fault_429_rate", 429, "rate_limit_error"), ("fault_503_rate", 503, "overloaded_error")],
)
def test_injected_faults_answer_in_anthropics_format(node, field, status, kind):
    node.post("/admin/faults", {field: 1.0})
    got, headers, error = ask(node, {"max_tokens": 5, "messages": user("hi")})
    assert got == status
    assert error["error"]["type"] == kind
    assert headers["retry-after"] == "1"


def test_a_dropped_stream_stops_after_the_set_tokens(node):
    node.post("/admin/faults", {"drop_after_tokens": 2})
    body = json.dumps({"model": MODEL, "max_tokens": 8, "stream": True, "messages": user("hi")})
    conn = node.connection()
    try:
        headers = {**VERSION, "authorization": f"Bearer {TOKEN}"}
        conn.request("POST", "/v1/messages", body=body, headers=headers)
        response = conn.getresponse()
        assert response.status == 200
        received, dropped = b"", False
        try:
            while chunk := response.read1(65536):
                received += chunk
        except http.client.IncompleteRead:
            dropped = True
    finally:
        conn.close()
        node.post("/admin/faults", {"drop_after_tokens": 0})
    assert dropped
    assert received.count(b"event: content_block_delta") == 2
    assert b"message_stop" not in received


def test_the_prompt_counts_as_the_gateway_estimates_it(client):
    from gateway_bridge.protocols.anthropic.translate import count_tokens_request

    body = {
        "model": MODEL,
        "max_tokens": 5,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        "tools": [WEATHER],
        "messages": [
            *user("Weather in Paris?"),
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    }
    usage = client.messages.create(**body).usage
    assert usage.input_tokens == count_tokens_request(body)[1]


def test_omitted_thinking_sends_only_its_signature(client):
    message = client.messages.create(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024, "display": "omitted"},
        messages=user("Think about caching."),
    )
    thinking = message.content[0]
    assert thinking.type == "thinking" and thinking.thinking == "" and thinking.signature
    assert message.usage.output_tokens_details.thinking_tokens > 0
