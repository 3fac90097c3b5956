"""Circuit transitions leave the gateway off the event loop: sent as one task,
kept (bounded) while the broker is away and sent again, flushed on close."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from gateway_bridge.circuits import CircuitReporter


def breaker(state="open", reason="error_rate", calls=120, errors=30):
    return SimpleNamespace(
        state=state, opened_reason=reason, opened_calls=calls, opened_errors=errors
    )


NODE = SimpleNamespace(node_id=7, name="gpu-a")


class FlakySend:
    """Fails the first ``failures`` batches, then takes them."""

    def __init__(self, failures=0):
        self.failures = failures
        self.batches = []
        self.sent = threading.Event()

    def __call__(self, batch):
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker down")
        self.batches.append(batch)
        self.sent.set()


async def until(condition, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_an_opening_and_a_closing_are_sent_with_what_the_window_held():
    send = FlakySend()
    reporter = CircuitReporter(send, gateway="gw-1:42")

    async def main():
        reporter.report(NODE, breaker())
        await until(lambda: send.batches)
        reporter.report(NODE, breaker(state="closed", reason="error_rate", calls=0, errors=0))
        await until(lambda: reporter.sent == 2)

    asyncio.run(main())
    opened, closed = [t for b in send.batches for t in b]
    assert opened["node_id"] == 7 and opened["node"] == "gpu-a" and opened["gateway"] == "gw-1:42"
    assert (opened["state"], opened["reason"], opened["calls"], opened["errors"]) == (
        "open", "error_rate", 120, 30,
    )  # fmt: skip
    assert (closed["state"], closed["reason"]) == ("closed", "probe_succeeded")
    assert opened["id"] != closed["id"] and opened["at"] <= closed["at"]


def test_a_broker_outage_keeps_them_and_they_go_later_in_order():
    send = FlakySend(failures=2)
    reporter = CircuitReporter(send, retry_seconds=0.05)

    async def main():
        reporter.report(NODE, breaker())
        reporter.report(NODE, breaker(state="closed"))
        await until(lambda: reporter.sent == 2)

    asyncio.run(main())
    assert [t["state"] for b in send.batches for t in b] == ["open", "closed"]
    assert reporter.pending == type(reporter.pending)()


def test_at_most_max_pending_wait_and_close_sends_the_rest():
    send = FlakySend(failures=10**6)
    reporter = CircuitReporter(send, retry_seconds=60, max_pending=3)

    async def main():
        for i in range(5):
            reporter.report(SimpleNamespace(node_id=i, name=f"n{i}"), breaker())
            await asyncio.sleep(0.02)

    asyncio.run(main())
    assert reporter.dropped == 2
    assert [t["node_id"] for t in reporter.pending] == [2, 3, 4]  # the newest stay
    send.failures = 0
    reporter.close()
    assert [t["node_id"] for b in send.batches for t in b] == [2, 3, 4]
