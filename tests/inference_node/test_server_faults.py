"""Fault injection: error rates, spikes, stalled and dropped streams, the admin endpoint."""

from __future__ import annotations

import http.client
import time

import pytest

from tests.inference_node.server_helpers import TOKEN, inprocess_node, metric_value, parse_sse
from tooling.simulator.config import FaultSettings
from tooling.simulator.faults import FaultInjector

CHAT = "/v1/chat/completions"
BODY = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def node():
    with inprocess_node("--token", TOKEN) as running:
        yield running


@pytest.mark.parametrize(
    ("flag", "status", "error_type", "code"),
    [
        ("--fault-500-rate", 500, "server_error", "internal_error"),
        ("--fault-429-rate", 429, "rate_limit_error", "rate_limit_exceeded"),
        ("--fault-503-rate", 503, "server_error", "overloaded"),
    ],
)
def test_error_rates_set_at_start(flag, status, error_type, code):
    with inprocess_node(flag, "1.0") as node:
        got, headers, body = node.post(CHAT, BODY)
        assert got == status
        assert body["error"]["type"] == error_type
        assert body["error"]["code"] == code
        assert set(body["error"]) == {"message", "type", "param", "code"}
        if status in (429, 503):
            assert headers["retry-after"] == "1"
        got, _, _ = node.post("/v1/embeddings", {"model": "sim-embed", "input": "x"})
        assert got == status


def test_rates_are_seeded_and_proportional():
    settings = FaultSettings(fault_500_rate=0.5)
    a, b = FaultInjector(settings, seed=3), FaultInjector(settings, seed=3)
    run_a = [a.decide().status for _ in range(400)]
    assert run_a == [b.decide().status for _ in range(400)]
    assert run_a != [FaultInjector(settings, seed=4).decide().status for _ in range(400)]
    assert 150 < run_a.count(500) < 250
    assert FaultInjector(FaultSettings(), seed=3).decide().status == 0


def test_a_latency_spike_delays_the_first_token():
    with inprocess_node("--spike-rate", "1.0", "--spike-ms", "400", "--time-scale", "0.5") as node:
        started = time.perf_counter()
        node.chat("spiked", max_tokens=2)
        assert 0.2 <= time.perf_counter() - started < 1.0
    with inprocess_node("--spike-rate", "0.0", "--spike-ms", "400") as node:
        started = time.perf_counter()
        node.chat("calm", max_tokens=2)
        assert time.perf_counter() - started < 0.15


def read_until_stall(response) -> tuple[str, str]:
    """Read a stream until it ends, stalls past the socket timeout or is dropped."""
    data = b""
    try:
        while chunk := response.read1(65536):
            data += chunk
        return data.decode(), "ended"
    except TimeoutError:
        return data.decode(), "stalled"
    except (http.client.IncompleteRead, ConnectionError) as error:
        if isinstance(error, http.client.IncompleteRead):
            data += error.partial
        return data.decode(), "dropped"


def content_deltas(text: str) -> list[str]:
    events, _ = parse_sse(text.rsplit("\n\n", 1)[0] + "\n\n" if text else "")
    return [e["choices"][0]["delta"]["content"] for e in events if e["choices"]][1:]


