"""The official openai SDK against a node process started by ``manage.py run_node``."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest

from tests.inference_node.server_helpers import ROOT, TOKEN, node_process, stop_process

SYSTEM = "You are the support assistant of a token-billing console. Answer briefly. " * 5


@pytest.fixture(scope="module")
def node():
    with node_process("--token", TOKEN, "--seed", "7") as running:
        yield running


@pytest.fixture
def client(node):
    return openai.OpenAI(base_url=node.base_url + "/v1", api_key=TOKEN, max_retries=0, timeout=10)


def test_models_through_the_sdk(client):
    ids = [model.id for model in client.models.list()]
    assert ids == ["sim-chat-small", "sim-chat-large", "sim-embed"]


def test_plain_chat_reads_usage_and_cached_tokens_on_a_repeated_prefix(client):
    def ask(question: str):
        return client.chat.completions.create(
            model="sim-chat-large",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            max_tokens=12,
        )

    first = ask("How do I rotate a key?")
    assert first.choices[0].message.content
    assert first.choices[0].finish_reason == "length"
    assert first.usage.completion_tokens == 12
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = ask("Where are invoices?")
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached > 0
    assert cached % 16 == 0
    assert cached < second.usage.prompt_tokens


def test_streamed_chat_with_usage(client):
    stream = client.chat.completions.create(
        model="sim-chat-small",
        messages=[{"role": "user", "content": "Stream a short answer."}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 6
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0
    plain = client.chat.completions.create(
        model="sim-chat-small",
        messages=[{"role": "user", "content": "Stream a short answer."}],
        max_tokens=6,
    )
    assert plain.choices[0].message.content == text


def test_streamed_completion(client):
    chunks = list(
        client.completions.create(model="sim-chat-small", prompt="Hello", max_tokens=4, stream=True)
    )
    assert sum(1 for c in chunks if c.choices[0].text) == 4


def test_embeddings_through_the_sdk(client):
    result = client.embeddings.create(model="sim-embed", input=["alpha", "beta gamma"])
    assert [len(item.embedding) for item in result.data] == [256, 256]
    assert sum(v * v for v in result.data[0].embedding) == pytest.approx(1.0, rel=1e-5)
    assert result.usage.prompt_tokens == 2 + 3  # "alph" "a", then "beta" " gamm" "a"
    again = client.embeddings.create(model="sim-embed", input="alpha", encoding_format="float")
    assert again.data[0].embedding == pytest.approx(result.data[0].embedding, rel=1e-6)


def test_sdk_errors_map_to_openai_exceptions(client, node):
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(
            model="sim-chat-small",
            messages=[{"role": "user", "content": "x"}],
            max_tokens=9000,
        )
    assert too_long.value.code == "context_length_exceeded"
    wrong = openai.OpenAI(base_url=node.base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_runtime_faults_reach_the_sdk(client, node):
    status, _, _ = node.post("/admin/faults", {"fault_429_rate": 1.0})
    assert status == 200
    try:
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(
                model="sim-chat-small", messages=[{"role": "user", "content": "x"}]
            )
    finally:
        node.post("/admin/faults", {"fault_429_rate": 0.0})


def test_module_entry_point_stops_cleanly_on_sigterm():
    with node_process("--models", "solo:512", via="module") as running:
        status, _, body = running.request("GET", "/v1/models")
        assert status == 200
        assert [m["max_model_len"] for m in body["data"]] == [512]
        assert stop_process(running.process) == 0


def test_bad_flags_are_refused():
    result = subprocess.run(
        [sys.executable, "-m", "tooling.simulator", "--fault-500-rate", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 2
    assert "not a rate between 0 and 1" in result.stderr


def test_bench_node_prints_throughput_json():
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "bench_node",
            "--seconds",
            "0.5",
            "--concurrency",
            "4",
            "--stream-seconds",
            "0.3",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["requests"] > 100
    assert report["errors"] == 0
    assert report["requests_per_second"] > 0
    assert report["p50_ms"] <= report["p99_ms"]
    assert (report["concurrency"], report["profile"]) == (4, "instant")
    assert report["stream"]["requests"] > 0
