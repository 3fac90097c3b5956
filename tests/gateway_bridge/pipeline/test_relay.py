"""The relay stage's streams: events that have already come in from the node
go to the client in one write; an event is never held back waiting for the
next one."""

from __future__ import annotations

import asyncio

import orjson

from gateway_bridge.metrics import GatewayMetrics
from gateway_bridge.pipeline import relay
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols.openai import parse_call

MODEL = "sim-chat-small"


def _chunk(text: str) -> bytes:
    return orjson.dumps(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        }
    )


USAGE = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
)


class FakeResponse:
    """A node's stream: (event, whether the next one is already in) pairs."""

    def __init__(self, events):
        self.events = events
        self.event_buffered = False

    async def sse(self):
        for data, buffered in self.events:
            self.event_buffered = buffered
            yield data
            self.event_buffered = False

    def abort(self):
        pass


class FakeGateway:
    def __init__(self):
        self.metrics = GatewayMetrics()


def _relay(events):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = parse_call("chat.completions", body, path_model=None, query=b"", headers={})
    call = Call("openai", "chat.completions")
    writes: list[bytes] = []

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        if message["type"] == "http.response.body":
            writes.append(message["body"])

    async def run():
        resp = FakeResponse(events)
        return await relay.stream(FakeGateway(), call, req, resp, receive, send, 0.0, None, 0)

    assert asyncio.run(run()) is True
    return writes, call


def test_events_already_in_go_in_one_write():
    events = [
        (_chunk("a"), True),
        (_chunk("b"), True),
        (_chunk("c"), False),  # the next one is not in yet: write now
        (_chunk("d"), True),
        (USAGE, True),
        (b"[DONE]", False),
    ]
    writes, call = _relay(events)
    assert len(writes) == 2
    assert writes[0].count(b"data: ") == 3  # a, b, c
    # d, the usage chunk and the end: the pending bytes lead the last write.
    assert writes[1].count(b"data: ") == 3
    assert writes[1].endswith(b"data: [DONE]\n\n")
    assert call.usage.output == 3


def test_every_event_is_written_when_none_is_waiting():
    events = [(_chunk("a"), False), (_chunk("b"), False), (USAGE, False), (b"[DONE]", False)]
    writes, _ = _relay(events)
    # One write per event, then the end.
    assert [w.count(b"data: ") for w in writes] == [1, 1, 1, 1]
    assert b'"content":"a"' in writes[0] and b'"content":"b"' in writes[1]
