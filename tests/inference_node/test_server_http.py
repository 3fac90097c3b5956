"""The node's HTTP surface: routes, OpenAI bodies, streaming format, errors, metrics."""

from __future__ import annotations

import asyncio
import base64
import math
import re
import socket
import struct

import pytest

from console.kernel.tokens import media_tokens
from tests.inference_node.server_helpers import TOKEN, inprocess_node, metric_value
from tooling.simulator.http import Response, start_server, sweep_idle

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Tell me about caches."}]
BODY = {"model": "sim-chat-small", "messages": MESSAGES}


@pytest.fixture
def node():
    with inprocess_node(
        "--token", TOKEN, "--models", "sim-chat-small,sim-chat-large,sim-embed,tiny:64"
    ) as running:
        yield running


def test_models_list_is_openai_shaped_with_max_model_len(node):
    status, _, body = node.request("GET", "/v1/models")
    assert status == 200
    assert body["object"] == "list"
    lengths = {m["id"]: m["max_model_len"] for m in body["data"]}
    assert lengths == {
        "sim-chat-small": 8192,
        "sim-chat-large": 32768,
        "sim-embed": 8192,
        "tiny": 64,
    }
    assert all(m["object"] == "model" for m in body["data"])


def test_a_model_is_retrieved_by_id(node):
    status, _, model = node.request("GET", "/v1/models/tiny")
    assert (status, model["id"], model["max_model_len"]) == (200, "tiny", 64)
    status, _, error = node.request("GET", "/v1/models/nope")
    assert (status, error["error"]["code"]) == (404, "model_not_found")


@pytest.mark.parametrize(
    ("part", "cost"),
    [
        (
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 4000}},
            media_tokens(3000),
        ),
        ({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, 85),
        ({"type": "file", "file": {"file_data": "data:application/pdf;base64," + "A" * 8}}, 85),
    ],
)
def test_media_parts_are_counted_by_the_media_rule(node, part, cost):
    text = {"type": "text", "text": "Describe this."}
    plain = node.chat("", messages=[{"role": "user", "content": [text]}], max_tokens=1)
    with_media = node.chat("", messages=[{"role": "user", "content": [text, part]}], max_tokens=1)
    added = with_media["usage"]["prompt_tokens"] - plain["usage"]["prompt_tokens"]
    assert added == cost


def test_health_needs_no_token(node):
    status, _, text = node.request("GET", "/health", token="")
    assert (status, text) == (200, "")


def test_chat_completion_body_and_usage(node):
    body = node.chat("Tell me about caches.", max_tokens=7)
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "sim-chat-small"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["completion_tokens"] == 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + 7
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert node.chat("Tell me about caches.", max_tokens=7)["choices"][0] == choice


def test_max_completion_tokens_stop_and_n(node):
    assert node.chat("hi", max_completion_tokens=4)["usage"]["completion_tokens"] == 4
    long_answer = node.chat("hi", max_tokens=200)["choices"][0]["message"]["content"]
    stopped = node.chat("hi", max_tokens=200, stop=["."])["choices"][0]
    assert stopped["finish_reason"] == "stop"
    assert long_answer.startswith(stopped["message"]["content"] + ".")
    two = node.chat("hi", max_tokens=5, n=2)
    assert [c["index"] for c in two["choices"]] == [0, 1]
    assert two["choices"][0]["message"] != two["choices"][1]["message"]
    assert two["usage"]["completion_tokens"] == 10
    seeded = node.chat("hi", max_tokens=9, seed=42, temperature=0.7)["choices"][0]
    assert seeded["message"] != node.chat("hi", max_tokens=9)["choices"][0]["message"]


def test_completions_endpoint(node):
    status, _, body = node.post(
        "/v1/completions", {"model": "sim-chat-small", "prompt": "Once upon", "max_tokens": 5}
    )
    assert status == 200
    assert body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == 2  # "Once" " upon"
    status, _, by_ids = node.post(
        "/v1/completions", {"model": "sim-chat-small", "prompt": [5, 6, 7], "max_tokens": 5}
    )
    assert by_ids["usage"]["prompt_tokens"] == 3


