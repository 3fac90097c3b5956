"""Prefix caching: 16-token chained blocks, never the whole prompt, LRU eviction."""

from __future__ import annotations

import pytest

from tests.inference_node.server_helpers import inprocess_node, metric_value
from tooling.simulator.prefix_cache import BLOCK_SIZE, PrefixCache, block_hashes


def ids(start: int, count: int) -> list[int]:
    return list(range(start, start + count))


def test_a_repeated_prompt_is_served_from_whole_blocks():
    cache = PrefixCache(100)
    prompt = ids(1000, 40)  # two full blocks and 8 tokens
    assert cache.admit(prompt).cached_tokens == 0
    assert len(cache) == 2
    assert cache.admit(prompt).cached_tokens == 32
    assert cache.queries_tokens == 80
    assert cache.hit_tokens == 32


def test_the_last_token_is_always_recomputed():
    cache = PrefixCache(100)
    prompt = ids(1, 2 * BLOCK_SIZE)  # exactly two blocks
    cache.admit(prompt)
    assert cache.admit(prompt).cached_tokens == BLOCK_SIZE
    assert cache.admit(ids(1, BLOCK_SIZE)).cached_tokens == 0


def test_a_shared_prefix_reuses_only_the_shared_blocks():
    cache = PrefixCache(100)
    system = ids(500, 3 * BLOCK_SIZE + 5)  # 3 full shared blocks, then 5 shared tokens
    cache.admit(system + ids(9000, 30))
    result = cache.admit(system + ids(7000, 30))
    assert result.cached_tokens == 3 * BLOCK_SIZE
    assert result.prompt_tokens == len(system) + 30


def test_blocks_are_chained_on_what_comes_before():
    cache = PrefixCache(100)
    block_a, block_b = ids(1, BLOCK_SIZE), ids(100, BLOCK_SIZE)
    cache.admit(block_a + block_b + [7])
    # block_b's tokens at the start of a prompt are a different block.
    assert cache.admit(block_b + block_a + [7]).cached_tokens == 0
    assert block_hashes(block_a + block_b)[1] != block_hashes(block_b)[0]


def test_least_recently_used_blocks_are_evicted_at_capacity():
    cache = PrefixCache(4)
    first, second, third = ids(1, 33), ids(200, 33), ids(400, 33)  # 2 blocks each
    cache.admit(first)
    cache.admit(second)
    assert cache.usage == 1.0
    cache.admit(first)  # first is now the most recent
    cache.admit(third)  # evicts second's blocks
    assert len(cache) == 4
    assert cache.contains_prefix_blocks(first) == 2
    assert cache.contains_prefix_blocks(second) == 0
    assert cache.admit(first).cached_tokens == 32


def test_a_chain_loses_its_tail_before_its_head():
    cache = PrefixCache(3)
    cache.admit(ids(1, 33))  # blocks A1 A2
    cache.admit(ids(500, 17))  # block B1 fills the cache
    cache.admit(ids(900, 17))  # C1 evicts the tail A2 first, keeping A1 useful
    assert cache.contains_prefix_blocks(ids(1, 33)) == 1
    assert cache.admit(ids(1, 33)).cached_tokens == 16


def test_a_prompt_longer_than_the_cache_keeps_its_first_blocks():
    cache = PrefixCache(2)
    prompt = ids(1, 5 * BLOCK_SIZE + 1)
    cache.admit(prompt)
    assert cache.contains_prefix_blocks(prompt) == 2
    assert cache.admit(prompt).cached_tokens == 2 * BLOCK_SIZE


def test_capacity_zero_disables_caching():
    cache = PrefixCache(0)
    cache.admit(ids(1, 64))
    assert cache.admit(ids(1, 64)).cached_tokens == 0
    assert cache.usage == 0.0


@pytest.fixture
def node():
    with inprocess_node("--prefix-cache-blocks", "8") as running:
        yield running


def test_the_node_reports_cached_tokens_in_usage_and_metrics(node):
    system = "You are a careful assistant who answers in full sentences. " * 6
    first = node.chat("What is a prefix cache?", messages=[
        {"role": "system", "content": system},
        {"role": "user", "content": "What is a prefix cache?"},
    ])  # fmt: skip
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    second = node.chat("x", messages=[
        {"role": "system", "content": system},
        {"role": "user", "content": "And what is a block?"},
    ])  # fmt: skip
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    prompt = second["usage"]["prompt_tokens"]
    assert cached > 0
    assert cached % BLOCK_SIZE == 0
    assert cached < prompt
    text = node.metrics()
    queries = first["usage"]["prompt_tokens"] + prompt
    assert metric_value(text, "vllm:prefix_cache_queries_total") == queries
    assert metric_value(text, "vllm:prefix_cache_hits_total") == cached
    usage = metric_value(text, "vllm:kv_cache_usage_perc")
    assert 0 < usage <= 1
    assert usage == len(node.app.engines["sim-chat-small"].cache) / 8


def test_the_cache_is_per_model(node):
    node.chat("The same prompt on two models " * 5)
    other = node.chat("The same prompt on two models " * 5, model="sim-chat-large")
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
