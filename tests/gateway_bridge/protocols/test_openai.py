"""The OpenAI adapter: requests validated as OpenAI validates them, the node's answers
passed back with the public model name and the billed usage, and the official SDK
reading all of it (plain, streamed with and without usage, tool calls, errors)."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.kernel import tokens as tokenizer
from gateway_bridge.protocols import base
from gateway_bridge.protocols import openai as adapter
from gateway_bridge.protocols.base import GatewayError, ModelInfo
from gateway_bridge.usage_mapping import TokenUsage, from_openai
from tooling.simulator import protocol as node_protocol

USER = [{"role": "user", "content": "Hello there"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def chat(**fields) -> dict:
    return {"model": "gpt-test", "messages": USER, **fields}


def rejected(parse, body) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        parse(body)
    assert caught.value.kind == base.INVALID_REQUEST
    assert caught.value.status == 400
    return caught.value


# -- validation ------------------------------------------------------------------------------

TOOL_TURN = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    },
]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ([1, 2], None, "invalid_json"),
        ({"messages": USER}, "model", "missing_model"),
        ({"model": 5, "messages": USER}, "model", "invalid_type"),
        ({"model": "m"}, "messages", "missing_required_parameter"),
        ({"model": "m", "messages": []}, "messages", "empty_array"),
        ({"model": "m", "messages": "hi"}, "messages", "invalid_type"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role",
         "invalid_value"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role",
         "missing_required_parameter"),
        ({"model": "m", "messages": [{"role": "user"}]}, "messages[0].content",
         "missing_required_parameter"),
        ({"model": "m", "messages": [{"role": "assistant", "content": None}]},
         "messages[0].content", "missing_required_parameter"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content",
         "invalid_type"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
         "messages[0].content[0].text", "invalid_type"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "video"}]}]},
         "messages[0].content[0].type", "invalid_value"),
        ({"model": "m", "messages": [{"role": "tool", "content": "x", "tool_call_id": "a"}]},
         "messages[0].role", "invalid_value"),
        ({"model": "m", "messages": [*TOOL_TURN, {"role": "tool", "content": "x"}]},
         "messages[2].tool_call_id", "missing_required_parameter"),
        ({"model": "m", "messages": [*TOOL_TURN, {"role": "tool", "content": "x",
                                                  "tool_call_id": "call_9"}]},
         "messages[2].tool_call_id", "invalid_value"),
        ({"model": "m", "messages": [*TOOL_TURN, {"role": "user", "content": "and?"}]},
         "messages", "invalid_value"),
        ({"model": "m", "messages": [{"role": "function", "content": "x"}]}, "messages[0].name",
         "missing_required_parameter"),
        (chat(n=0), "n", "integer_below_min_value"),
        (chat(n=17), "n", "integer_above_max_value"),
        (chat(n=1.5), "n", "invalid_type"),
        (chat(max_tokens=0), "max_tokens", "integer_below_min_value"),
        (chat(max_completion_tokens="9"), "max_completion_tokens", "invalid_type"),
        (chat(temperature=2.5), "temperature", "decimal_above_max_value"),
        (chat(temperature="hot"), "temperature", "invalid_type"),
        (chat(top_p=-0.1), "top_p", "decimal_below_min_value"),
        (chat(presence_penalty=3), "presence_penalty", "decimal_above_max_value"),
        (chat(seed="x"), "seed", "invalid_type"),
        (chat(stop=["a", "b", "c", "d", "e"]), "stop", "array_above_max_length"),
        (chat(stop=[1]), "stop[0]", "invalid_type"),
        (chat(stream="yes"), "stream", "invalid_type"),
        (chat(stream_options={"include_usage": True}), "stream_options", "invalid_value"),
        (chat(stream=True, stream_options={"usage": True}), "stream_options.usage",
         "unknown_parameter"),
        (chat(tools=[]), "tools", "empty_array"),
        (chat(tools=[{"type": "code"}]), "tools[0].type", "invalid_value"),
        (chat(tools=[{"type": "function", "function": {}}]), "tools[0].function.name",
         "missing_required_parameter"),
        (chat(tools=[{"type": "function", "function": {"name": "bad name"}}]),
         "tools[0].function.name", "invalid_value"),
        (chat(tool_choice="auto"), "tool_choice", "invalid_value"),
        (chat(tools=[WEATHER], tool_choice="sometimes"), "tool_choice", "invalid_value"),
        (chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "x"}}),
         "tool_choice", "invalid_value"),
        (chat(parallel_tool_calls=True), "parallel_tool_calls", "invalid_value"),
        (chat(response_format={"type": "yaml"}), "response_format.type", "invalid_value"),
        (chat(response_format={"type": "json_schema"}), "response_format.json_schema",
         "missing_required_parameter"),
        (chat(top_logprobs=3), "top_logprobs", "invalid_value"),
        (chat(logit_bias={"50256": 200}), "logit_bias", "invalid_value"),
        (chat(service_tier="gold"), "service_tier", "invalid_value"),
        (chat(functions=[]), "functions", "unsupported_parameter"),
        (chat(frobnicate=1), "frobnicate", "unknown_parameter"),
    ],
)  # fmt: skip
def test_chat_validation(body, param, code):
    err = rejected(adapter.parse_chat, body)
    assert (err.param, err.code) == (param, code)


def test_unknown_field_is_openais_message():
    err = rejected(adapter.parse_chat, chat(temprature=0.5))
    assert err.message == "Unrecognized request argument supplied: temprature"
    body = json.loads(adapter.error_body(err))
    assert body == {
        "error": {
            "message": "Unrecognized request argument supplied: temprature",
            "type": "invalid_request_error",
            "param": "temprature",
            "code": "unknown_parameter",
        }
    }


@pytest.mark.parametrize("kind", ["image_url", "input_audio", "file"])
def test_media_parts_without_their_data_are_refused_clearly(kind):
    content = [{"type": "text", "text": "what is this?"}, {"type": kind, kind: {}}]
    err = rejected(adapter.parse_chat, chat(messages=[{"role": "user", "content": content}]))
    assert err.param.startswith(f"messages[0].content[1].{kind}")
    assert err.code == "missing_required_parameter"


def test_media_parts_pass_to_the_channel_and_count_as_tokens():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 7500}}
    plain = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "what?"}]}])
    with_image = chat(
        messages=[{"role": "user", "content": [{"type": "text", "text": "what?"}, image]}]
    )
    req = adapter.parse_chat(with_image)
    assert req.body["messages"][0]["content"][1] == image
    # 85 + one token per 750 bytes of the decoded image (console.kernel.tokens' media rule).
    extra = req.prompt_tokens_estimate - adapter.parse_chat(plain).prompt_tokens_estimate
    assert extra == 85 + 7500 * 3 // 4 // 750


def test_wrong_type_message_reads_like_openai():
    err = rejected(adapter.parse_chat, chat(temperature="hot"))
    assert (
        err.message
        == "Invalid type for 'temperature': expected a decimal, but got a string instead."
    )
    err = rejected(adapter.parse_chat, chat(n=20))
    assert err.message == (
        "Invalid 'n': integer above maximum value. Expected a value <= 16, but got 20 instead."
    )


def test_a_full_valid_chat_request_is_accepted():
    body = chat(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "system", "content": [{"type": "text", "text": "Rules."}]},
            {"role": "user", "name": "ann", "content": "Weather in Paris?"},
            *TOOL_TURN[1:],
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "function", "name": "legacy", "content": None},
            {"role": "user", "content": "Thanks"},
        ],
        n=1,
        max_tokens=50,
        temperature=0.2,
        top_p=0.9,
        seed=3,
        stop="END",
        stream=True,
        stream_options={"include_usage": True},
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        user="u-1",
        logprobs=True,
        top_logprobs=2,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        logit_bias={"50256": -100},
        metadata={"team": "a"},
        store=False,
        service_tier="auto",
    )
    call = adapter.parse_chat(body)
    assert call.stream and call.client_wants_usage
    assert call.max_output_tokens == 50
    assert call.extra == {"tool_names": ["get_weather"]}


# -- translation -----------------------------------------------------------------------------


def test_chat_call_request_fields():
    messages = [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "x"}],
        },
    ]
    call = adapter.parse_chat(
        {"model": "gpt-test", "messages": messages, "max_tokens": 20, "metadata": {"a": "b"},
         "store": True, "service_tier": "auto", "temperature": None}
    )  # fmt: skip
    assert call.protocol == "openai"
    assert call.endpoint == "chat.completions"
    assert call.upstream_path == "/v1/chat/completions"
    assert call.model == "gpt-test"
    assert call.body == {"model": "gpt-test", "messages": messages, "max_tokens": 20}
    assert call.stream is False
    assert call.client_wants_usage is True  # plain answers always carry usage
    assert call.max_output_tokens == 20
    assert call.prompt_tokens_estimate == len(tokenizer.chat_prompt_tokens(messages))
    assert call.prefix_text == (
        "<|start|>system<|sep|>You are terse.<|end|><|start|>user<|sep|>Hi\nx<|end|>"
    )
    assert call.deterministic is False


def test_max_completion_tokens_wins_and_is_forwarded_as_max_tokens():
    call = adapter.parse_chat(chat(max_tokens=10, max_completion_tokens=30))
    assert call.max_output_tokens == 30
    assert call.body["max_tokens"] == 30
    assert "max_completion_tokens" not in call.body
    assert adapter.parse_chat(chat()).max_output_tokens is None


def test_prefix_text_is_bounded_and_starts_with_the_system_prompt():
    system = "Long shared policy. " * 1000
    call = adapter.parse_chat(chat(messages=[{"role": "system", "content": system}, *USER]))
    assert len(call.prefix_text) == adapter.PREFIX_CHARS
    assert call.prefix_text.startswith("<|start|>system<|sep|>Long shared policy.")


def test_tools_count_in_the_prompt_estimate_as_the_node_counts_them():
    plain = adapter.parse_chat(chat())
    with_tools = adapter.parse_chat(chat(tools=[WEATHER]))
    definition = json.dumps([WEATHER], separators=(",", ":"))
    assert with_tools.prompt_tokens_estimate == (
        plain.prompt_tokens_estimate + 3 + tokenizer.count_tokens("tools" + definition)
    )  # <|start|> tools <|sep|> definitions <|end|>
    assert with_tools.body["tools"] == [WEATHER]


def test_the_estimate_is_what_the_node_counts_for_a_tool_conversation():
    messages = [
        {"role": "system", "content": "Use tools."},
        *TOOL_TURN,
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    call = adapter.parse_chat(chat(messages=messages, tools=[WEATHER], max_tokens=9))
    node = node_protocol.parse_chat(call.body)  # what we forward is what a node accepts
    assert len(node.prompt_ids) == call.prompt_tokens_estimate
    assert node.max_tokens == 9


@pytest.mark.parametrize(
    ("fields", "deterministic"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0, "n": 1}, True),
        ({"seed": 42, "temperature": 1}, True),
        ({"seed": 42, "n": 2}, False),
        ({"temperature": 0.7}, False),
        ({}, False),
    ],
)
def test_deterministic(fields, deterministic):
    assert adapter.parse_chat(chat(**fields)).deterministic is deterministic


@pytest.mark.parametrize(
    ("fields", "wants"),
    [
        ({"stream": True}, False),
        ({"stream": True, "stream_options": {"include_usage": False}}, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True),
        ({"stream": False}, True),
    ],
)
def test_client_wants_usage(fields, wants):
    call = adapter.parse_chat(chat(**fields))
    assert call.client_wants_usage is wants
    assert call.response.wants_usage is wants


def test_completion_request():
    call = adapter.parse_completion(
        {"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "echo": False, "seed": 1}
    )
    assert (call.endpoint, call.upstream_path) == ("completions", "/v1/completions")
    assert call.prompt_tokens_estimate == tokenizer.count_tokens("Once upon a time")
    assert call.prefix_text == "Once upon a time"
    assert call.max_output_tokens == 8
    assert call.deterministic is True
    tokens = adapter.parse_completion({"model": "m", "prompt": [[1, 2, 3], [4, 5]]})
    assert tokens.prompt_tokens_estimate == 5
    many = adapter.parse_completion({"model": "m", "prompt": ["one two", "three"]})
    assert many.prompt_tokens_estimate == 2 + 2  # "one" " two", then "thre" "e"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "m"}, "prompt", "missing_required_parameter"),
        ({"model": "m", "prompt": 5}, "prompt", "invalid_value"),
        ({"model": "m", "prompt": "x", "logprobs": 9}, "logprobs", "integer_above_max_value"),
        ({"model": "m", "prompt": "x", "n": 3, "best_of": 2}, "best_of", "invalid_value"),
        ({"model": "m", "prompt": "x", "messages": []}, "messages", "unknown_parameter"),
    ],
)
def test_completion_validation(body, param, code):
    err = rejected(adapter.parse_completion, body)
    assert (err.param, err.code) == (param, code)


def test_embeddings_request():
    call = adapter.parse_embeddings({"model": "e", "input": ["alpha", "beta gamma"], "user": "u"})
    assert (call.endpoint, call.upstream_path) == ("embeddings", "/v1/embeddings")
    assert call.prompt_tokens_estimate == 2 + 3
    assert call.max_output_tokens == 0
    assert call.deterministic is True
    assert call.client_wants_usage is True
    assert adapter.parse_embeddings({"model": "e", "input": [7, 8, 9]}).prompt_tokens_estimate == 3


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "e"}, "input", "missing_required_parameter"),
        ({"model": "e", "input": ""}, "input", "invalid_value"),
        ({"model": "e", "input": []}, "input", "invalid_value"),
        ({"model": "e", "input": "x", "encoding_format": "hex"}, "encoding_format",
         "invalid_value"),
        ({"model": "e", "input": "x", "dimensions": 0}, "dimensions", "integer_below_min_value"),
        ({"model": "e", "input": "x", "stream": True}, "stream", "unknown_parameter"),
    ],
)  # fmt: skip
def test_embeddings_validation(body, param, code):
    err = rejected(adapter.parse_embeddings, body)
    assert (err.param, err.code) == (param, code)


@pytest.mark.parametrize(
    ("kind", "status", "type_"),
    [
        (base.INVALID_REQUEST, 400, "invalid_request_error"),
        (base.AUTHENTICATION, 401, "authentication_error"),
        (base.PAYMENT_REQUIRED, 402, "insufficient_quota"),
        (base.PERMISSION, 403, "permission_error"),
        (base.NOT_FOUND, 404, "invalid_request_error"),
        (base.RATE_LIMIT, 429, "rate_limit_error"),
        (base.UPSTREAM, 502, "server_error"),
        (base.OVERLOADED, 503, "server_error"),
        (base.INTERNAL, 500, "server_error"),
    ],
)
def test_error_response(kind, status, type_):
    err = GatewayError(kind, "some_code", "Something happened.", param="p")
    got_status, body = adapter.error_response(err)
    assert got_status == status
    assert json.loads(body) == {
        "error": {
            "message": "Something happened.",
            "type": type_,
            "param": "p",
            "code": "some_code",
        }
    }


def test_render_models():
    models = [ModelInfo("gpt-test", "GPT Test", 8192, "chat", 1700000000)]
    assert json.loads(adapter.render_models(models)) == {
        "object": "list",
        "data": [
            {"id": "gpt-test", "object": "model", "created": 1700000000, "owned_by": "system"}
        ],
    }


# -- answers ---------------------------------------------------------------------------------

NODE_USAGE = {
    "prompt_tokens": 40,
    "completion_tokens": 5,
    "total_tokens": 45,
    "prompt_tokens_details": {"cached_tokens": 32},
}


def node_chat(message: dict, finish: str = "stop") -> dict:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "upstream-llama",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": NODE_USAGE,
        "system_fingerprint": None,
    }


def node_stream(deltas: list[dict], finish: str, with_usage: bool = True) -> list[dict]:
    head = {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000}
    head["model"] = "upstream-llama"
    extra = {"usage": None} if with_usage else {}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}],
         **extra}
        for d in deltas
    ]  # fmt: skip
    final = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}
    chunks.append({**head, "choices": [final], **extra})
    if with_usage:
        chunks.append({**head, "choices": [], "usage": NODE_USAGE})
    return chunks


def streamed(call, chunks: list[dict], model: str = "gpt-test") -> bytes:
    out = call.response.stream_start(model)
    usage = None
    for c in chunks:
        if not c["choices"]:
            usage = from_openai(c["usage"])
        out += call.response.stream_chunk(c, model)
    return out + call.response.stream_end(usage, model)


def events(raw: bytes) -> list:
    frames = [f for f in raw.decode().split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    return [f[6:] if f[6:] == "[DONE]" else json.loads(f[6:]) for f in frames]


def test_render_replaces_model_and_writes_billed_usage():
    call = adapter.parse_chat(chat())
    upstream = node_chat({"role": "assistant", "content": "Hi!", "tool_calls": []})
    usage = TokenUsage(input=8, cache_read=32, output=5)
    body = json.loads(call.response.render(upstream, usage, "gpt-test"))
    assert body["model"] == "gpt-test"
    assert body["id"] == "chatcmpl-abc"
    assert body["choices"] == upstream["choices"]
    assert body["usage"] == {
        "prompt_tokens": 40,
        "completion_tokens": 5,
        "total_tokens": 45,
        "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert upstream["model"] == "upstream-llama"  # the node's answer is left alone


def test_embeddings_usage_has_no_completion_side():
    call = adapter.parse_embeddings({"model": "e", "input": "x"})
    upstream = {"object": "list", "data": [], "model": "up", "usage": {"prompt_tokens": 3}}
    body = json.loads(call.response.render(upstream, TokenUsage(input=3), "e"))
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}


def test_stream_without_include_usage_hides_every_usage_field():
    call = adapter.parse_chat(chat(stream=True))
    out = events(streamed(call, node_stream([{"role": "assistant", "content": ""},
                                             {"content": "Hi"}], "stop")))  # fmt: skip
    assert out[-1] == "[DONE]"
    chunks = out[:-1]
    assert len(chunks) == 3
    assert all(c["choices"] for c in chunks)
    assert all("usage" not in c for c in chunks)
    assert all(c["model"] == "gpt-test" for c in chunks)


def test_stream_with_include_usage_passes_the_usage_chunk():
    call = adapter.parse_chat(chat(stream=True, stream_options={"include_usage": True}))
    out = events(streamed(call, node_stream([{"content": "Hi"}], "stop")))
    assert out[-1] == "[DONE]"
    *chunks, usage_chunk = out[:-1]
    assert all(c["usage"] is None for c in chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["model"] == "gpt-test"
    assert usage_chunk["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    assert usage_chunk["usage"]["total_tokens"] == 45


def test_stream_end_sends_the_counted_usage_when_the_node_sent_none():
    call = adapter.parse_chat(chat(stream=True, stream_options={"include_usage": True}))
    raw = b"".join(
        call.response.stream_chunk(c, "gpt-test")
        for c in node_stream([{"content": "Hi"}], "stop", with_usage=False)
    )
    raw += call.response.stream_end(TokenUsage(input=9, output=2), "gpt-test")
    *_, last, done = events(raw)
    assert done == "[DONE]"
    assert last["choices"] == [] and last["id"] == "chatcmpl-abc"
    assert last["usage"]["prompt_tokens"] == 9 and last["usage"]["completion_tokens"] == 2


def test_stream_error_is_an_error_frame_then_done():
    call = adapter.parse_chat(chat(stream=True))
    err = GatewayError(base.UPSTREAM, "upstream_stream_broken", "The node went away.")
    frames = events(call.response.stream_error(err))
    assert frames == [
        {"error": {"message": "The node went away.", "type": "server_error", "param": None,
                   "code": "upstream_stream_broken"}},
        "[DONE]",
    ]  # fmt: skip


# -- the official SDK over the adapter --------------------------------------------------------

TOOL_CALL = {
    "id": "call_abc123",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
}


def gateway_handler(upstream_plain: dict, upstream_chunks: list[dict], seen: list):
    """An httpx2 handler playing the gateway: parse, answer from the canned node reply."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        try:
            call = adapter.parse_chat(json.loads(request.content))
        except GatewayError as err:
            status, payload = adapter.error_response(err)
            return httpx2.Response(
                status, content=payload, headers={"content-type": "application/json"}
            )
        seen.append(call)
        if call.stream:
            return httpx2.Response(
                200,
                content=streamed(call, upstream_chunks, call.model),
                headers={"content-type": "text/event-stream"},
            )
        usage = call.response.usage_of(upstream_plain)
        return httpx2.Response(
            200,
            content=call.response.render(upstream_plain, usage, call.model),
            headers={"content-type": "application/json"},
        )

    return handler


