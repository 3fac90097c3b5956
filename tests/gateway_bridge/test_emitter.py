"""The usage emitter: batching by size and time, spooling on broker failure,
replay on recovery, and a complete flush on close."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from gateway_bridge.emitter import UsageEmitter
from gateway_bridge.spool import Spool


def _event(n: int) -> dict:
    return {"request_id": f"req-{n:06d}", "input_tokens": n}


class Broker:
    """A fake publish: records batches; ``down`` makes it raise."""

    def __init__(self):
        self.batches: list[list[dict]] = []
        self.down = False
        self.lock = threading.Lock()

    def __call__(self, batch):
        if self.down:
            raise ConnectionError("broker unreachable")
        with self.lock:
            self.batches.append(batch)

    def ids(self) -> list[str]:
        with self.lock:
            return [e["request_id"] for b in self.batches for e in b]


def _wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    pytest.fail("condition not met in time")


@pytest.fixture
def spool(tmp_path):
    return Spool(tmp_path / "usage.jsonl")


@pytest.fixture
def broker():
    return Broker()


def test_full_batches_are_sent_without_waiting_for_the_delay(spool, broker):
    emitter = UsageEmitter(broker, spool, max_batch=10, max_delay=30)
    for n in range(25):
        emitter.emit(_event(n))
    _wait_for(lambda: len(broker.batches) == 2)
    assert [len(b) for b in broker.batches] == [10, 10]
    assert emitter.sent_batches == 2
    assert emitter.close(timeout=5)
    assert [len(b) for b in broker.batches] == [10, 10, 5]
    assert broker.ids() == [f"req-{n:06d}" for n in range(25)]


def test_a_partial_batch_is_sent_after_max_delay(spool, broker):
    emitter = UsageEmitter(broker, spool, max_batch=500, max_delay=0.2)
    started = time.monotonic()
    emitter.emit(_event(1))
    emitter.emit(_event(2))
    _wait_for(lambda: broker.batches)
    elapsed = time.monotonic() - started
    assert 0.15 <= elapsed < 2
    assert broker.batches == [[_event(1), _event(2)]]
    emitter.close()


def test_emit_does_no_io_on_the_event_loop(spool):
    """emit returns at once even while the publish is stuck."""
    release = threading.Event()
    emitter = UsageEmitter(lambda b: release.wait(10), spool, max_batch=1, max_delay=0.05)

    async def burst():
        t0 = time.perf_counter()
        for n in range(1000):
            emitter.emit(_event(n))
        return time.perf_counter() - t0

    assert asyncio.run(burst()) < 0.5
    release.set()
    assert emitter.close(timeout=10)
    assert emitter.emitted == 1000


def test_broker_failure_spools_and_replays_on_recovery(spool, broker):
    emitter = UsageEmitter(broker, spool, max_batch=5, max_delay=0.05, replay_interval=0.2)
    broker.down = True
    for n in range(20):
        emitter.emit(_event(n))
    _wait_for(lambda: emitter.spooled_batches == 4)
    assert broker.batches == []
    assert emitter.spool_pending == 4

    broker.down = False
    for n in range(20, 30):
        emitter.emit(_event(n))
    _wait_for(lambda: len(broker.ids()) == 30)
    assert emitter.close(timeout=5)

    ids = broker.ids()
    assert sorted(ids) == [f"req-{n:06d}" for n in range(30)]  # none lost, none twice
    assert ids[:20] == [f"req-{n:06d}" for n in range(20)]  # the spool went first
    # Batches cut while the spool was not yet replayed join it, behind the rest.
    assert emitter.replayed_batches == emitter.spooled_batches >= 4
    assert emitter.sent_batches + emitter.replayed_batches == 6
    assert emitter.spool_pending == 0
    assert not spool.path.exists()


def test_close_spools_what_the_broker_will_not_take(spool, broker, tmp_path):
    broker.down = True
    emitter = UsageEmitter(broker, spool, max_batch=100, max_delay=60)
    for n in range(7):
        emitter.emit(_event(n))
    assert emitter.close(timeout=5)
    assert emitter.spooled_batches == 1
    with pytest.raises(RuntimeError):
        emitter.emit(_event(99))

    # The next process replays it as soon as it starts.
    broker.down = False
    later = UsageEmitter(broker, Spool(tmp_path / "usage.jsonl"), max_delay=0.05)
    _wait_for(lambda: later.replayed_batches == 1)
    assert later.close(timeout=5)
    assert broker.ids() == [f"req-{n:06d}" for n in range(7)]


def test_counters(spool, broker):
    emitter = UsageEmitter(broker, spool, max_batch=4, max_delay=60)
    for n in range(10):
        emitter.emit(_event(n))
    assert emitter.emitted == 10
    emitter.close()
    assert (emitter.emitted, emitter.sent_batches, emitter.spooled_batches) == (10, 3, 0)


def test_many_producer_threads_lose_and_duplicate_nothing(spool, broker):
    emitter = UsageEmitter(broker, spool, max_batch=50, max_delay=0.02, replay_interval=0.05)

    def produce(t):
        for n in range(500):
            emitter.emit(_event(t * 10_000 + n))
            if n == 250:
                broker.down = t % 2 == 0  # flap the broker mid-stream

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    broker.down = False
    assert emitter.close(timeout=10)

    ids = broker.ids()
    assert len(ids) == len(set(ids)) == 2000
    assert emitter.spool_pending == 0


def test_rejects_bad_settings(spool, broker):
    with pytest.raises(ValueError, match="max_batch"):
        UsageEmitter(broker, spool, max_batch=0)
