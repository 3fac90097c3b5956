"""The simulator honours what a request asks of its output's form, through the
official SDKs: JSON mode and JSON schemas (``response_format``),
log probabilities (``logprobs`` / ``top_logprobs``), plain and streamed, and
vLLM's ``stop_reason`` naming the stop string that ended the text; the
Anthropic and Gemini front-ends' structured outputs."""

from __future__ import annotations

import json
import math

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from tests.inference_node.server_helpers import TOKEN, node_process

ASK = [{"role": "user", "content": "Describe the weather in Paris for Alice."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "celsius": {"type": "number"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "sunny": {"type": "boolean"},
        "sky": {"type": "string", "enum": ["clear", "cloudy"]},
        "hours": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
        "wind": {
            "type": "object",
            "properties": {"speed": {"type": "number"}, "from": {"type": "string"}},
            "required": ["speed", "from"],
        },
        "note": {"type": "string"},  # not required: may be left out
    },
    "required": ["city", "celsius", "days", "sunny", "sky", "hours", "wind"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def node():
    with node_process("--profile", "instant", "--token", TOKEN) as running:
        yield running


@pytest.fixture
def client(node):
    return openai.OpenAI(base_url=node.base_url + "/v1", api_key=TOKEN, max_retries=0, timeout=10)


def assert_weather(value: dict) -> None:
    """``value`` is valid against SCHEMA (checked by hand, key by key)."""
    assert set(SCHEMA["required"]) <= set(value) <= set(SCHEMA["properties"])
    assert isinstance(value["city"], str) and value["city"]
    assert isinstance(value["celsius"], int | float) and not isinstance(value["celsius"], bool)
    assert isinstance(value["days"], int) and 1 <= value["days"] <= 7
    assert isinstance(value["sunny"], bool)
    assert value["sky"] in ("clear", "cloudy")
    assert len(value["hours"]) >= 2 and all(isinstance(h, int) for h in value["hours"])
    assert isinstance(value["wind"]["speed"], int | float) and isinstance(
        value["wind"]["from"], str
    )


def json_schema_format(schema=SCHEMA) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}}


def test_json_object_mode_answers_a_json_object(client):
    answer = client.chat.completions.create(
        model="sim-chat-small",
        messages=ASK,
        response_format={"type": "json_object"},
        max_tokens=400,
    )
    value = json.loads(answer.choices[0].message.content)
    assert isinstance(value, dict) and isinstance(value["answer"], str) and value["answer"]
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.completion_tokens > 0


def test_json_schema_answers_a_value_of_the_schema_plain_and_streamed(client):
    plain = client.chat.completions.create(
        model="sim-chat-small", messages=ASK, response_format=json_schema_format(), max_tokens=400
    )
    value = json.loads(plain.choices[0].message.content)
    assert_weather(value)
    assert value["city"] in ("Paris", "Alice")  # strings come from the user's words
    chunks = list(
        client.chat.completions.create(
            model="sim-chat-small",
            messages=ASK,
            response_format=json_schema_format(),
            max_tokens=400,
            stream=True,
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(streamed) == value


def test_the_sdks_parse_helper_reads_a_schema_answer(client):
    answer = client.chat.completions.parse(
        model="sim-chat-small",
        messages=ASK,
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "pick",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"label": {"type": "string", "enum": ["a", "b"]}},
                    "required": ["label"],
                    "additionalProperties": False,
                },
            },
        },
    )
    assert json.loads(answer.choices[0].message.content) == {"label": "a"}


def test_a_json_answer_cut_by_max_tokens_says_length(client):
    answer = client.chat.completions.create(
        model="sim-chat-small", messages=ASK, response_format=json_schema_format(), max_tokens=5
    )
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 5


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            "response_format.json_schema.name",
        ),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": "yes"}, "logprobs"),
    ],
)
def test_bad_output_options_are_400_naming_the_field(client, fields, param):
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="sim-chat-small", messages=ASK, **fields)
    assert bad.value.body["param"] == param


def assert_logprobs(entries, text: str, top: int) -> None:
    assert "".join(e.token for e in entries) == text
    for e in entries:
        assert e.logprob < 0 and bytes(e.bytes) == e.token.encode()
        assert len(e.top_logprobs) == top
        if top:
            assert e.top_logprobs[0].token == e.token  # the sampled token is the likeliest
            ranked = [t.logprob for t in e.top_logprobs]
            assert ranked == sorted(ranked, reverse=True)
            assert sum(math.exp(lp) for lp in ranked) <= 1.0 + 1e-9


def test_chat_logprobs_plain_and_streamed(client):
    plain = client.chat.completions.create(
        model="sim-chat-small", messages=ASK, logprobs=True, top_logprobs=3, max_tokens=20
    )
    choice = plain.choices[0]
    entries = choice.logprobs.content
    assert len(entries) == plain.usage.completion_tokens
    assert_logprobs(entries, choice.message.content, 3)
    stream = client.chat.completions.create(
        model="sim-chat-small",
        messages=ASK,
        logprobs=True,
        top_logprobs=3,
        max_tokens=20,
        stream=True,
    )
    streamed = [
        e
        for c in stream
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in entries]
    without_top = client.chat.completions.create(
        model="sim-chat-small", messages=ASK, logprobs=True, max_tokens=5
    )
    assert_logprobs(
        without_top.choices[0].logprobs.content, without_top.choices[0].message.content, 0
    )
    # Not asked: none.
    assert (
        client.chat.completions.create(model="sim-chat-small", messages=ASK, max_tokens=5)
        .choices[0]
        .logprobs
        is None
    )


