"""The embedded broker (console.kernel.broker_fs): a message file appears whole or
not at all, even when the writer is slow or dies between writing and
renaming; a file that is not a whole kombu message (empty, truncated,
garbage, the wrong shape) is moved to quarantine with a warning and the next
message is delivered; a real worker survives such a file and keeps working."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kombu import Connection
from kombu.transport import filesystem as kombu_fs
from kombu.transport import get_transport_cls

from console.kernel import broker_fs

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "embedded-test"


def _options(base: Path, **extra) -> dict:
    for sub in ("queue", "processed", "control"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(base / "queue"),
        "data_folder_out": str(base / "queue"),
        "processed_folder": str(base / "processed"),
        "control_folder": str(base / "control"),
        "quarantine_folder": str(base / "quarantine"),
        "store_processed": False,
        "polling_interval": 0.01,
        **extra,
    }


@pytest.fixture(autouse=True)
def _fresh_bindings():
    """kombu's filesystem transports share one in-process record of the
    bindings made: a queue bound in another test's folders would not be bound
    again in this test's (its control folder would stay empty)."""
    broker_fs.Transport.global_state.clear()
    yield
    broker_fs.Transport.global_state.clear()


@pytest.fixture
def broker(tmp_path):
    broker_fs.install()
    conn = Connection("filesystem://", transport_options=_options(tmp_path))
    yield conn
    conn.release()


def _messages(folder: Path, queue: str = QUEUE) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.partition(".")[2] == f"{queue}.msg")


# --- which transport ---------------------------------------------------------


def test_filesystem_and_consolefs_resolve_to_the_safe_transport(broker):
    assert get_transport_cls("filesystem") is broker_fs.Transport
    assert get_transport_cls("consolefs") is broker_fs.Transport
    assert isinstance(broker.default_channel, broker_fs.Channel)
    with Connection("consolefs://", transport_options=broker.transport_options) as conn:
        assert isinstance(conn.default_channel, broker_fs.Channel)


def test_the_app_worker_and_usage_emitter_use_it_when_embedded(settings):
    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        pytest.skip("the embedded broker is configured only when CELERY_BROKER_URL is unset")
    from console.kernel.celery import app
    from gateway_bridge.emitter import CelerySend

    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["quarantine_folder"] == str(
        settings.BROKER_DIR / "quarantine"
    )
    with app.connection_for_write() as conn:
        assert isinstance(conn.default_channel, broker_fs.Channel)
        assert conn.transport_cls == "filesystem"  # what console.kernel.probes checks
    with app.connection_for_read() as conn:
        assert isinstance(conn.default_channel, broker_fs.Channel)

    send = CelerySend(queue=QUEUE)
    try:
        assert isinstance(send._connection().default_channel, broker_fs.Channel)
        send([{"request_id": "embedded-broker-test"}])
        queue_dir = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
        (published,) = _messages(queue_dir)
        assert json.loads(published.read_bytes())["headers"]["task"] == "usage.ingest_batch"
        assert not [p for p in queue_dir.iterdir() if p.name.endswith(broker_fs.TEMP_SUFFIX)]
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(QUEUE)
        if hasattr(send, "close"):
            send.close()


# --- atomic writes -----------------------------------------------------------


def test_a_slow_write_is_never_seen_partially(broker, monkeypatch):
    real_write_all = broker_fs._write_all

    def slow_write_all(fd, data):
        # byte by byte, the way a loaded disk or a preempted writer would
        for i in range(0, len(data), 64):
            real_write_all(fd, data[i : i + 64])
            time.sleep(0.002)

    monkeypatch.setattr(broker_fs, "_write_all", slow_write_all)
    queue_dir = Path(broker.transport_options["data_folder_in"])
    body = {"payload": "x" * 4000}
    seen: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def watch():
        # a reader that lists the folder and reads whatever matches, as kombu does
        while not stop.is_set():
            for path in _messages(queue_dir):
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                try:
                    json.loads(data)
                except ValueError as exc:
                    errors.append(f"{path.name}: {exc} ({len(data)} bytes)")
                seen.append(data)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        q = broker.SimpleQueue(QUEUE)
        for _ in range(5):
            q.put(body)
    finally:
        stop.set()
        watcher.join()
    assert not errors
    assert seen  # the watcher did see the messages, each whole
    got = [q.get(timeout=1) for _ in range(5)]
    for message in got:
        assert message.payload == body
        message.ack()
    q.close()
    assert not Path(broker.transport_options["quarantine_folder"]).exists()


