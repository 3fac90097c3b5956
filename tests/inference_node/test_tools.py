"""Tool calls in the simulator node: a request with tools gets one deterministic call
of a function (arguments built from its JSON schema), plain and streamed as OpenAI
streams one; a tool result gets a text answer that reports it. Checked with the
official openai SDK against a running node."""

from __future__ import annotations

import json

import openai
import pytest

from console.kernel import tokens as tokenizer
from tests.inference_node.server_helpers import TOKEN, inprocess_node, metric_value
from tooling.simulator import protocol, text

CHAT = "/v1/chat/completions"
MODEL = "sim-chat-small"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "options": {
                    "type": "object",
                    "properties": {
                        "wind": {"type": "boolean"},
                        "hours": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
                    },
                    "required": ["wind", "hours"],
                },
                "note": {"type": "string"},
            },
            "required": ["city", "unit", "days", "options"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {"name": "get_time", "description": "The time in a time zone"},
}
TOOLS = [CLOCK, WEATHER]
ASK = [{"role": "user", "content": "What is the weather in Paris tomorrow?"}]


@pytest.fixture(scope="module")
def node():
    with inprocess_node("--token", TOKEN) as running:
        yield running


@pytest.fixture
def client(node):
    return openai.OpenAI(base_url=node.base_url + "/v1", api_key=TOKEN, max_retries=0, timeout=10)


def ask(client, messages=ASK, **fields):
    return client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, **fields)


def test_a_user_question_with_tools_gets_a_call_of_the_matching_function(client):
    answer = ask(client)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and len(call.id) == 29
    assert call.type == "function"
    assert call.function.name == "get_weather"  # it shares "weather" with the question
    args = json.loads(call.function.arguments)
    assert set(args) == {"city", "unit", "days", "options"}  # the required ones only
    assert args["city"] == "Paris"  # a word of the question (proper nouns first)
    assert args["unit"] == "celsius"  # the first enum value
    assert isinstance(args["days"], int) and 1 <= args["days"] <= 7
    assert isinstance(args["options"]["wind"], bool)
    assert len(args["options"]["hours"]) == 2
    assert all(isinstance(h, int) for h in args["options"]["hours"])
    # The arguments are the output tokens; the tool definitions are prompt tokens.
    assert answer.usage.completion_tokens == tokenizer.count_tokens(call.function.arguments)
    prompt = tokenizer.chat_prompt_tokens(protocol.template_messages(ASK, TOOLS))
    assert answer.usage.prompt_tokens == len(prompt)
    assert answer.usage.prompt_tokens > len(tokenizer.chat_prompt_tokens(ASK)) + 50


def test_the_same_request_makes_the_same_call(client):
    first, second = ask(client), ask(client)
    assert first.choices[0].message.tool_calls == second.choices[0].message.tool_calls
    seeded = ask(client, seed=5).choices[0].message.tool_calls[0]
    assert seeded.id != first.choices[0].message.tool_calls[0].id


def test_tool_choice_names_the_function_or_turns_calls_off(client):
    named = ask(client, tool_choice={"type": "function", "function": {"name": "get_time"}})
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    assert call.function.arguments == "{}"  # no parameters, no arguments
    off = ask(client, tool_choice="none", max_tokens=5)
    assert off.choices[0].message.tool_calls == []
    assert off.choices[0].message.content
    assert off.choices[0].finish_reason == "length"


def test_each_choice_makes_its_own_call(client):
    answer = ask(client, n=2)
    ids = [c.message.tool_calls[0].id for c in answer.choices]
    assert len(set(ids)) == 2
    assert all(c.finish_reason == "tool_calls" for c in answer.choices)


def test_a_small_budget_cuts_the_arguments(client):
    answer = ask(client, max_tokens=3)
    choice = answer.choices[0]
    assert choice.finish_reason == "length"
    assert answer.usage.completion_tokens == 3
    full = ask(client).choices[0].message.tool_calls[0].function.arguments
    assert full.startswith(choice.message.tool_calls[0].function.arguments)


def test_a_tool_result_gets_a_text_answer_that_reports_it(client):
    call = ask(client).choices[0].message
    turn = [
        *ASK,
        call.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": '{"temp": 21}'},
    ]
    answer = ask(client, messages=turn, max_tokens=40)
    choice = answer.choices[0]
    assert choice.message.tool_calls == []
    assert choice.message.content.startswith('The result of get_weather is {"temp": 21}.')
    assert answer.usage.completion_tokens == tokenizer.count_tokens(choice.message.content)
    # "required" still calls, even after a result.
    again = ask(client, messages=turn, tool_choice="required")
    assert again.choices[0].finish_reason == "tool_calls"


def test_streamed_tool_call_is_shaped_like_openais(node):
    body = {"model": MODEL, "messages": ASK, "tools": TOOLS}
    plain = node.chat(ASK[0]["content"], tools=TOOLS)
    expected = plain["choices"][0]["message"]["tool_calls"][0]
    events, done = node.stream(CHAT, {**body, "stream_options": {"include_usage": True}})
    assert done
    first = events[0]["choices"][0]["delta"]
    assert first == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": expected["id"],
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ],
    }
    fragments = [e["choices"][0]["delta"]["tool_calls"] for e in events[1:-2]]
    assert all(len(f) == 1 and set(f[0]) == {"index", "function"} for f in fragments)
    arguments = "".join(f[0]["function"]["arguments"] for f in fragments)
    assert arguments == expected["function"]["arguments"]
    assert len(fragments) == plain["usage"]["completion_tokens"]  # one token a delta
    assert events[-2]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
        "stop_reason": None,  # vLLM's field: no stop string ended it
    }
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == plain["usage"]