def sdk(handler) -> openai.OpenAI:
    transport = httpx2.MockTransport(handler)
    return openai.OpenAI(
        api_key="x", base_url="http://test/v1", max_retries=0,
        http_client=httpx2.Client(transport=transport),
    )  # fmt: skip


def test_sdk_plain_chat():
    seen: list = []
    upstream = node_chat({"role": "assistant", "content": "Hello!", "tool_calls": []})
    client = sdk(gateway_handler(upstream, [], seen))
    answer = client.chat.completions.create(model="gpt-test", messages=USER, max_tokens=5)
    assert answer.model == "gpt-test"
    assert answer.id == "chatcmpl-abc"
    assert answer.choices[0].message.content == "Hello!"
    assert answer.usage.prompt_tokens == 40
    assert answer.usage.prompt_tokens_details.cached_tokens == 32
    assert seen[0].body["max_tokens"] == 5


def test_sdk_plain_tool_call():
    upstream = node_chat({"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                         "tool_calls")  # fmt: skip
    client = sdk(gateway_handler(upstream, [], []))
    answer = client.chat.completions.create(
        model="gpt-test", messages=USER, tools=[WEATHER], tool_choice="auto"
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert (call.id, call.function.name) == ("call_abc123", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_sdk_stream_without_usage():
    chunks = node_stream([{"role": "assistant", "content": ""}, {"content": "Hel"},
                          {"content": "lo"}], "stop")  # fmt: skip
    client = sdk(gateway_handler({}, chunks, []))
    got = list(client.chat.completions.create(model="gpt-test", messages=USER, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in got) == "Hello"
    assert all(c.choices for c in got)  # no usage-only chunk
    assert all(c.usage is None for c in got)
    assert got[-1].choices[0].finish_reason == "stop"


def test_sdk_stream_with_usage():
    chunks = node_stream([{"role": "assistant", "content": ""}, {"content": "Hi"}], "stop")
    client = sdk(gateway_handler({}, chunks, []))
    got = list(
        client.chat.completions.create(
            model="gpt-test", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )
    assert got[-1].choices == []
    assert got[-1].usage.completion_tokens == 5
    assert got[-1].usage.prompt_tokens_details.cached_tokens == 32
    assert all(c.model == "gpt-test" for c in got)


def test_sdk_streamed_tool_call():
    first = {"role": "assistant", "content": None,
             "tool_calls": [{"index": 0, "id": "call_abc123", "type": "function",
                             "function": {"name": "get_weather", "arguments": ""}}]}  # fmt: skip
    pieces = ['{"', "city", '":"', "Paris", '"}']
    deltas = [first] + [
        {"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces
    ]
    client = sdk(gateway_handler({}, node_stream(deltas, "tool_calls"), []))
    with client.chat.completions.stream(
        model="gpt-test", messages=USER, tools=[WEATHER], stream_options={"include_usage": True}
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.id == "call_abc123"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert final.usage.total_tokens == 45


def test_sdk_sees_validation_errors_as_openai_exceptions():
    client = sdk(gateway_handler({}, [], []))
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-test", messages=USER, extra_body={"foo": 1})
    assert caught.value.code == "unknown_parameter"
    assert caught.value.param == "foo"
    assert "Unrecognized request argument supplied: foo" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-test", messages=USER, temperature=5)
    assert caught.value.param == "temperature"


def test_sdk_raises_on_a_mid_stream_error():
    call = adapter.parse_chat(chat(stream=True))

    def handler(request):
        raw = call.response.stream_chunk(node_stream([{"content": "Hi"}], "stop")[0], "gpt-test")
        raw += call.response.stream_error(GatewayError(base.TIMEOUT, "idle_timeout", "Stalled."))
        return httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"})

    client = sdk(handler)
    with pytest.raises(openai.APIError, match="Stalled"):
        list(client.chat.completions.create(model="gpt-test", messages=USER, stream=True))


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(adapter.ROLES), "content": st.one_of(_text, st.none())},
    optional={"name": _text},
)


@given(st.lists(_message, min_size=1, max_size=5), st.booleans())
def test_the_estimate_is_the_tokenizers_chat_template_count(messages, long_system):
    if long_system:  # long enough to go through the remembered counts
        messages = [{"role": "system", "content": "policy, " * 100}, *messages]
    assert adapter.chat_prompt_estimate(messages) == len(tokenizer.chat_prompt_tokens(messages))