def test_a_concurrent_consumer_gets_whole_messages_while_a_slow_writer_publishes(
    broker, monkeypatch
):
    real_write_all = broker_fs._write_all

    def slow_write_all(fd, data):
        half = len(data) // 2
        real_write_all(fd, data[:half])
        time.sleep(0.05)
        real_write_all(fd, data[half:])

    monkeypatch.setattr(broker_fs, "_write_all", slow_write_all)
    channel = broker.default_channel
    received: list = []

    def consume():
        deadline = time.monotonic() + 10
        while len(received) < 10 and time.monotonic() < deadline:
            try:
                received.append(channel._get(QUEUE))
            except broker_fs.Empty:
                time.sleep(0.001)

    reader = threading.Thread(target=consume)
    reader.start()
    with Connection("filesystem://", transport_options=broker.transport_options) as producer:
        for i in range(10):
            producer.default_channel._put(QUEUE, _kombu_message(i))
    reader.join()
    assert [m["body"] for m in received] == [str(i) for i in range(10)]
    assert not Path(broker.transport_options["quarantine_folder"]).exists()


CRASH = """
import os, sys
sys.path.insert(0, {root!r})
from kombu import Connection
from console.kernel import broker_fs
broker_fs.install()
where = sys.argv[1]
real_write_all, real_fsync = broker_fs._write_all, broker_fs.os.fsync
def write_half_and_die(fd, data):
    real_write_all(fd, data[: len(data) // 2])
    os._exit(3)
def fsync_and_die(fd):
    real_fsync(fd)
    os._exit(3)  # written and synced, never renamed
if where == "write":
    broker_fs._write_all = write_half_and_die
else:
    broker_fs.os.fsync = fsync_and_die
conn = Connection("filesystem://", transport_options={options!r})
conn.SimpleQueue({queue!r}).put({{"never": "seen"}})
"""


