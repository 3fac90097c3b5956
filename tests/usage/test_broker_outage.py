"""A real broker stopped and started again under the usage emitter: a private
Redis (append-only file, fsync always) is the Celery broker; while it is down
the emitter's batches go to the spool, and when it is back they are replayed
and a real worker stores every call exactly once."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from django.db.models import Sum

from gateway_bridge.emitter import CelerySend, UsageEmitter
from gateway_bridge.spool import Spool
from tests.services import require, start_celery_worker, wait_for_worker
from tests.usage.factories import event
from usage.models import CallRecord, Grain, Rollup

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    def __init__(self, port: int, data: Path):
        self.port = port
        self.data = data
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        pytest.fail("the private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def broker(tmp_path):
    require(shutil.which("redis-server") is not None, "redis-server is not installed")
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    yield server
    server.stop()


def test_broker_stopped_and_started_loses_and_doubles_nothing(catalog, key, broker, tmp_path):
    worker = start_celery_worker(ROOT, CELERY_BROKER_URL=broker.url)
    try:
        spool = Spool(tmp_path / "spool" / "usage.jsonl")
        send = CelerySend(connect_timeout=0.5, broker_url=broker.url)
        emitter = UsageEmitter(send, spool, max_batch=10, max_delay=0.05, replay_interval=0.2)
        events = [event(key) for _ in range(90)]

        for e in events[:30]:
            emitter.emit(e)
        wait_until(lambda: emitter.sent_batches >= 3, "the first batches were not published")

        broker.stop()
        for e in events[30:60]:
            emitter.emit(e)
        wait_until(lambda: emitter.spooled_batches >= 1, "nothing was spooled")
        assert emitter.spool_pending >= 1

        broker.start()  # same port, same append-only file
        for e in events[60:]:
            emitter.emit(e)
        assert emitter.close(timeout=30)
        send.close()
        assert emitter.spool_pending == 0
        assert emitter.replayed_batches >= 1
        assert emitter.dropped_batches == 0

        wait_for_worker(
            worker, lambda: CallRecord.objects.count() >= 90, "store the events", timeout=90
        )
        time.sleep(1)  # a duplicate publish would land by now
        ids = {e["request_id"] for e in events}
        assert set(CallRecord.objects.values_list("request_id", flat=True)) == ids
        org = Rollup.objects.filter(organization_id=key.organization_id, grain=Grain.ORG)
        assert org.aggregate(calls=Sum("calls"))["calls"] == 90
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()


def wait_until(condition, message: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(message)
