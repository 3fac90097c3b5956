"""bench_gateway's bare pass-through floor, and the figures the command prints."""

from __future__ import annotations

import http.client
import json
import os
import pstats
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.inference_node.server_helpers import ROOT
from tooling.bench.floor import Floor
from tooling.bench.gateway_procs import free_port, start_floor

ANSWER = b'{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":3}}'
EVENTS = [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', b"data: [DONE]\n\n"]


class _Upstream(BaseHTTPRequestHandler):
    """A loopback node that records what reached it and answers a fixed body or stream."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, dict, bytes]] = []
    chunk_sent = threading.Event()

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        self.seen.append((self.command, self.path, dict(self.headers.items()), body))
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.send_header("x-node", "sim")
            self.end_headers()
            for event in EVENTS:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.send_header("x-node", "sim")
        self.end_headers()
        self.wfile.write(ANSWER)


@pytest.fixture
def upstream():
    _Upstream.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _post(port: int, path: str, body: bytes, headers: dict):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_floor_forwards_a_call_and_a_stream_verbatim(upstream):
    proc, url = start_floor(upstream, free_port())
    port = int(url.rsplit(":", 1)[1])
    try:
        # given a call with its own headers and a body
        body = b'{"model":"sim-chat-small","messages":[{"role":"user","content":"hi"}]}'
        headers = {"content-type": "application/json", "authorization": "Bearer node-token",
                   "x-custom": "kept"}  # fmt: skip
        # when it goes through the floor
        status, got_headers, got = _post(port, "/v1/chat/completions?x=1", body, headers)
        stream_status, stream_headers, streamed = _post(port, "/stream", b"{}", headers)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)

    # then the node saw the same method, path, query, headers and body
    method, path, seen_headers, seen_body = _Upstream.seen[0]
    assert (method, path, seen_body) == ("POST", "/v1/chat/completions?x=1", body)
    seen = {k.lower(): v for k, v in seen_headers.items()}
    assert seen["authorization"] == "Bearer node-token"
    assert seen["x-custom"] == "kept"
    assert seen["content-type"] == "application/json"
    assert "user-agent" not in seen  # nothing added by the client library
    # and the client got the node's answer unchanged: status, headers, body
    assert status == 201
    assert got == ANSWER
    assert got_headers["content-type"] == "application/json"
    assert got_headers["x-node"] == "sim"
    # a stream stays a stream (chunked), byte for byte
    assert stream_status == 200
    assert stream_headers["content-type"] == "text/event-stream"
    assert stream_headers.get("transfer-encoding") == "chunked"
    assert streamed == b"".join(EVENTS)


def test_floor_forwards_to_loopback_only():
    with pytest.raises(ValueError, match="loopback"):
        Floor("http://192.0.2.1:8000")
    with pytest.raises(ValueError, match="http://"):
        Floor("https://127.0.0.1:8000")
    assert Floor("http://[::1]:8000/").upstream == "http://[::1]:8000"


def test_bench_gateway_reports_the_floor_ratios_and_cpu_per_call(tmp_path):
    # A tiny run in its own var dir (own SQLite database, broker, spool).
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}  # fmt: skip
    env["CONSOLE_VAR_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "manage.py", "bench_gateway", "--seconds", "0.4", "--warmup", "0.1",
         "--steps", "4", "--modes", "plain,stream,native-stream", "--no-ingest",
         "--no-affinity"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report = json.loads(out.stdout)

    plain, stream, native = report["steps"]
    assert native["mode"] == "native-stream"
    for row in (plain, stream, native):
        for target in ("direct", "floor", "gateway"):
            assert row[target]["requests_per_second"] > 0
            assert row[target]["p50_ms"] > 0
            assert row[target]["p99_ms"] >= row[target]["p50_ms"]
            assert row[target]["errors"] == 0
        assert row["gateway_over_floor_rps"] == pytest.approx(
            row["gateway"]["requests_per_second"] / row["floor"]["requests_per_second"], abs=0.001
        )
        assert row["added_p50_ms"] == pytest.approx(
            row["gateway"]["p50_ms"] - row["direct"]["p50_ms"], abs=0.001
        )
        assert row["floor_added_p50_ms"] == pytest.approx(
            row["floor"]["p50_ms"] - row["direct"]["p50_ms"], abs=0.001
        )
        assert row["added_p50_over_floor_ms"] == pytest.approx(
            row["gateway"]["p50_ms"] - row["floor"]["p50_ms"], abs=0.001
        )
        assert row["cpu_us_per_call"]["gateway"] > 0
        assert row["cpu_us_per_call"]["floor"] > 0
        assert row["gateway_over_floor_cpu"] == pytest.approx(
            row["cpu_us_per_call"]["gateway"] / row["cpu_us_per_call"]["floor"], abs=0.001
        )
    for row in (stream, native):
        assert row["floor"]["ttft_p50_ms"] > 0
        assert row["added_ttft_p50_ms"] == pytest.approx(
            row["gateway"]["ttft_p50_ms"] - row["direct"]["ttft_p50_ms"], abs=0.001
        )
        assert "floor_added_ttft_p50_ms" in row
    # Native pass-through: the Anthropic stream's TTFT added over the vendor called direct.
    target = report["targets"]["native_stream_added_ttft_p50_ms_at_4_clients"]
    assert target["value"] == native["added_ttft_p50_ms"]
    targets = report["targets"]
    for mode, row in (("plain", plain), ("stream", stream)):
        rps = targets[f"{mode}_gateway_over_floor_rps_at_4_clients"]
        assert rps == {
            "value": row["gateway_over_floor_rps"],
            "target": ">= 0.75",
            "met": row["gateway_over_floor_rps"] >= 0.75,
        }
        cpu = targets[f"{mode}_gateway_over_floor_cpu_at_4_clients"]
        assert cpu["value"] == row["gateway_over_floor_cpu"] and cpu["target"] == "<= 1.4"
        assert targets[f"{mode}_cpu_us_per_call_at_4_clients"] == row["cpu_us_per_call"]
    assert targets["added_p50_over_floor_ms_at_4_clients"]["target"] == "<= 0.3"
    ttft = targets["added_ttft_p50_over_floor_ms_at_4_clients"]
    assert ttft["value"] == stream["added_ttft_p50_over_floor_ms"]
    assert ttft["value"] == pytest.approx(
        stream["gateway"]["ttft_p50_ms"] - stream["floor"]["ttft_p50_ms"], abs=0.001
    )
    assert report["gateway_errors"] == 0
    # The run names every switch it measured with: the default is what production runs.
    config = report["configuration"]
    assert config["production"] is True
    assert config["access_log"] is True and config["usage_journal"] is True
    assert config["routing_policy"] == "prefix_affinity" and config["processes"] == 1
    assert config["http_protocol"] == "console.server:GuardedHttpProtocol"


def test_with_work_switched_off_the_run_says_it_is_not_the_production_figure(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}  # fmt: skip
    env.update(CONSOLE_VAR_DIR=str(tmp_path), ACCESS_LOG="false")
    out = subprocess.run(
        [sys.executable, "manage.py", "bench_gateway", "--seconds", "0.3", "--warmup", "0.1",
         "--steps", "4", "--modes", "plain", "--no-ingest", "--no-affinity", "--no-floor",
         "--processes", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report = json.loads(out.stdout)
    assert report["configuration"]["access_log"] is False
    assert report["configuration"]["production"] is False
    assert report["configuration"]["processes"] == 2
    [row] = report["steps"]
    assert row["gateway"]["requests_per_second"] > 0 and row["gateway"]["errors"] == 0


def test_profile_writes_the_gateways_stats_and_is_not_the_headline(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}  # fmt: skip
    env["CONSOLE_VAR_DIR"] = str(tmp_path)
    stats = tmp_path / "gateway.prof"
    out = subprocess.run(
        [sys.executable, "manage.py", "bench_gateway", "--seconds", "0.3", "--warmup", "0.1",
         "--steps", "4", "--modes", "plain", "--no-ingest", "--no-affinity", "--no-floor",
         "--profile", str(stats)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report = json.loads(out.stdout)
    assert report["configuration"]["profiler"] is True
    assert report["configuration"]["production"] is False
    [row] = report["steps"]
    profiled = pstats.Stats(str(stats)).stats  # type: ignore[attr-defined]  # pstats keeps them here
    handled = [
        v for (f, _, name), v in profiled.items() if f.endswith("gateway.py") and name == "handle"
    ]
    assert handled and handled[0][1] >= row["gateway"]["requests_per_second"] * 0.3 * 0.5