@pytest.mark.parametrize("where", ["write", "rename"])
def test_a_writer_dying_before_the_rename_leaves_no_message(broker, where):
    options = broker.transport_options
    script = CRASH.format(root=str(ROOT), options=options, queue=QUEUE)
    proc = subprocess.run([sys.executable, "-c", script, where], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    queue_dir = Path(options["data_folder_in"])
    leftovers = [p.name for p in queue_dir.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].endswith(broker_fs.TEMP_SUFFIX)
    assert not _messages(queue_dir)
    channel = broker.default_channel
    assert channel._size(QUEUE) == 0
    with pytest.raises(broker_fs.Empty):
        channel._get(QUEUE)
    # the next publish is delivered whole; the dead writer's file stays ignored
    q = broker.SimpleQueue(QUEUE)
    q.put({"after": "crash"})
    message = q.get(timeout=1)
    assert message.payload == {"after": "crash"}
    message.ack()
    q.close()
    assert not Path(options["quarantine_folder"]).exists()


def test_a_failed_write_raises_a_channel_error_and_leaves_nothing(broker, monkeypatch):
    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(broker_fs, "_write_all", full_disk)
    with pytest.raises(broker_fs.ChannelError):
        broker.default_channel._put(QUEUE, _kombu_message(0))
    assert not list(Path(broker.transport_options["data_folder_in"]).iterdir())


# --- quarantine --------------------------------------------------------------


def _kombu_message(n) -> dict:
    return {
        "body": str(n),
        "content-encoding": "utf-8",
        "content-type": "text/plain",
        "headers": {},
        "properties": {
            "body_encoding": "utf-8",
            "delivery_tag": f"tag-{n}",
            "delivery_info": {"exchange": QUEUE, "routing_key": QUEUE},
            "delivery_mode": 2,
            "priority": 0,
        },
    }


BAD_FILES = {
    "empty": b"",
    "blank": b"  \n",
    "truncated": json.dumps(_kombu_message(1)).encode()[:40],
    "garbage": b"\x00\xff\xfe not a message",
    "json-list": b"[1, 2, 3]",
    "not-kombu": b'{"hello": "world"}',
    "no-delivery-info": json.dumps({"body": "x", "properties": {"delivery_tag": "t"}}).encode(),
    "bad-base64": json.dumps(
        {
            **_kombu_message(2),
            "properties": {**_kombu_message(2)["properties"], "body_encoding": "base64"},
            "body": "abc",
        }
    ).encode(),
}


def test_bad_files_are_quarantined_with_a_warning_and_the_next_message_delivered(broker, caplog):
    queue_dir = Path(broker.transport_options["data_folder_in"])
    quarantine = Path(broker.transport_options["quarantine_folder"])
    names = []
    for i, (kind, data) in enumerate(BAD_FILES.items()):
        name = f"{i:04d}_{kind}.{QUEUE}.msg"  # older than any real message: read first
        (queue_dir / name).write_bytes(data)
        names.append(name)
    q = broker.SimpleQueue(QUEUE)
    q.put({"good": 1})
    q.put({"good": 2})

    with caplog.at_level(logging.WARNING, logger="console.kernel.broker_fs"):
        first = q.get(timeout=2)
        second = q.get(timeout=2)
    assert (first.payload, second.payload) == ({"good": 1}, {"good": 2})
    first.ack()
    second.ack()
    q.close()

    assert sorted(p.name for p in quarantine.iterdir()) == names
    for name, data in zip(names, BAD_FILES.values(), strict=True):
        assert (quarantine / name).read_bytes() == data
    assert not list(queue_dir.iterdir())
    warned = [r for r in caplog.records if r.name == "console.kernel.broker_fs"]
    assert [r.levelno for r in warned] == [logging.WARNING] * len(names)
    for name, record in zip(names, warned, strict=True):
        assert name in record.getMessage()
        assert "quarantine" in record.getMessage()


def test_get_never_raises_on_a_bad_file_and_reports_empty_after(broker):
    queue_dir = Path(broker.transport_options["data_folder_in"])
    (queue_dir / f"1_x.{QUEUE}.msg").write_bytes(b"{")
    channel = broker.default_channel
    with pytest.raises(broker_fs.Empty):
        channel._get(QUEUE)
    assert (Path(broker.transport_options["quarantine_folder"]) / f"1_x.{QUEUE}.msg").exists()


def test_default_quarantine_folder_is_beside_the_queue_folder(tmp_path):
    broker_fs.install()
    options = _options(tmp_path)
    del options["quarantine_folder"]
    with Connection("filesystem://", transport_options=options) as conn:
        assert conn.default_channel.quarantine_folder == str(tmp_path.resolve() / "quarantine")


# --- kombu's behaviour kept --------------------------------------------------


def test_processed_folder_keeps_read_messages_when_asked(tmp_path):
    broker_fs.install()
    options = _options(tmp_path, store_processed=True)
    with Connection("filesystem://", transport_options=options) as conn:
        q = conn.SimpleQueue(QUEUE)
        q.put({"keep": "me"})
        message = q.get(timeout=1)
        message.ack()
        q.close()
    (kept,) = (tmp_path / "processed").iterdir()
    assert kept.name.endswith(f".{QUEUE}.msg")
    assert json.loads(kept.read_bytes())["body"]


def test_messages_written_by_kombus_own_transport_are_read(broker):
    options = broker.transport_options
    with Connection(transport=kombu_fs.Transport, transport_options=options) as stock:
        q = stock.SimpleQueue(QUEUE)
        q.put({"from": "stock kombu"})
        q.close()
    q = broker.SimpleQueue(QUEUE)
    message = q.get(timeout=1)
    assert message.payload == {"from": "stock kombu"}
    message.ack()
    q.close()


def test_an_unacked_message_is_restored_whole(broker):
    q = broker.SimpleQueue(QUEUE)
    q.put({"n": 1})
    message = q.get(timeout=1)
    message.requeue()
    again = q.get(timeout=1)
    assert again.payload == {"n": 1}
    again.ack()
    q.close()


# --- a real worker -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_a_worker_survives_a_bad_file_and_keeps_consuming(settings):
    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        pytest.skip("the embedded broker is configured only when CELERY_BROKER_URL is unset")
    from console.kernel.celery import registered_task
    from tests.services import start_celery_worker, wait_for_worker

    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    queue_dir = Path(options["data_folder_in"])
    quarantine = Path(options["quarantine_folder"])
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    bad = {f"0000_garbage.{queue}.msg": b"\x00garbage", f"0001_empty.{queue}.msg": b""}

    proc = start_celery_worker(ROOT)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # a first task: the worker is up and consuming
        registered_task("usage.prune_calls").apply_async()
        wait_for_worker(proc, lambda: _ran(output, "usage.prune_calls", 1), "run a first task")

        for name, data in bad.items():
            (queue_dir / name).write_bytes(data)
        wait_for_worker(
            proc,
            lambda: all((quarantine / name).exists() for name in bad),
            "quarantine the bad files",
        )
        registered_task("usage.prune_calls").apply_async()
        wait_for_worker(proc, lambda: _ran(output, "usage.prune_calls", 2), "run a task after")
        assert proc.poll() is None
        assert not any(name in os.listdir(queue_dir) for name in bad)
        text = "".join(output)
        assert "Unrecoverable error" not in text
        for name in bad:
            assert name in text  # the warning names it
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        for name in bad:
            (quarantine / name).unlink(missing_ok=True)


def _ran(output: list[str], task: str, times: int) -> bool:
    return sum(1 for line in list(output) if task in line and "succeeded" in line.lower()) >= times
