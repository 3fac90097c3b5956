"""The recording stage alone: a call's usage event goes out once, with the
answer's last bytes or, when they never went out, when the call ends; every
call is counted in the metrics and gets its access line."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from console.kernel import ipnet
from gateway_bridge.metrics import GatewayMetrics
from gateway_bridge.pipeline.call import Call
from gateway_bridge.pipeline.record import Recorder
from gateway_bridge.state_db import KeyEntry
from tests.gateway_bridge.limits.test_plan import auth


class Emitter:
    def __init__(self):
        self.events = []

    def emit(self, event):
        self.events.append(event)


def recorder():
    emitter, lines = Emitter(), []
    rec = Recorder(
        GatewayMetrics(),
        SimpleNamespace(catalog={}),  # type: ignore[arg-type]
        lambda: emitter,  # type: ignore[arg-type, return-value]
        lambda call, elapsed, overhead: lines.append((call.request_id, call.status)),
    )
    return rec, emitter, lines


def keyed_call() -> Call:
    call = Call("openai", "chat.completions")
    call.entry = KeyEntry(auth(), ipnet.Networks(), 0, None, 0.0)
    call.model = "m"
    return call


def test_the_event_goes_with_the_last_bytes_and_only_once():
    rec, emitter, lines = recorder()
    call = keyed_call()
    sent = []

    async def send(message):
        sent.append((message["type"], len(emitter.events)))

    async def answer():
        out = rec.sending(call, send)
        await out({"type": "http.response.start", "status": 200, "headers": []})
        await out({"type": "http.response.body", "body": b"{", "more_body": True})
        await out({"type": "http.response.body", "body": b"}"})

    asyncio.run(answer())
    # The event was handed over before the last bytes, not before the others.
    assert sent == [("http.response.start", 0), ("http.response.body", 0), ("http.response.body", 1)]
    rec.finish(call)
    assert len(emitter.events) == 1
    assert lines == [(call.request_id, 200)]
    assert "gateway_requests_total" in rec.metrics.render()


def test_a_call_whose_answer_never_ended_is_recorded_when_it_ends():
    rec, emitter, lines = recorder()
    call = keyed_call()
    call.status = 499  # the client left
    rec.finish(call)
    assert [e.status_code for e in emitter.events] == [499]
    assert lines == [(call.request_id, 499)]


def test_a_call_without_a_key_is_counted_and_logged_but_never_billed():
    rec, emitter, lines = recorder()
    call = Call("openai", "chat.completions")
    call.status = 401
    rec.finish(call)
    assert emitter.events == [] and lines == [(call.request_id, 401)]