def test_stream_with_include_usage_matches_openai(node):
    events, done = node.stream(
        CHAT, {**BODY, "max_tokens": 4, "stream_options": {"include_usage": True}}
    )
    assert done
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert len({e["id"] for e in events}) == 1
    *chunks, last = events
    assert all(e["usage"] is None for e in chunks)
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in chunks)
    whole = node.chat("Tell me about caches.", max_tokens=4)
    assert text == whole["choices"][0]["message"]["content"]


def test_stream_without_include_usage_has_no_usage(node):
    events, done = node.stream(CHAT, {**BODY, "max_tokens": 3})
    assert done
    assert all("usage" not in e for e in events)
    events, _ = node.stream("/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 3})
    assert [e["choices"][0]["finish_reason"] for e in events] == [None, None, None, "length"]


def test_embeddings_are_deterministic_unit_vectors(node):
    status, _, body = node.post("/v1/embeddings", {"model": "sim-embed", "input": ["cat", "dog"]})
    assert status == 200
    first, second = (item["embedding"] for item in body["data"])
    assert len(first) == 256
    assert math.isclose(math.fsum(v * v for v in first), 1.0, rel_tol=1e-9)
    assert first != second
    assert body["usage"]["prompt_tokens"] == 2
    _, _, again = node.post("/v1/embeddings", {"model": "sim-embed", "input": "cat"})
    assert again["data"][0]["embedding"] == first
    _, _, packed = node.post(
        "/v1/embeddings", {"model": "sim-embed", "input": [[1, 2, 3]], "encoding_format": "base64"}
    )
    values = struct.unpack("<256f", base64.b64decode(packed["data"][0]["embedding"]))
    assert math.isclose(math.fsum(v * v for v in values), 1.0, rel_tol=1e-5)
    _, _, small = node.post("/v1/embeddings", {"model": "sim-embed", "input": "x", "dimensions": 8})
    assert len(small["data"][0]["embedding"]) == 8


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "code"),
    [
        (CHAT, {**BODY, "model": "gpt-9"}, 404, "model", "model_not_found"),
        (CHAT, {**BODY, "model": "sim-embed"}, 400, "model", "model_not_supported"),
        (
            "/v1/embeddings",
            {"model": "sim-chat-small", "input": "x"},
            400,
            "model",
            "model_not_supported",
        ),
        (CHAT, {"messages": MESSAGES}, 400, "model", None),
        (CHAT, {"model": "sim-chat-small"}, 400, "messages", None),
        (
            CHAT,
            {**BODY, "messages": [{"role": "robot", "content": "x"}]},
            400,
            "messages[0].role",
            None,
        ),
        (
            CHAT,
            {**BODY, "messages": [{"role": "user", "content": 5}]},
            400,
            "messages[0].content",
            None,
        ),
        (CHAT, {**BODY, "max_tokens": 0}, 400, "max_tokens", None),
        (CHAT, {**BODY, "max_tokens": "ten"}, 400, "max_tokens", None),
        (CHAT, {**BODY, "temperature": 3}, 400, "temperature", None),
        (CHAT, {**BODY, "n": 100}, 400, "n", None),
        (CHAT, {**BODY, "stop": 5}, 400, "stop", None),
        (CHAT, {**BODY, "stream": "yes"}, 400, "stream", None),
        (CHAT, {**BODY, "stream_options": {"include_usage": True}}, 400, "stream_options", None),
        (
            CHAT,
            {**BODY, "model": "tiny", "max_tokens": 60},
            400,
            "messages",
            "context_length_exceeded",
        ),
        (
            "/v1/completions",
            {"model": "tiny", "prompt": "word " * 70},
            400,
            "prompt",
            "context_length_exceeded",
        ),
        ("/v1/completions", {"model": "tiny", "prompt": ["a", "b"]}, 400, "prompt", None),
        ("/v1/embeddings", {"model": "sim-embed", "input": []}, 400, "input", None),
        (
            "/v1/embeddings",
            {"model": "sim-embed", "input": "x", "dimensions": 999},
            400,
            "dimensions",
            None,
        ),
        (
            "/v1/embeddings",
            {"model": "sim-embed", "input": "x", "encoding_format": "hex"},
            400,
            "encoding_format",
            None,
        ),
    ],
)
def test_bad_input_gets_an_openai_error(node, path, body, status, param, code):
    got, _, error = node.post(path, body)
    assert got == status
    assert set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["param"] == param
    assert error["error"]["code"] == code
    assert error["error"]["type"] == "invalid_request_error"
    assert "Traceback" not in error["error"]["message"]