def test_streamed_tool_call_through_the_sdk(client):
    stream = ask(client, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens > 0
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert calls[0].id.startswith("call_") and calls[0].function.name == "get_weather"
    arguments = "".join(tc.function.arguments or "" for tc in calls)
    assert json.loads(arguments)["city"] == "Paris"
    with client.chat.completions.stream(model=MODEL, messages=ASK, tools=TOOLS) as helper:
        final = helper.get_final_completion()
    (call,) = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "tool_calls"
    assert call.function.arguments == arguments


def test_naming_several_functions_calls_each_in_parallel(client):
    named = [{"role": "user", "content": "please use get_weather and get_time for Paris"}]
    whole = ask(client, messages=named).choices[0]
    assert [c.function.name for c in whole.message.tool_calls] == ["get_weather", "get_time"]
    assert whole.finish_reason == "tool_calls"
    assert len({c.id for c in whole.message.tool_calls}) == 2
    # Streamed as OpenAI streams parallel calls: each opens with its index, id and name.
    with client.chat.completions.stream(model=MODEL, messages=named, tools=TOOLS) as helper:
        opened = [
            (tc.index, tc.id, tc.function.name)
            for event in helper
            if event.type == "chunk" and event.chunk.choices
            for tc in event.chunk.choices[0].delta.tool_calls or ()
            if tc.id
        ]
        final = helper.get_final_completion()
    calls = whole.message.tool_calls
    assert opened == [(i, c.id, c.function.name) for i, c in enumerate(calls)]

    def shown(tool_calls):
        return [(c.id, c.function.name, json.loads(c.function.arguments)) for c in tool_calls]

    assert shown(final.choices[0].message.tool_calls) == shown(calls)
    assert shown(calls)[0][2]["city"] == "Paris"
    single = ask(client, messages=named, parallel_tool_calls=False).choices[0].message
    assert len(single.tool_calls) == 1


def test_streamed_answer_to_a_tool_result(client):
    call = ask(client).choices[0].message
    turn = [
        *ASK,
        call.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "sunny"},
    ]
    chunks = list(ask(client, messages=turn, stream=True, max_tokens=12))
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content.startswith("The result of get_weather is sunny.")
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(not c.choices[0].delta.tool_calls for c in chunks)


def test_tool_calls_finish_as_stop_in_the_engine_metrics(node):
    before = metric_value(node.metrics(), "vllm:request_success_total", finished_reason="stop")
    node.chat(ASK[0]["content"], tools=TOOLS)
    after = metric_value(node.metrics(), "vllm:request_success_total", finished_reason="stop")
    assert after == before + 1


BAD_CALL = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": {"type": "function"}}, "tools"),
        ({"tools": ["get_weather"]}, "tools[0]"),
        ({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools[0].type"),
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]},
         "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
         "tools[0].function.parameters"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice"),
        ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"messages": [*ASK, BAD_CALL]}, "messages[1].tool_calls[0].function.name"),
        ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
         "messages[0].tool_calls"),
        ({"messages": [{"role": "tool", "content": "x", "tool_call_id": 7}]},
         "messages[0].tool_call_id"),
    ],
)  # fmt: skip
def test_bad_tools_are_400_with_the_param(node, fields, param):
    status, _, body = node.post(CHAT, {"model": MODEL, "messages": ASK, **fields})
    assert status == 400, body
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] == param


# -- arguments from schemas ------------------------------------------------------------------


def call_args(parameters: dict | None, words: str = "Book a table in Lyon") -> dict:
    fn = {"name": "f"} if parameters is None else {"name": "f", "parameters": parameters}
    g = text.generate_tool_call([11, 12, 13], fn, words=words, max_tokens=500)
    assert g.finish_reason == "tool_calls"
    return json.loads(g.text)


def test_arguments_follow_refs_unions_formats_and_nullable_types():
    schema = {
        "type": "object",
        "$defs": {"Place": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "properties": {
            "place": {"$ref": "#/$defs/Place"},
            "when": {"type": "string", "format": "date"},
            "mail": {"type": "string", "format": "email"},
            "size": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 2, "maximum": 4}]},
            "price": {"type": ["number", "null"], "minimum": 10, "maximum": 20},
            "kind": {"const": "dinner"},
        },
    }
    args = call_args(schema)
    assert set(args) == set(schema["properties"])  # nothing required: every property
    assert args["place"] == {"name": "Lyon"}
    assert args["when"] == "2025-01-15"
    assert args["mail"] == "lyon@example.com"
    assert 2 <= args["size"] <= 4
    assert 10 <= args["price"] <= 20
    assert args["kind"] == "dinner"


def test_arguments_without_parameters_or_words():
    assert call_args(None) == {}
    args = call_args({"properties": {"q": {"type": "string"}}}, words="")
    assert args["q"] in text.WORDS  # no words to take: the simulator's own


def test_a_self_referencing_schema_ends():
    schema = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    args = call_args(schema)
    depth = 0
    while isinstance(args, dict) and args.get("next") is not None:
        args, depth = args["next"], depth + 1
    assert depth <= text.MAX_SCHEMA_DEPTH