def wait_for(predicate, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_stream_hangs_after_n_tokens_until_the_client_leaves():
    with inprocess_node("--hang-after-tokens", "3") as node:
        conn, response = node.open_stream(CHAT, {**BODY, "max_tokens": 20}, timeout=0.4)
        text, how = read_until_stall(response)
        conn.close()
        assert how == "stalled"
        assert len(content_deltas(text)) == 3
        assert "[DONE]" not in text
        engine = node.app.engines["sim-chat-small"]
        assert wait_for(lambda: engine.scheduler.running == 0)
        assert metric_value(node.metrics(), "vllm:request_success_total", finished_reason="abort")


def test_a_short_answer_does_not_hang():
    with inprocess_node("--hang-after-tokens", "3") as node:
        events, done = node.stream(CHAT, {**BODY, "max_tokens": 3})
        assert done
        assert events[-1]["choices"][0]["finish_reason"] == "length"


def test_a_stream_is_dropped_after_n_tokens():
    with inprocess_node("--drop-after-tokens", "2") as node:
        conn, response = node.open_stream(CHAT, {**BODY, "max_tokens": 20})
        text, how = read_until_stall(response)
        conn.close()
        assert how == "dropped"
        assert len(content_deltas(text)) == 2
        assert "[DONE]" not in text
        status, _, _ = node.post(CHAT, {**BODY, "max_tokens": 2})  # the node still serves
        assert status == 200


def test_non_streamed_requests_hang_or_drop_too():
    with inprocess_node("--hang-after-tokens", "3") as node, pytest.raises(TimeoutError):
        node.post(CHAT, {**BODY, "max_tokens": 10}, timeout=0.3)
    dropped = (http.client.RemoteDisconnected, ConnectionError)
    with inprocess_node("--drop-after-tokens", "3") as node, pytest.raises(dropped):
        node.post(CHAT, {**BODY, "max_tokens": 10})


def test_faults_change_at_runtime_through_the_admin_endpoint(node):
    status, _, settings = node.request("GET", "/admin/faults")
    assert status == 200
    assert settings == FaultSettings().as_dict()
    status, _, settings = node.post("/admin/faults", {"fault_503_rate": 1.0})
    assert status == 200
    assert settings["fault_503_rate"] == 1.0
    assert settings["fault_500_rate"] == 0.0
    assert node.post(CHAT, BODY)[0] == 503
    status, _, settings = node.post("/admin/faults", {"fault_503_rate": 0, "drop_after_tokens": 1})
    assert (settings["fault_503_rate"], settings["drop_after_tokens"]) == (0, 1)
    assert node.request("GET", "/admin/faults")[2] == settings
    conn, response = node.open_stream(CHAT, {**BODY, "max_tokens": 5})
    assert read_until_stall(response)[1] == "dropped"
    conn.close()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"fault_500_rate": 1.5}, "fault_500_rate"),
        ({"spike_rate": "often"}, "spike_rate"),
        ({"hang_after_tokens": -1}, "hang_after_tokens"),
        ({"hang_after_tokens": 2.5}, "hang_after_tokens"),
        ({"explode": True}, "explode"),
    ],
)
def test_bad_fault_settings_are_refused(node, body, param):
    status, _, error = node.post("/admin/faults", body)
    assert status == 400
    assert error["error"]["param"] == param
    assert node.request("GET", "/admin/faults")[2] == FaultSettings().as_dict()


def test_the_admin_endpoint_needs_the_token(node):
    for token in ("wrong", "-"):
        status, _, error = node.post("/admin/faults", {"fault_500_rate": 1.0}, token=token)
        assert status == 401
        assert error["error"]["code"] == "invalid_api_key"
    assert node.request("GET", "/admin/faults")[2]["fault_500_rate"] == 0.0


def test_without_a_node_token_the_admin_endpoint_is_disabled():
    with inprocess_node() as node:
        status, _, error = node.post("/admin/faults", {"fault_500_rate": 1.0}, token="anything")
        assert status == 403
        assert error["error"]["code"] == "admin_disabled"
        assert "--token" in error["error"]["message"]
        assert node.post(CHAT, BODY)[0] == 200


def test_admin_reset_clears_the_cache_and_counters(node):
    prompt = "A long enough prompt to fill a few blocks of the prefix cache. " * 4
    node.chat(prompt)
    assert node.chat(prompt)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    status, _, body = node.post("/admin/reset")
    assert (status, body) == (200, {"status": "ok"})
    assert metric_value(node.metrics(), "vllm:prompt_tokens_total") == 0
    assert node.chat(prompt)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
