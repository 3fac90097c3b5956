"""The gateway's metrics across the processes of a host: each process's
snapshot, the merge a scrape renders (counters and histograms summed, a dead
process's counters archived, its gauges dropped, totals never going down),
the bounded labels and the fixed counter types."""

from __future__ import annotations

import json

from gateway_bridge.metrics import MAX, MIN, GatewayMetrics, fold, merge
from gateway_bridge.metrics_dir import ARCHIVE, MetricsDirectory

CATALOG = {"sim-chat-small": object(), "sim-chat-large": object()}


def worker(in_flight=0, circuit_open=0, calls=0, model="sim-chat-small", max_models=100):
    m = GatewayMetrics(max_models=max_models)
    m.gauge("gateway_circuit_open", "open", ("node",), lambda: [(("a",), circuit_open)], agg=MAX)
    m.counter("gateway_usage_events_total", "events", (), lambda: [((), calls)])
    m.in_flight = in_flight
    for _ in range(calls):
        m.observe_call(
            "openai", "chat.completions", 200, False, 0.1, None, 0.001,
            m.model_label(model, CATALOG),
        )  # fmt: skip
    return m


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def types(text: str) -> dict[str, str]:
    return {
        line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")
    }


REQ = 'gateway_requests_total{protocol="openai",endpoint="chat.completions",model="sim-chat-small",status="200"}'


def test_a_merge_sums_counters_and_histograms_and_combines_gauges_by_meaning():
    a, b = (
        worker(in_flight=2, circuit_open=0, calls=3),
        worker(in_flight=5, circuit_open=1, calls=4),
    )
    merged = merge([a.snapshot(), b.snapshot()], None, a.specs())
    got = samples(a.render(merged))
    assert got[REQ] == 7
    assert got["gateway_usage_events_total"] == 7
    assert got['gateway_request_duration_seconds_count{protocol="openai",stream="false"}'] == 7
    assert (
        got['gateway_request_duration_seconds_bucket{protocol="openai",stream="false",le="+Inf"}']
        == 7
    )
    assert got["gateway_in_flight"] == 7  # calls in flight: the host's sum
    assert got['gateway_circuit_open{node="a"}'] == 1  # open in any process: open
    assert got["gateway_processes"] == 2


def test_process_metrics_add_up_and_start_time_is_the_oldest():
    a, b = worker(), worker()
    sa, sb = a.snapshot(), b.snapshot()
    sa["gauges"]["process_start_time_seconds"] = [[[], 100.0]]
    sb["gauges"]["process_start_time_seconds"] = [[[], 50.0]]
    sa["gauges"]["process_resident_memory_bytes"] = [[[], 1000]]
    sb["gauges"]["process_resident_memory_bytes"] = [[[], 2000]]
    sa["counters"]["process_cpu_seconds_total"] = [[[], 1.5]]
    sb["counters"]["process_cpu_seconds_total"] = [[[], 2.0]]
    assert a.specs()["process_start_time_seconds"].agg == MIN
    got = samples(a.render(merge([sa, sb], None, a.specs())))
    assert got["process_start_time_seconds"] == 50.0
    assert got["process_resident_memory_bytes"] == 3000
    assert got["process_cpu_seconds_total"] == 3.5
    assert got["process_open_fds"] > 0


def test_a_dead_workers_counters_are_kept_and_its_gauges_dropped():
    a, b = worker(in_flight=1, calls=3), worker(in_flight=4, circuit_open=1, calls=5)
    archive = fold(None, b.snapshot())  # b died
    got = samples(a.render(merge([a.snapshot()], archive, a.specs())))
    assert got[REQ] == 8
    assert got["gateway_usage_events_total"] == 8
    assert got["gateway_in_flight"] == 1
    assert got['gateway_circuit_open{node="a"}'] == 0
    assert got["gateway_processes"] == 1
    # and a second dead worker adds to the archive
    archive = fold(archive, worker(calls=2).snapshot())
    assert samples(a.render(merge([a.snapshot()], archive, a.specs())))[REQ] == 10


def test_counter_types_and_label_names():
    m = worker(calls=1)
    m.error("no_healthy_node")
    text = m.render()
    kinds = types(text)
    for name in ("gateway_requests_total", "gateway_errors_total", "gateway_usage_events_total"):
        assert kinds[name] == "counter"
    assert kinds["gateway_circuit_open"] == "gauge"
    assert kinds["process_cpu_seconds_total"] == "counter"
    assert 'gateway_errors_total{error="no_healthy_node"} 1' in text
    assert 'code="' not in text
    # every counter's name ends in _total
    assert all(n.endswith("_total") for n, k in kinds.items() if k == "counter")


