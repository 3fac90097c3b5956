"""The Responses API (``POST /v1/responses``) through the gateway with the
official openai SDK, against a real simulator node: plain and streamed
answers, a function-call round trip, a conversation continued with
``previous_response_id``, stored responses retrieved and deleted, and the
usage the SDK reports equal to the call records billed."""

from __future__ import annotations

import openai
import pytest

from tests.factories import MembershipFactory, OrganizationFactory, issue_key
from usage.ingest import ingest_events
from usage.models import CallRecord

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def client(gw, raw) -> openai.OpenAI:
    return openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)


def billed(gw, n) -> dict[str, CallRecord]:
    """The call records of the first ``n`` usage events, by request id."""
    ingest_events(gw.emitter.wait_for(n))
    return {r.request_id: r for r in CallRecord.objects.all()}


def assert_billed_as_reported(record: CallRecord, usage) -> None:
    """The SDK's usage object is what the call record bills."""
    assert record.input_tokens + record.cache_read_tokens == usage.input_tokens
    assert record.cache_read_tokens == usage.input_tokens_details.cached_tokens
    assert record.output_tokens == usage.output_tokens
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_plain_response_and_its_usage(gw, tenant):
    response = client(gw, tenant.raw).responses.create(
        model="sim-chat-small",
        instructions="You are terse.",
        input="Tell me a fact about Paris.",
        max_output_tokens=30,
    )
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete")
    assert response.output_text
    assert response.output[0].type == "message" and response.output[0].role == "assistant"
    assert response.instructions == "You are terse."
    assert 0 < response.usage.output_tokens <= 30
    [record] = billed(gw, 1).values()
    assert record.protocol == "openai" and record.endpoint == "responses"
    assert record.stream is False and record.status_code == 200
    assert_billed_as_reported(record, response.usage)


def test_streamed_response_events_and_final_usage(gw, tenant):
    stream = client(gw, tenant.raw).responses.create(
        model="sim-chat-small",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Count to five."}]}],
        max_output_tokens=20,
        stream=True,
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        kinds[-1],
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.output_text == text and text
    [record] = billed(gw, 1).values()
    assert record.stream is True and record.endpoint == "responses"
    assert_billed_as_reported(record, final.usage)


def test_function_call_round_trip(gw, tenant):
    c = client(gw, tenant.raw)
    asked = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.responses.create(
        model="sim-chat-small", input=asked, tools=[WEATHER_TOOL], tool_choice="auto"
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id
    assert "city" in call.arguments
    # The caller runs the tool and sends its output back with the call.
    second = c.responses.create(
        model="sim-chat-small",
        tools=[WEATHER_TOOL],
        input=[
            *asked,
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "18C and sunny"},
        ],
        max_output_tokens=40,
    )
    assert second.output[0].type == "message"
    assert "18C" in second.output_text  # the node's answer quotes the tool's result
    records = billed(gw, 2)
    assert sum(r.output_tokens for r in records.values()) == (
        first.usage.output_tokens + second.usage.output_tokens
    )


def test_streamed_function_call_events(gw, tenant):
    stream = client(gw, tenant.raw).responses.create(
        model="sim-chat-small",
        input="What is the weather in Paris?",
        tools=[WEATHER_TOOL],
        stream=True,
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert done.arguments == deltas and done.name == "get_weather"
    [item] = [e.item for e in events if e.type == "response.output_item.done"]
    assert item.type == "function_call" and item.arguments == deltas
    assert events[-1].response.output[0].call_id == item.call_id


def test_previous_response_id_continues_the_conversation(gw, tenant):
    c = client(gw, tenant.raw)
    first = c.responses.create(
        model="sim-chat-small", input="My name is Ada Lovelace.", max_output_tokens=20
    )
    second = c.responses.create(
        model="sim-chat-small",
        previous_response_id=first.id,
        input="What is my name?",
        max_output_tokens=20,
    )
    alone = c.responses.create(
        model="sim-chat-small", input="What is my name?", max_output_tokens=20
    )
    assert second.previous_response_id == first.id
    # The earlier turn (its input and its answer) is part of the prompt billed.
    history = first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens >= alone.usage.input_tokens + history - 4
    third = c.responses.create(
        model="sim-chat-small", previous_response_id=second.id, input="And again?"
    )
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens
    records = billed(gw, 4)
    assert sorted(r.input_tokens + r.cache_read_tokens for r in records.values()) == sorted(
        r.usage.input_tokens for r in (first, second, alone, third)
    )


def test_retrieve_and_delete_a_stored_response(gw, tenant):
    c = client(gw, tenant.raw)
    created = c.responses.create(model="sim-chat-small", input="Hello", max_output_tokens=10)
    got = c.responses.retrieve(created.id)
    assert got.id == created.id and got.output_text == created.output_text
    assert got.usage.output_tokens == created.usage.output_tokens
    c.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as gone:
        c.responses.create(model="sim-chat-small", previous_response_id=created.id, input="Hi")
    assert gone.value.body["param"] == "previous_response_id"


def test_store_false_keeps_nothing(gw, tenant):
    c = client(gw, tenant.raw)
    created = c.responses.create(
        model="sim-chat-small", input="Hello", max_output_tokens=10, store=False
    )
    assert created.store is False and created.output_text
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(created.id)


def test_another_organizations_response_is_not_found(gw, tenant):
    c = client(gw, tenant.raw)
    secret = "The launch code is zebra-42."
    created = c.responses.create(model="sim-chat-small", input=secret, max_output_tokens=10)
    other_org = OrganizationFactory(name="Other", slug="other")
    owner = MembershipFactory(organization=other_org, role="owner")
    from accounts.actors import Actor

    _, other_raw = issue_key(Actor(owner, "127.0.0.1"))
    other = client(gw, other_raw)
    for attempt in (
        lambda: other.responses.retrieve(created.id),
        lambda: other.responses.delete(created.id),
        lambda: other.responses.create(
            model="sim-chat-small", previous_response_id=created.id, input="Repeat it."
        ),
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert refused.value.status_code == 404
        assert "zebra" not in refused.value.response.text
    # Still there for its own organization.
    assert c.responses.retrieve(created.id).output_text == created.output_text
