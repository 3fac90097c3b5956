"""The latency model: prefill cost of uncached tokens, load growth, batching, time scale."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from console.kernel.tokens import chat_prompt_tokens
from tests.inference_node.server_helpers import inprocess_node, metric_value
from tooling.simulator.config import PROFILES, LatencyProfile
from tooling.simulator.latency import LatencyModel, Scheduler


def model(**values) -> LatencyModel:
    profile = LatencyProfile(**values)
    return LatencyModel(profile, max_running=5, time_scale=1.0)


def test_prefill_grows_with_uncached_tokens():
    latency = model(ttft_ms=20, prefill_us_per_token=100)
    assert latency.prefill_seconds(0, jitter=False) == pytest.approx(0.020)
    assert latency.prefill_seconds(1000, jitter=False) == pytest.approx(0.120)


def test_latency_grows_linearly_with_running_sequences():
    latency = model(ttft_ms=10, itl_ms=10, load_factor=1.0)
    assert latency.load_multiplier(1) == 1.0
    assert latency.load_multiplier(3) == pytest.approx(1.5)
    assert latency.load_multiplier(5) == pytest.approx(2.0)
    assert latency.load_multiplier(50) == pytest.approx(2.0)  # capped at a full batch
    assert latency.itl_seconds(5, jitter=False) == pytest.approx(0.020)
    assert latency.prefill_seconds(0, 5, jitter=False) == pytest.approx(0.020)


def test_jitter_stays_within_its_bounds():
    latency = model(itl_ms=10, jitter=0.2)
    values = {latency.itl_seconds() for _ in range(200)}
    assert len(values) > 100
    assert all(0.008 <= v <= 0.012 for v in values)


def test_the_instant_profile_never_sleeps_and_realistic_does():
    assert not LatencyModel(PROFILES["instant"], max_running=4, time_scale=1).sleeps
    realistic = LatencyModel(PROFILES["realistic"], max_running=4, time_scale=1)
    assert realistic.sleeps
    assert 0.010 <= realistic.itl_seconds(jitter=False) <= 0.020
    assert not LatencyModel(PROFILES["realistic"], max_running=4, time_scale=0).sleeps


def test_the_scheduler_queues_beyond_max_running_in_order():
    async def scenario():
        scheduler = Scheduler(2)
        order = []

        async def job(name):
            await scheduler.acquire()
            order.append(name)
            await asyncio.sleep(0.01)
            scheduler.release()

        tasks = [asyncio.create_task(job(i)) for i in range(5)]
        await asyncio.sleep(0)
        assert (scheduler.running, scheduler.waiting) == (2, 3)
        await asyncio.gather(*tasks)
        assert (scheduler.running, scheduler.waiting) == (0, 0)
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]


def test_a_cancelled_waiter_leaves_the_queue():
    async def scenario():
        scheduler = Scheduler(1)
        await scheduler.acquire()
        waiter = asyncio.create_task(scheduler.acquire())
        await asyncio.sleep(0)
        assert scheduler.waiting == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        scheduler.release()
        return scheduler.running, scheduler.waiting

    assert asyncio.run(scenario()) == (0, 0)


SCALE = 0.2
TTFT_MS, PREFILL_US = 100.0, 5000.0


@pytest.fixture
def timed_node():
    flags = ["--profile", "custom", "--ttft-ms", str(TTFT_MS), "--prefill-us-per-token"]
    flags += [str(PREFILL_US), "--itl-ms", "0", "--jitter", "0", "--load-factor", "0"]
    with inprocess_node(*flags, "--time-scale", str(SCALE)) as node:
        yield node


def timed_chat(node, content: str) -> tuple[float, dict]:
    started = time.perf_counter()
    body = node.chat(content, max_tokens=2)
    return time.perf_counter() - started, body


def expected_seconds(uncached: int) -> float:
    return (TTFT_MS / 1000 + uncached * PREFILL_US / 1e6) * SCALE


def test_measured_ttft_follows_uncached_tokens(timed_node):
    content = "Explain continuous batching to a new engineer, step by step. " * 8
    prompt = len(chat_prompt_tokens([{"role": "user", "content": content}]))
    cold, first = timed_chat(timed_node, content)
    warm, second = timed_chat(timed_node, content)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first["usage"]["prompt_tokens"] == prompt
    assert cached == (prompt - 1) // 16 * 16
    assert expected_seconds(prompt) * 0.95 <= cold <= expected_seconds(prompt) + 0.3
    assert expected_seconds(prompt - cached) * 0.95 <= warm < cold
    assert warm <= expected_seconds(prompt - cached) + 0.3
    longer, _ = timed_chat(timed_node, content * 2 + "A fresh start.")
    assert longer > cold


def test_requests_queue_for_batch_slots_and_metrics_show_it():
    flags = ["--profile", "custom", "--ttft-ms", "1000", "--prefill-us-per-token", "0"]
    flags += ["--itl-ms", "0", "--jitter", "0", "--max-running", "1", "--time-scale", "0.2"]
    with inprocess_node(*flags) as node:
        durations = []

        def send(i):
            started = time.perf_counter()
            node.chat(f"queued request {i}", max_tokens=1)
            durations.append(time.perf_counter() - started)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        time.sleep(0.1)
        text = node.metrics()
        assert metric_value(text, "vllm:num_requests_running") == 1
        assert metric_value(text, "vllm:num_requests_waiting") == 2
        for thread in threads:
            thread.join()
        durations.sort()
        assert durations[0] >= 0.19
        assert durations[2] >= 0.57  # waited for two others, one slot each
        text = node.metrics()
        assert metric_value(text, "vllm:num_requests_waiting") == 0
        ttft_sum = metric_value(text, "vllm:time_to_first_token_seconds_sum")
        assert ttft_sum >= 0.19 + 0.39 + 0.57


def test_latency_grows_with_load_when_measured():
    flags = ["--profile", "custom", "--ttft-ms", "500", "--prefill-us-per-token", "0"]
    flags += ["--itl-ms", "0", "--jitter", "0", "--max-running", "4", "--load-factor", "3"]
    with inprocess_node(*flags, "--time-scale", "0.2") as node:
        lone, _ = timed_chat(node, "alone")
        durations = []

        def send(i):
            durations.append(timed_chat(node, f"crowded {i}")[0])

        threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert 0.095 <= lone <= 0.35
        # The last one admitted ran beside three others: 1 + 3 x 3/3 = 4 x slower.
        assert max(durations) >= 0.38
