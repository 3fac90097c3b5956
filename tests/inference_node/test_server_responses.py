"""The simulator's Responses API front-end (what an ``openai`` channel's vendor
answers to a passed-through Responses call) with the official openai SDK."""

from __future__ import annotations

import openai
import pytest

from tests.inference_node.server_helpers import TOKEN, node_process

TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def client():
    with node_process("--token", TOKEN, "--seed", "7") as node:
        yield openai.OpenAI(base_url=node.base_url + "/v1", api_key=TOKEN, max_retries=0)


def test_plain_and_streamed_answers_with_usage(client):
    plain = client.responses.create(
        model="sim-chat-small", instructions="Be brief.", input="Hello", max_output_tokens=8
    )
    assert plain.output_text and plain.status == "incomplete"
    assert plain.usage.output_tokens == 8 and plain.usage.input_tokens > 0
    events = list(client.responses.create(model="sim-chat-small", input="Hello", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text


def test_a_tool_call_and_its_output(client):
    first = client.responses.create(model="sim-chat-small", input="Weather in Oslo?", tools=[TOOL])
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    second = client.responses.create(
        model="sim-chat-small",
        tools=[TOOL],
        input=[
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "rainy 9C"},
        ],
    )
    assert "rainy" in second.output_text
