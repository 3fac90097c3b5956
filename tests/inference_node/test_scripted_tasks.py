"""A scripted task in the simulator: ``sim-tool:`` lines in the user's message are
the calls its answers make, one per answer, with exactly the arguments given, then
a text answer (exactly a ``sim-say:`` line's text when there is one). How a real
coding agent is driven through a task by the agent tests. Checked with the
official openai and anthropic SDKs against a running node."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.inference_node.server_helpers import TOKEN, inprocess_node

READ = {
    "type": "function",
    "function": {
        "name": "Read",
        "description": "Read a file",
        "parameters": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}},
            "required": ["file_path"],
        },
    },
}
EDIT = {
    "type": "function",
    "function": {
        "name": "Edit",
        "description": "Edit a file",
        "parameters": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"}},
        },
    },
}
SCRIPT = (
    "Read notes.txt, then edit it.\n"
    'sim-tool: Read {"file_path": "/repo/notes.txt"}\n'
    'sim-tool: Bash {"command": "ls"}\n'  # not offered: skipped
    'sim-tool: Edit {"file_path": "/repo/notes.txt", "old_string": "hello"}\n'
    'sim-say: "Done:\\nnotes.txt edited."'
)


@pytest.fixture(scope="module")
def node():
    with inprocess_node("--token", TOKEN) as running:
        yield running


def test_each_answer_makes_the_next_scripted_call_then_says_the_scripted_text(node):
    client = openai.OpenAI(base_url=node.base_url + "/v1", api_key=TOKEN, max_retries=0)
    messages: list[dict] = [{"role": "user", "content": SCRIPT}]
    made = []
    for _ in range(3):
        reply = client.chat.completions.create(
            model="sim-chat-small", messages=messages, tools=[READ, EDIT], max_tokens=200
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            break
        [call] = message.tool_calls
        made.append((call.function.name, json.loads(call.function.arguments)))
        messages.append(message.model_dump(exclude_none=True))
        # the agent's own note after the result (Claude Code's reminders) changes nothing
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
        messages.append({"role": "user", "content": "<system-reminder>go on</system-reminder>"})
    assert made == [
        ("Read", {"file_path": "/repo/notes.txt"}),
        ("Edit", {"file_path": "/repo/notes.txt", "old_string": "hello"}),
    ]
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content == "Done:\nnotes.txt edited."


def test_a_script_without_tools_is_answered_with_its_text_and_a_request_without_one_as_before(
    node,
):
    client = openai.OpenAI(base_url=node.base_url + "/v1", api_key=TOKEN, max_retries=0)
    said = client.chat.completions.create(
        model="sim-chat-small", messages=[{"role": "user", "content": SCRIPT}]
    )
    assert said.choices[0].message.content == "Done:\nnotes.txt edited."
    plain = client.chat.completions.create(
        model="sim-chat-small",
        messages=[{"role": "user", "content": "What is in notes.txt?"}],
        tools=[READ, EDIT],
    )
    [call] = plain.choices[0].message.tool_calls  # the schema-drawn call, unchanged
    assert call.function.name == "Read"
    assert json.loads(call.function.arguments) != {"file_path": "/repo/notes.txt"}


def test_the_anthropic_front_end_follows_the_script_too(node):
    client = anthropic.Anthropic(base_url=node.base_url, api_key=TOKEN, max_retries=0)
    tools = [
        {"name": f["function"]["name"], "input_schema": f["function"]["parameters"]}
        for f in (READ, EDIT)
    ]
    first = client.messages.create(
        model="sim-chat-small",
        max_tokens=200,
        tools=tools,
        messages=[{"role": "user", "content": SCRIPT}],
    )
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("Read", {"file_path": "/repo/notes.txt"})
