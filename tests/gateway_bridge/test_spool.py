"""The usage spool: batches survive in order, torn writes and crashes mid-replay."""

from __future__ import annotations

import pytest

from gateway_bridge.spool import Spool


def _batch(n: int) -> list[dict]:
    return [{"request_id": f"req-{n}-{i}", "input_tokens": i} for i in range(3)]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "spool" / "usage.jsonl"


def test_replay_sends_batches_in_order_and_removes_the_file(path):
    spool = Spool(path)
    for n in range(5):
        spool.append(_batch(n))
    assert spool.pending().batches == 5
    assert spool.pending().bytes == path.stat().st_size

    sent = []
    assert spool.replay(sent.append) == 5

    assert sent == [_batch(n) for n in range(5)]
    assert spool.pending() == (0, 0)
    assert not path.exists()
    assert not path.with_name(path.name + ".offset").exists()
    assert spool.replay(sent.append) == 0


def test_batches_survive_a_restart(path):
    spool = Spool(path)
    spool.append(_batch(1))
    spool.append(_batch(2))

    reopened = Spool(path)
    assert reopened.pending().batches == 2
    sent = []
    reopened.replay(sent.append)
    assert sent == [_batch(1), _batch(2)]


def test_a_torn_last_line_is_truncated_and_later_appends_are_intact(path):
    spool = Spool(path)
    spool.append(_batch(1))
    spool.append(_batch(2))
    good_size = path.stat().st_size
    with open(path, "ab") as f:  # a crash in the middle of writing batch 3
        f.write(b'{"seq":3,"crc":123,"batch":[{"request_id":"req-3-0","inp')

    reopened = Spool(path)
    assert path.stat().st_size == good_size
    assert reopened.pending().batches == 2
    reopened.append(_batch(4))

    sent = []
    assert reopened.replay(sent.append) == 3
    assert sent == [_batch(1), _batch(2), _batch(4)]


def test_a_corrupt_line_is_skipped_not_fatal(path):
    spool = Spool(path)
    spool.append(_batch(1))
    spool.append(_batch(2))
    spool.append(_batch(3))
    data = path.read_bytes()
    # Flip one payload byte of the second line: its checksum no longer matches.
    second = data.index(b"\n") + 1
    pos = data.index(b"req-2-0", second)
    path.write_bytes(data[:pos] + b"X" + data[pos + 1 :])

    reopened = Spool(path)
    sent = []
    assert reopened.replay(sent.append) == 2
    assert sent == [_batch(1), _batch(3)]
    assert reopened.corrupt_batches == 1
    assert not path.exists()


def test_a_failed_send_stops_replay_and_keeps_the_rest(path):
    spool = Spool(path)
    for n in range(4):
        spool.append(_batch(n))
    sent = []

    def flaky(batch):
        if batch == _batch(1):
            raise ConnectionError("broker down")
        sent.append(batch)

    with pytest.raises(ConnectionError):
        spool.replay(flaky)
    assert sent == [_batch(0)]
    assert spool.pending().batches == 3

    spool.replay(sent.append)
    assert sent == [_batch(n) for n in range(4)]  # batch 0 not sent again


def test_a_crash_mid_replay_resends_at_most_the_batch_in_flight(path):
    spool = Spool(path)
    for n in range(4):
        spool.append(_batch(n))
    sent = []

    class Crash(BaseException):
        """The process dying mid-send: no cleanup code runs after it."""

    def crash_on_third(batch):
        sent.append(batch)
        if batch == _batch(2):
            raise Crash

    with pytest.raises(Crash):
        spool.replay(crash_on_third)

    after_restart = Spool(path)  # state comes only from the files
    assert after_restart.pending().batches == 2
    after_restart.replay(sent.append)
    assert sent == [_batch(0), _batch(1), _batch(2), _batch(2), _batch(3)]


def test_a_stale_offset_file_after_compaction_is_ignored(path):
    spool = Spool(path)
    spool.append(_batch(1))
    spool.append(_batch(2))
    spool.replay(lambda b: None)
    # A crash between removing the data file and the offset file.
    path.with_name(path.name + ".offset").write_text('{"offset": 999, "seq": 2}')

    reopened = Spool(path)
    assert reopened.pending() == (0, 0)
    reopened.append(_batch(3))
    sent = []
    reopened.replay(sent.append)
    assert sent == [_batch(3)]


def test_appends_from_many_threads_are_all_kept(path):
    import threading

    spool = Spool(path)

    def writer(t):
        for n in range(20):
            spool.append(_batch(t * 100 + n))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    sent = []
    assert spool.replay(sent.append) == 80
    assert sorted(b[0]["request_id"] for b in sent) == sorted(
        _batch(t * 100 + n)[0]["request_id"] for t in range(4) for n in range(20)
    )
