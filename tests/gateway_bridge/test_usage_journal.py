"""The usage journal (gateway_bridge.journal): a gateway process SIGKILLed
while its answered calls' events wait in the emitter's memory loses none of
them: the next process on its spool slot recovers them, and ingest stores
each once. The event is handed over before the answer's last bytes, so no
kill after the client has its answer can lose it."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from gateway_bridge import journal as journals
from gateway_bridge.emitter import UsageEmitter
from gateway_bridge.spool import Spool
from gateway_bridge.spool_slot import open_spool as _open_spool
from tests.gateway_bridge.harness import gateway_process
from tests.gateway_bridge.test_gateway_openai import client
from usage.ingest import ingest_events
from usage.models import CallRecord

CALLS = 12
BODY = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def call(url: str, raw: str) -> tuple[int, str]:
    req = urllib.request.Request(  # noqa: S310 - a local test gateway
        f"{url}/v1/chat/completions",
        data=json.dumps(BODY).encode(),
        headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
        # The whole answer, not only its head: the gateway promises the event is on
        # disk before the answer's last bytes, and the head goes out before them.
        assert json.loads(resp.read())["usage"]
        return resp.status, resp.headers["x-request-id"]


def test_a_sigkilled_gateways_answered_calls_are_ingested_once_after_restart(
    tenant, tmp_path, gateway_settings
):
    spool_dir = tmp_path / "spool"
    # Events wait a minute in memory before a batch is cut: the kill comes first.
    with gateway_process(
        tmp_path / "gw", GATEWAY_SPOOL_DIR=str(spool_dir), GATEWAY_EMIT_MAX_DELAY="60"
    ) as gw:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: call(gw.url, tenant.raw), range(CALLS)))
        assert [status for status, _ in answers] == [200] * CALLS
        gw.process.send_signal(signal.SIGKILL)
        gw.process.wait(10)
    ids = {rid for _, rid in answers}
    assert not list(spool_dir.glob("*.spool"))  # nothing was spooled: all still in memory

    # The next process to take the slot (here, this one) moves them into its spool.
    spool, lock_fd, journal = _open_spool(spool_dir, True)
    try:
        assert spool.pending().batches >= 1
        batches: list[list[dict]] = []
        spool.replay(batches.append)
        recovered = [e for b in batches for e in b]
        assert {e["request_id"] for e in recovered} == ids
        ingest_events(recovered)
        ingest_events(recovered)  # replayed twice (a crash after the send): stored once
    finally:
        journal.close()
        os.close(lock_fd)
    stored = list(
        CallRecord.objects.filter(request_id__in=ids).values_list("request_id", flat=True)
    )
    assert sorted(stored) == sorted(ids)
    assert not journals.leftovers(spool_dir / "usage-0")


def test_the_event_is_handed_over_before_the_answers_last_bytes(gw, tenant, monkeypatch):
    """Whatever the answer (whole, streamed, an error), the usage event is in
    the emitter (and so in the journal) when its last bytes go to the server:
    a SIGKILL once the client can have the answer finds the event on disk."""
    events_at_last_bytes: list[int] = []
    original = gw.gateway.handle

    async def handle(scope, receive, send):
        async def watched(message):
            if message["type"] == "http.response.body" and not message.get("more_body"):
                events_at_last_bytes.append(len(gw.emitter.events))
            await send(message)

        await original(scope, receive, watched)

    monkeypatch.setattr(gw.gateway, "handle", handle)
    c = client(gw, tenant.raw)
    c.chat.completions.create(**BODY)
    for _ in c.chat.completions.create(**BODY, stream=True):
        pass
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(**{**BODY, "model": "no-such-model"})
    assert events_at_last_bytes == [1, 2, 3]
    assert [e["status_code"] for e in gw.emitter.events] == [200, 200, 404]


def test_delivered_batches_retire_their_journal_files(tmp_path):
    sent: list[list[dict]] = []
    prefix = tmp_path / "usage-0"
    emitter = UsageEmitter(
        sent.append, Spool(tmp_path / "usage-0.spool"), max_delay=0.01,
        journal=journals.Journal(prefix),
    )  # fmt: skip
    try:
        for n in range(50):
            emitter.emit({"request_id": f"r{n}"})
        deadline = 100
        while sum(map(len, sent)) < 50 and deadline:
            time.sleep(0.05)
            deadline -= 1
        time.sleep(0.1)
        emitter.emit({"request_id": "last"})  # one more tick: the delivered files retire
        time.sleep(0.2)
        left = [e for p in journals.leftovers(prefix) for e in journals.read(p)]
        # Only events not yet known delivered may remain on disk.
        assert {e["request_id"] for e in left} <= {"last"}
    finally:
        assert emitter.close()
    assert not journals.leftovers(prefix)  # a clean shutdown leaves no journal
    assert sorted(e["request_id"] for b in sent for e in b) == sorted(
        [f"r{n}" for n in range(50)] + ["last"]
    )


def test_a_line_cut_short_by_the_crash_is_skipped(tmp_path):
    path = tmp_path / "usage-0.journal.1.1"
    path.write_bytes(b"""{"request_id":"a"}\n{"request_id":"b"}\n{"request_id":"c\0\0""")
    spool = Spool(tmp_path / "usage-0.spool")
    assert journals.adopt(tmp_path / "usage-0", spool) == 2
    batches: list[list[dict]] = []
    spool.replay(batches.append)
    assert batches == [[{"request_id": "a"}, {"request_id": "b"}]]
    assert not path.exists()


def test_a_full_file_is_replaced_on_the_spot_and_nothing_is_lost(tmp_path, monkeypatch):
    monkeypatch.setattr(journals, "FILE_BYTES", 64)  # two or three events a file
    journal = journals.Journal(tmp_path / "usage-0")
    for n in range(20):
        journal.write({"request_id": f"r{n:02d}"})
    files = journals.leftovers(tmp_path / "usage-0")
    assert len(files) > 5
    recovered = [e["request_id"] for p in files for e in journals.read(p)]
    assert recovered == [f"r{n:02d}" for n in range(20)]  # the process died here: all on disk
    journal.rotate(20)
    journal.retire(20)  # all delivered: every full file goes, the new one is empty
    assert [journals.read(p) for p in journals.leftovers(tmp_path / "usage-0")] == [[]]
    journal.close()
    assert not journals.leftovers(tmp_path / "usage-0")