def test_the_model_label_is_bounded():
    m = GatewayMetrics(max_models=1)
    assert m.model_label("sim-chat-small", CATALOG) == "sim-chat-small"
    assert m.model_label("sim-chat-large", CATALOG) == "other"  # past the cap
    assert m.model_label("made-up-model-123", CATALOG) == "other"  # not in the catalogue
    assert m.model_label(None, CATALOG) == "none"
    assert m.model_label("sim-chat-small", {}) == "sim-chat-small"  # once named, kept


def test_error_codes_are_bounded():
    m = GatewayMetrics()
    for i in range(1000):
        m.error(f"code_{i}")
    assert len(m.errors) <= 201 and m.errors["other"] > 0


def test_a_read_counter_keeps_a_series_its_source_dropped():
    nodes = {"a": 3, "b": 1}
    m = GatewayMetrics()
    m.counter(
        "gateway_circuit_openings_total",
        "x",
        ("node",),
        lambda: [((n,), v) for n, v in nodes.items()],
    )
    m.snapshot()
    del nodes["b"]  # the node was deleted
    assert 'gateway_circuit_openings_total{node="b"} 1' in m.render()


# --- the shared directory -------------------------------------------------------------


def total(directory: MetricsDirectory, m: GatewayMetrics) -> float:
    live, archive = directory.collect(m.snapshot())
    return samples(m.render(merge(live, archive, m.specs())))[REQ]


def test_two_processes_share_a_directory_and_a_dead_ones_counters_stay(tmp_path):
    a, b = worker(calls=3), worker(calls=5)
    da, db = MetricsDirectory(tmp_path), MetricsDirectory(tmp_path)
    da.open()
    db.open()
    db.write(b.snapshot())
    assert total(da, a) == 8
    assert total(db, b) == 8  # whichever process is scraped
    # b serves two more calls, then dies (its last snapshot written on close)
    for _ in range(2):
        b.observe_call("openai", "chat.completions", 200, False, 0.1, None, None, "sim-chat-small")
    db.close(b.snapshot())
    seen = [total(da, a) for _ in range(3)]
    assert seen == [10, 10, 10]  # archived once, never counted twice
    assert not db.snapshot_path.exists() and (tmp_path / ARCHIVE).exists()
    live, archive = da.collect(a.snapshot())
    assert len(live) == 1
    gauges = samples(a.render(merge(live, archive, a.specs())))
    assert gauges["gateway_processes"] == 1


def test_totals_never_go_down_when_a_worker_is_killed(tmp_path):
    # A process killed without closing: its lock is free, its last snapshot
    # (up to a second old) is what is archived.
    a, b = worker(calls=1), worker(calls=4)
    da, db = MetricsDirectory(tmp_path), MetricsDirectory(tmp_path)
    da.open()
    db.open()
    db.write(b.snapshot())
    before = total(da, a)
    import os

    os.close(db._lock_fd)  # as a SIGKILL would
    after = [total(da, a) for _ in range(3)]
    assert before == 5 and after == [5, 5, 5]
    # a new process on the same pid gets another name and starts from zero
    c = MetricsDirectory(tmp_path)
    c.open()
    assert c.stem != db.stem
    c.write(worker(calls=1).snapshot())
    assert total(da, a) == 6


def test_a_stale_snapshot_never_replaces_a_newer_one(tmp_path):
    m = worker(calls=1)
    d = MetricsDirectory(tmp_path)
    d.open()
    old = m.snapshot()
    m.observe_call("openai", "chat.completions", 200, False, 0.1, None, None, "sim-chat-small")
    new = m.snapshot()
    d.write(new)
    d.write(old)  # the background write that lost the race
    assert json.loads(d.snapshot_path.read_text())["seq"] == new["seq"]


def test_unreadable_files_are_skipped(tmp_path):
    a = worker(calls=2)
    d = MetricsDirectory(tmp_path)
    d.open()
    other = MetricsDirectory(tmp_path)
    other.open()
    other.snapshot_path.write_text("{not json")
    assert total(d, a) == 2


def test_the_lock_of_a_process_that_died_before_its_first_snapshot_is_swept(tmp_path):
    stale = tmp_path / "gw-1-0123456789ab.lock"
    tmp_path.mkdir(exist_ok=True)
    stale.write_text("")
    a = worker(calls=1)
    d = MetricsDirectory(tmp_path)
    d.open()
    assert total(d, a) == 1
    assert not stale.exists()
    assert (tmp_path / f"{d.stem}.lock").exists()  # its own stays
