"""The load generator against a simulator node, and its command line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time as clock
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from console.features.capacity.loadgen import run_load
from tests.inference_node.server_helpers import ROOT, node_process

CHAT = "/v1/chat/completions"


def chat(max_tokens: int) -> dict:
    return {
        "model": "sim-chat-small",
        "messages": [{"role": "user", "content": "Count to three."}],
        "max_tokens": max_tokens,
    }


def test_counts_percentiles_time_to_first_token_and_errors():
    with node_process("--profile", "instant", via="module") as node:
        url = node.base_url + CHAT
        plain = run_load(url, [chat(3)], {}, concurrency=4, seconds=0.6, warmup=0.2)
        streamed = run_load(url, [chat(3), chat(6)], [], 4, 0.6, stream=True)
    with node_process("--profile", "instant", "--fault-500-rate", "1", via="module") as node:
        failing = run_load(node.base_url + CHAT, [chat(3)], (), concurrency=2, seconds=0.4)

    assert plain["requests"] > 20
    assert plain["ok"] == plain["requests"]
    assert plain["statuses"] == {"200": plain["requests"]}
    assert plain["errors"] == 0
    assert plain["requests_per_second"] == round(plain["requests"] / 0.6, 1)
    assert 0 < plain["p50_ms"] <= plain["p90_ms"] <= plain["p99_ms"] <= plain["max_ms"]
    assert plain["ttft_p50_ms"] is None

    assert streamed["ok"] == streamed["requests"] > 10
    assert streamed["errors"] == 0
    assert 0 < streamed["ttft_p50_ms"] <= streamed["ttft_p99_ms"]
    assert streamed["ttft_p50_ms"] <= streamed["p50_ms"] * 1.01 + 0.01

    assert failing["requests"] > 0
    assert failing["statuses"] == {"500": failing["requests"]}
    assert failing["errors"] == failing["requests"]
    assert failing["ok"] == 0
    assert failing["p50_ms"] is None


def test_command_sends_bodies_round_robin_with_headers_and_prints_json(tmp_path):
    seen: list[tuple[str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            seen.append((self.headers["authorization"], body))
            status = 500 if json.loads(body)["n"] == 2 else 200
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text('{"n": 1}\n{"n": 2}\n\n{"n": 3}\n')
    try:
        done = subprocess.run(
            [
                sys.executable, "-m", "console.features.capacity.loadgen",
                "--url", f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions",
                "--bodies-file", str(bodies), "--header", "Authorization: Bearer sk-test",
                "--concurrency", "1", "--seconds", "0.5",
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    result = json.loads(done.stdout)
    assert [json.loads(body)["n"] for _, body in seen[:6]] == [1, 2, 3, 1, 2, 3]
    assert {auth for auth, _ in seen} == {"Bearer sk-test"}
    assert result["requests"] == result["statuses"]["200"] + result["statuses"]["500"]
    assert result["errors"] == result["statuses"]["500"] > 0
    assert result["concurrency"] == 1


def test_reports_a_server_process_cpu_over_the_window():
    with node_process("--profile", "instant", via="module") as node:
        result = run_load(
            node.base_url + CHAT,
            [chat(3)],
            {},
            concurrency=2,
            seconds=0.5,
            warmup=0.1,
            cpu_pids=[node.process.pid, 2**22 + 1],  # the node, and a pid that does not exist
        )

    cpu = result["server_cpu_seconds"]
    assert result["ok"] > 10
    assert 0 < cpu[str(node.process.pid)] < 5
    assert cpu[str(2**22 + 1)] is None


def test_p999_output_tokens_and_a_stop_signal():
    body = {**chat(5), "stream_options": {"include_usage": True}}
    with node_process("--profile", "instant", via="module") as node:
        url = node.base_url + CHAT
        streamed = run_load(url, [body], {}, concurrency=2, seconds=0.5, stream=True)
        plain = run_load(url, [chat(4)], {}, concurrency=2, seconds=0.5)
        began = clock.monotonic()
        stopped = run_load(
            url, [chat(4)], {}, concurrency=2, seconds=30,
            stop=lambda: clock.monotonic() - began > 0.5,
        )  # fmt: skip
        took = clock.monotonic() - began

    assert streamed["ok"] > 0
    assert streamed["output_tokens"] == 5 * streamed["ok"]  # the stream's usage chunk
    assert streamed["p99_ms"] <= streamed["p999_ms"] <= streamed["max_ms"]
    assert streamed["ttft_p99_ms"] <= streamed["ttft_p999_ms"]
    assert plain["output_tokens"] == 4 * plain["ok"]  # the answer's usage
    assert not plain["stopped"]
    assert stopped["stopped"] and took < 1.5
    assert stopped["seconds"] < 1.0 and stopped["ok"] > 0
    # Throughput over the time measured, not the 30 s asked for.
    assert stopped["requests_per_second"] > stopped["requests"] / 1.0


def _slow_server(seconds: float, seen: list[int]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            seen.append(1)
            clock.sleep(seconds)
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_requests_in_flight_at_the_end_are_counted_as_cut_off():
    # Answers take 0.3 s: at the window's end each client has one in flight,
    # answered in the drain (first run) or aborted when the drain ends (second).
    for drain in (2.0, 0.05):
        seen: list[int] = []
        server = _slow_server(0.3, seen)
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
        try:
            result = run_load(url, [chat(1)], {}, concurrency=3, seconds=0.5, drain=drain)
        finally:
            server.shutdown()
            server.server_close()
        assert result["cut_off"] == 3, (drain, result)
        assert result["requests"] + result["cut_off"] == len(seen)  # every request sent
        assert result["errors"] == 0  # a cut-off call is no error of the window