def test_context_error_counts_prompt_plus_max_tokens(node):
    _, _, error = node.post(CHAT, {**BODY, "model": "tiny", "max_tokens": 60})
    message = error["error"]["message"]
    assert "maximum context length is 64 tokens" in message
    assert "in the messages, 60 in the completion" in message
    assert node.post(CHAT, {**BODY, "model": "tiny", "max_tokens": 30})[0] == 200


def test_malformed_json_and_non_object_bodies(node):
    for raw in (b"{not json", b"[1, 2]", b"\xff\xfe"):
        status, _, error = node.post(CHAT, raw=raw)
        assert status == 400
        assert error["error"]["code"] == "invalid_json"


def test_wrong_or_missing_token_is_401(node):
    for token in ("wrong", "-"):
        status, _, error = node.post(CHAT, BODY, token=token)
        assert status == 401
        assert error["error"]["code"] == "invalid_api_key"
    status, _, _ = node.request("GET", "/v1/models", token="nope")
    assert status == 401


def test_unknown_route_and_wrong_method(node):
    status, _, error = node.request("GET", "/v1/nothing")
    assert (status, error["error"]["code"]) == (404, "not_found")
    status, headers, error = node.request("GET", CHAT)
    assert (status, error["error"]["code"]) == (405, "method_not_allowed")
    assert headers["allow"] == "POST"


def test_keep_alive_and_pipelined_requests_are_answered_in_order(node):
    request = (
        f"GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\r\n"
        "GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
        "GET /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    with socket.create_connection((node.host, node.port), timeout=5) as sock:
        sock.sendall(request.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", data) == [b"200", b"200", b"404"]


def test_malformed_http_gets_400(node):
    with socket.create_connection((node.host, node.port), timeout=5) as sock:
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")


def test_metrics_report_vllm_names_with_sane_values(node):
    for _ in range(3):
        node.chat("Tell me about caches.", max_tokens=5)
    node.post("/v1/embeddings", {"model": "sim-embed", "input": "cat"})
    text = node.metrics()
    names = [
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
        "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
    ]  # fmt: skip
    for name in names:
        assert f"# TYPE {name} " in text
        assert f"# HELP {name} " in text
    prompt = node.chat("Tell me about caches.", max_tokens=5)["usage"]["prompt_tokens"]
    text = node.metrics()
    assert metric_value(text, "vllm:prompt_tokens_total") == 4 * prompt
    assert metric_value(text, "vllm:generation_tokens_total") == 20
    assert metric_value(text, "vllm:request_success_total", finished_reason="length") == 4
    assert metric_value(text, "vllm:num_requests_running") == 0
    assert metric_value(text, "vllm:time_to_first_token_seconds_count") == 4
    assert metric_value(text, "vllm:e2e_request_latency_seconds_bucket", le="+Inf") == 4
    assert metric_value(text, "vllm:e2e_request_latency_seconds_sum") >= 0
    assert metric_value(text, "vllm:prompt_tokens_total", model="sim-embed") == 1
    assert metric_value(text, "vllm:generation_tokens_total", model="sim-chat-large") == 0
    buckets = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('vllm:time_to_first_token_seconds_bucket{model_name="sim-chat-small"')
    ]
    assert buckets == sorted(buckets)


def test_idle_keep_alive_connections_are_closed():
    async def scenario():
        async def handler(request, conn):
            return Response(200, b"{}")

        server, connections = await start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sweeper = asyncio.create_task(sweep_idle(connections, timeout=0.05))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        body = await reader.readexactly(2)
        rest = await asyncio.wait_for(reader.read(), timeout=2)  # EOF once swept
        sweeper.cancel()
        writer.close()
        server.close()
        return head.split(b"\r\n")[0], body, rest, len(connections)

    assert asyncio.run(scenario()) == (b"HTTP/1.1 200 OK", b"{}", b"", 0)
