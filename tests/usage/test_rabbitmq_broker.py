"""RabbitMQ as the Celery broker (``CELERY_BROKER_URL=amqp://...``, as in
``.ci/run``'s RabbitMQ step): a batch the gateway's emitter hands over is
confirmed by the broker and ingested by a real worker; while RabbitMQ is
unreachable (a closed port: the real server is never stopped) or refuses the
publish (a nack), the batch goes to the spool and is replayed once the broker
takes it again, nothing lost, nothing doubled.

Skipped unless the configured broker is RabbitMQ; with it configured but not
answering, skipped with the reason locally and failed under CI."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from django.conf import settings
from django.db.models import Sum

from gateway_bridge.emitter import CelerySend, UsageEmitter
from gateway_bridge.spool import Spool
from tests.services import broker_is_rabbitmq, require, start_celery_worker, wait_for_worker
from tests.usage.factories import event
from usage.models import CallRecord, Grain, Rollup

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _rabbitmq():
    if not broker_is_rabbitmq():
        pytest.skip("the configured broker is not RabbitMQ (set CELERY_BROKER_URL=amqp://...)")


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends


class Switch:
    """The emitter's send: a real confirmed publish to ``current``'s broker."""

    def __init__(self, send: CelerySend):
        self.current = send
        self.calls = 0

    def __call__(self, batch):
        self.calls += 1
        self.current(batch)

    def to(self, send: CelerySend) -> None:
        self.current.close()
        self.current = send


def stored_exactly_once(key, events, worker) -> None:
    ids = {e["request_id"] for e in events}
    wait_for_worker(
        worker, lambda: CallRecord.objects.count() >= len(ids), "store the events", timeout=60
    )
    time.sleep(1)  # a duplicate would land by now
    assert set(CallRecord.objects.values_list("request_id", flat=True)) == ids
    org = Rollup.objects.filter(organization_id=key.organization_id, grain=Grain.ORG)
    assert org.aggregate(calls=Sum("calls"))["calls"] == len(ids)


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_a_handed_over_batch_is_confirmed_and_ingested(catalog, key, worker, tmp_path):
    send = CelerySend()
    assert send.confirms
    emitter = UsageEmitter(send, Spool(tmp_path / "usage.jsonl"), max_batch=20, max_delay=0.05)
    events = [event(key) for _ in range(60)]
    for e in events:
        emitter.emit(e)
    assert emitter.close(timeout=30)
    send.close()
    # Every batch confirmed by RabbitMQ: none needed the spool.
    assert emitter.sent_batches == 3
    assert emitter.spooled_batches == emitter.dropped_batches == 0
    stored_exactly_once(key, events, worker)


def test_unreachable_rabbitmq_spools_and_replays_once_reachable(catalog, key, worker, tmp_path):
    # RabbitMQ "down": the same URL on a port nothing listens on.
    url = urlsplit(settings.CELERY_BROKER_URL)
    down = url._replace(netloc=f"{url.netloc.rsplit(':', 1)[0]}:{closed_port()}").geturl()
    send = Switch(CelerySend(broker_url=down, connect_timeout=0.5))
    spool = Spool(tmp_path / "usage.jsonl")
    emitter = UsageEmitter(send, spool, max_batch=10, max_delay=0.05, replay_interval=0.2)
    events = [event(key) for _ in range(70)]

    started = time.monotonic()
    for e in events[:30]:
        emitter.emit(e)
    deadline = time.monotonic() + 20
    while emitter.spooled_batches < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emitter.spooled_batches == 3, "the batches did not reach the spool"
    assert time.monotonic() - started < 10, "the publish did not fail fast"
    assert emitter.sent_batches == 0
    assert emitter.spool_pending == 3

    # Reachable again: the spool is replayed, then the new batches are sent.
    send.to(CelerySend())
    for e in events[30:]:
        emitter.emit(e)
    assert emitter.close(timeout=30)
    send.current.close()
    assert emitter.spool_pending == 0
    # New batches queue behind the spool while it holds any: 7 batches in all.
    assert emitter.replayed_batches >= 3
    assert emitter.sent_batches + emitter.replayed_batches == 7
    assert emitter.dropped_batches == 0
    stored_exactly_once(key, events, worker)


def rabbitmqctl(command: str, *args: str, check: bool = True) -> None:
    """``rabbitmqctl <command> -p <the configured vhost> <args>``."""
    vhost = unquote(urlsplit(settings.CELERY_BROKER_URL).path[1:]) or "/"
    argv = ["rabbitmqctl", command, "-p", vhost, *args]
    subprocess.run(argv, check=check, capture_output=True, timeout=60)


def test_a_nacked_publish_is_spooled_not_lost(catalog, key, tmp_path):
    """RabbitMQ refuses the messages (a policy: the queue takes none,
    overflow reject-publish): each publish is nacked, so its batch goes to the
    spool; once the policy is cleared the spool is replayed and stored once."""
    require(shutil.which("rabbitmqctl") is not None, "rabbitmqctl is not installed")
    queue = f"nack-test-{uuid.uuid4().hex[:8]}"
    policy = f"reject-{queue}"
    try:
        rabbitmqctl("set_policy", "--apply-to", "queues", policy, f"^{queue}$",
                    '{"max-length": 0, "overflow": "reject-publish"}')  # fmt: skip
    except subprocess.CalledProcessError as exc:
        require(False, f"rabbitmqctl cannot set a policy on the broker: {exc.stderr}")
    worker = start_celery_worker(ROOT, CELERY_QUEUE=queue)
    try:
        send = CelerySend(queue=queue)
        spool = Spool(tmp_path / "usage.jsonl")
        emitter = UsageEmitter(send, spool, max_batch=10, max_delay=0.05, replay_interval=0.2)
        events = [event(key) for _ in range(40)]
        for e in events[:20]:
            emitter.emit(e)
        deadline = time.monotonic() + 20
        while emitter.spooled_batches < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert emitter.spooled_batches == 2, "the nacked batches did not reach the spool"
        assert emitter.sent_batches == 0

        rabbitmqctl("clear_policy", policy)
        for e in events[20:]:
            emitter.emit(e)
        assert emitter.close(timeout=30)
        send.close()
        assert emitter.spool_pending == 0
        assert emitter.dropped_batches == 0
        stored_exactly_once(key, events, worker)
    finally:
        stop(worker)
        rabbitmqctl("clear_policy", policy, check=False)
        rabbitmqctl("delete_queue", queue, check=False)