def test_completions_logprobs_in_the_legacy_shape(client):
    answer = client.completions.create(
        model="sim-chat-small", prompt="Once upon a time", logprobs=2, max_tokens=8
    )
    probs = answer.choices[0].logprobs
    assert "".join(probs.tokens) == answer.choices[0].text
    assert len(probs.token_logprobs) == len(probs.tokens) == 8
    assert probs.text_offset[0] == 0
    assert probs.text_offset[-1] == len(answer.choices[0].text) - len(probs.tokens[-1])
    assert all(
        len(top) == 2 and t in top for top, t in zip(probs.top_logprobs, probs.tokens, strict=True)
    )


def test_stop_reason_names_the_stop_string_plain_and_streamed(client):
    free = client.chat.completions.create(model="sim-chat-small", messages=ASK, max_tokens=60)
    words = free.choices[0].message.content.split()
    stop = words[3]
    cut = client.chat.completions.create(
        model="sim-chat-small", messages=ASK, max_tokens=60, stop=["zzz-never", stop]
    )
    choice = cut.choices[0]
    assert choice.finish_reason == "stop" and stop not in choice.message.content
    assert choice.model_extra["stop_reason"] == stop
    chunks = list(
        client.chat.completions.create(
            model="sim-chat-small", messages=ASK, max_tokens=60, stop=[stop], stream=True
        )
    )
    last = [c for c in chunks if c.choices][-1].choices[0]
    assert last.finish_reason == "stop" and last.model_extra["stop_reason"] == stop
    # A text no stop string ended has none.
    assert free.choices[0].model_extra["stop_reason"] is None


def test_anthropic_structured_output_answers_json_of_the_schema(node):
    c = anthropic.Anthropic(base_url=node.base_url, api_key=TOKEN, max_retries=0, timeout=10)
    message = c.messages.create(
        model="sim-chat-small",
        max_tokens=400,
        messages=ASK,
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
    )
    assert_weather(json.loads(message.content[0].text))
    assert message.stop_reason == "end_turn"
    with pytest.raises(anthropic.BadRequestError) as bad:
        c.messages.create(
            model="sim-chat-small",
            max_tokens=40,
            messages=ASK,
            output_config={"format": {"type": "json_schema"}},
        )
    assert "output_config.format.schema" in str(bad.value)


def test_gemini_json_without_a_schema_is_an_object_with_the_answer(node):
    options = types.HttpOptions(base_url=node.base_url, timeout=10_000)
    c = genai.Client(api_key=TOKEN, http_options=options)
    answer = c.models.generate_content(
        model="sim-chat-small",
        contents="Describe the weather in Paris.",
        config=types.GenerateContentConfig(response_mime_type="application/json"),
    )
    value = json.loads(answer.text)
    assert isinstance(value["answer"], str) and value["answer"]


def test_gemini_logprobs_plain_and_streamed(node):
    c = genai.Client(
        api_key=TOKEN, http_options=types.HttpOptions(base_url=node.base_url, timeout=10_000)
    )
    config = types.GenerateContentConfig(response_logprobs=True, logprobs=3, max_output_tokens=12)
    answer = c.models.generate_content(model="sim-chat-small", contents="Hello", config=config)
    candidate = answer.candidates[0]
    chosen = candidate.logprobs_result.chosen_candidates
    assert "".join(t.token for t in chosen) == answer.text
    assert len(chosen) == answer.usage_metadata.candidates_token_count
    for token, top in zip(chosen, candidate.logprobs_result.top_candidates, strict=True):
        assert len(top.candidates) == 3 and top.candidates[0].token == token.token
        assert token.log_probability < 0
    assert candidate.avg_logprobs == pytest.approx(
        sum(t.log_probability for t in chosen) / len(chosen)
    )
    chunks = list(
        c.models.generate_content_stream(model="sim-chat-small", contents="Hello", config=config)
    )
    streamed = [
        t
        for ch in chunks
        if ch.candidates and ch.candidates[0].logprobs_result
        for t in ch.candidates[0].logprobs_result.chosen_candidates
    ]
    assert [(t.token, t.log_probability) for t in streamed] == [
        (t.token, t.log_probability) for t in chosen
    ]
    # Not asked: none; logprobs without response_logprobs: a 400.
    plain = c.models.generate_content(model="sim-chat-small", contents="Hello")
    assert plain.candidates[0].logprobs_result is None
    with pytest.raises(genai.errors.ClientError) as bad:
        c.models.generate_content(
            model="sim-chat-small", contents="Hello", config=types.GenerateContentConfig(logprobs=2)
        )
    assert bad.value.code == 400
