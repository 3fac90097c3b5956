"""The Anthropic adapter against the official ``anthropic`` SDK, which must see the
same messages, events, tool calls and usage it would see from Anthropic, with a
fake gateway and through a real simulator node."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from gateway_bridge.protocols import anthropic as ap
from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    NOT_FOUND,
    OVERLOADED,
    RATE_LIMIT,
    UPSTREAM,
    GatewayError,
)
from tests.gateway_bridge.protocols.anthropic.common import (
    MODEL,
    TEXT_STREAM,
    TOOL_STREAM,
    USER,
    WEATHER_TOOL,
    parse,
    play,
    upstream_answer,
)
from tooling.simulator import protocol as node_protocol

# --------------------------------------------------------------------------- the official SDK


class FakeGateway:
    """An httpx transport that answers like the gateway would: parse with the
    adapter, answer from a canned node reply through the adapter."""

    def __init__(self, *, answer=None, chunks=None, error=None, stream_error_after=None):
        self.answer, self.chunks, self.error = answer, chunks, error
        self.stream_error_after = stream_error_after
        self.calls = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        try:
            if self.error is not None:
                raise self.error
            call = ap.parse_messages(json.loads(request.content), dict(request.headers))
        except GatewayError as err:
            status, raw = ap.error_response(err)
            return httpx2.Response(
                status, content=raw, headers={"content-type": "application/json"}
            )
        self.calls.append(call)
        node_protocol.parse_chat(call.body)  # what we forward is what a node accepts
        if not call.stream:
            raw = call.response.render(self.answer, call.response.usage_of(self.answer), call.model)
            return httpx2.Response(200, content=raw, headers={"content-type": "application/json"})
        if self.stream_error_after is not None:
            adapter = call.response
            raw = b"".join(
                adapter.stream_chunk(c, call.model) for c in self.chunks[: self.stream_error_after]
            )
            raw += adapter.stream_error(
                GatewayError(UPSTREAM, "upstream_dropped", "Node went away.")
            )
        else:
            raw = play(call, self.chunks)
        return httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"})


def client(gateway: FakeGateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="x",
        base_url="http://test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(gateway)),
    )


def test_sdk_plain_message_with_system_prompt():
    gateway = FakeGateway(answer=upstream_answer())
    message = client(gateway).messages.create(
        model=MODEL,
        max_tokens=100,
        system="You are terse.",
        messages=[{"role": "user", "content": "Weather?"}],
    )
    assert isinstance(message, anthropic.types.Message)
    assert message.id == "msg_3f2a"
    assert message.model == MODEL
    assert message.content[0].type == "text"
    assert message.content[0].text == "Sunny, 18 C."
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 176
    assert message.usage.cache_read_input_tokens == 1024
    assert message.usage.output_tokens == 9
    assert gateway.calls[0].body["messages"][0] == {"role": "system", "content": "You are terse."}


def test_sdk_streams_text_and_accumulates_the_final_message():
    gateway = FakeGateway(chunks=TEXT_STREAM)
    with client(gateway).messages.stream(model=MODEL, max_tokens=100, messages=[USER]) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert texts == ["Sunny", ", 18 C."]
    assert final.content[0].text == "Sunny, 18 C."
    assert final.stop_reason == "end_turn"
    # the real cumulative usage of message_delta wins over message_start's estimate
    assert final.usage.input_tokens == 8
    assert final.usage.cache_read_input_tokens == 32
    assert final.usage.cache_creation_input_tokens == 0
    assert final.usage.output_tokens == 5


def test_sdk_streamed_tool_call_then_tool_result_round_trip():
    gateway = FakeGateway(chunks=TOOL_STREAM)
    sdk = client(gateway)
    with sdk.messages.stream(
        model=MODEL, max_tokens=100, tools=[WEATHER_TOOL], messages=[USER]
    ) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    kinds = [b.type for b in final.content]
    assert kinds == ["text", "tool_use", "tool_use"]
    weather, clock = final.content[1], final.content[2]
    assert (weather.id, weather.name, weather.input) == (
        "toolu_9a",
        "get_weather",
        {"city": "Paris"},
    )
    assert (clock.name, clock.input) == ("get_time", {})
    assert final.usage.output_tokens == 20

    # the client answers the tool calls; the SDK sends its own message back
    gateway.answer = upstream_answer("It is sunny in Paris.")
    answer = sdk.messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER_TOOL, {"name": "get_time", "input_schema": {"type": "object"}}],
        messages=[
            USER,
            {"role": final.role, "content": final.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": weather.id, "content": "18 C"},
                    {"type": "tool_result", "tool_use_id": clock.id, "content": "12:00"},
                ],
            },
        ],
    )
    assert answer.content[0].text == "It is sunny in Paris."
    forwarded = gateway.calls[-1].body["messages"]
    assert [m["role"] for m in forwarded] == ["user", "assistant", "tool", "tool"]
    assert forwarded[1]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }
    assert forwarded[2] == {"role": "tool", "tool_call_id": "toolu_9a", "content": "18 C"}


def test_sdk_plain_tool_use_block():
    calls = [
        {
            "id": "call_x",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        }
    ]
    gateway = FakeGateway(answer=upstream_answer(None, calls, "tool_calls"))
    message = client(gateway).messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
        messages=[USER],
    )
    block = message.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    assert (block.id, block.input) == ("toolu_x", {"city": "Oslo"})
    assert message.stop_reason == "tool_use"
    assert gateway.calls[0].body["tool_choice"] == "required"


def test_sdk_sees_validation_errors_as_bad_request():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "AA"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(FakeGateway()).messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": [image]}]
        )
    assert caught.value.status_code == 400
    assert caught.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "messages.0.content.0.source.media_type: Input should be 'image/jpeg', "
        "'image/png', 'image/gif' or 'image/webp'",
    }


def test_sdk_older_style_sampling_fields_still_work():
    gateway = FakeGateway(answer=upstream_answer())
    client(gateway).messages.create(
        model=MODEL, max_tokens=100, messages=[USER], extra_body={"temperature": 0, "top_k": 3}
    )
    assert gateway.calls[0].body["temperature"] == 0
    assert gateway.calls[0].deterministic is True
    assert "top_k" not in gateway.calls[0].body


def test_sdk_prefill_and_thinking():
    gateway = FakeGateway(answer=upstream_answer("Helios)"))
    message = client(gateway).messages.create(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[USER, {"role": "assistant", "content": "The best answer is ("}],
    )
    assert message.content[0].text == "Helios)"
    assert gateway.calls[0].body["continue_final_message"] is True


@pytest.mark.parametrize(
    ("kind", "exc"),
    [
        (OVERLOADED, anthropic.OverloadedError),
        (RATE_LIMIT, anthropic.RateLimitError),
        (AUTHENTICATION, anthropic.AuthenticationError),
        (NOT_FOUND, anthropic.NotFoundError),
    ],
)
def test_sdk_maps_gateway_errors_to_its_exceptions(kind, exc):
    gateway = FakeGateway(error=GatewayError(kind, "code", "Nope."))
    with pytest.raises(exc) as caught:
        client(gateway).messages.create(model=MODEL, max_tokens=100, messages=[USER])
    assert caught.value.body["error"]["message"] == "Nope."


def test_sdk_raises_on_a_stream_that_breaks():
    gateway = FakeGateway(chunks=TEXT_STREAM, stream_error_after=2)
    texts = []
    sdk = client(gateway)
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        sdk.messages.stream(model=MODEL, max_tokens=100, messages=[USER]) as s,
    ):
        texts.extend(s.text_stream)
    assert texts == ["Sunny"]
    assert "Node went away." in str(caught.value)


def test_sdk_count_tokens():
    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages/count_tokens"
        return httpx2.Response(200, content=ap.count_tokens(json.loads(request.content)))

    sdk = anthropic.Anthropic(
        api_key="x",
        base_url="http://test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    result = sdk.messages.count_tokens(model=MODEL, messages=[USER], system="Be brief.")
    assert result.input_tokens == parse(system="Be brief.").prompt_tokens_estimate


# --------------------------------------------------------------------------- a real node


@pytest.fixture(scope="module")
def node():
    from tests.inference_node.server_helpers import inprocess_node

    with inprocess_node("--profile", "instant", "--seed", "3") as running:
        yield running


class NodeGateway:
    """parse → the simulator node over HTTP (as the gateway forwards) → adapter."""

    def __init__(self, node):
        self.node = node
        self.calls = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        call = ap.parse_messages(json.loads(request.content), dict(request.headers))
        self.calls.append(call)
        upstream = {**call.body, "model": "sim-chat-small"}
        if not call.stream:
            status, _, answer = self.node.post("/v1/chat/completions", upstream)
            assert status == 200, answer
            raw = call.response.render(answer, call.response.usage_of(answer), call.model)
            return httpx2.Response(200, content=raw, headers={"content-type": "application/json"})
        upstream["stream_options"] = {"include_usage": True}
        chunks, done = self.node.stream("/v1/chat/completions", upstream)
        assert done
        return httpx2.Response(
            200, content=play(call, chunks), headers={"content-type": "text/event-stream"}
        )


CONVERSATION = [
    {"role": "user", "content": "How do I rotate an API key?"},
    {"role": "assistant", "content": "Open Keys and press Rotate."},
    {"role": "user", "content": [{"type": "text", "text": "And revoke one?"}]},
]


def test_sdk_through_a_real_node_plain_and_streamed_usage_matches_the_node(node):
    gateway = NodeGateway(node)
    sdk = client(gateway)
    system = "You are the support assistant of a token-billing console. " * 8
    message = sdk.messages.create(model=MODEL, max_tokens=12, system=system, messages=CONVERSATION)
    assert message.content[0].text
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 12
    prompt = message.usage.input_tokens + message.usage.cache_read_input_tokens
    assert prompt == gateway.calls[0].prompt_tokens_estimate  # the estimate is the node's count

    with sdk.messages.stream(
        model=MODEL, max_tokens=12, system=system, messages=CONVERSATION
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text
    assert final.usage.output_tokens == 12
    # the second call reuses the node's prefix cache: reads are their own class
    assert final.usage.cache_read_input_tokens > 0
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == prompt
