"""The Anthropic-protocol endpoints of Kimi, DeepSeek and Qwen report cache
reads in Anthropic's own ``cache_read_input_tokens`` (outside
``input_tokens``), so ``usage_mapping.from_anthropic`` bills them as cache
reads without a vendor branch. Their extras (Kimi's ``prompt_tokens`` and
``cached_tokens`` copies, DeepSeek's ``prompt_tokens``, a string
``service_tier``, ``output_tokens_details``) are not counted again and do
not make the usage malformed. In a stream, Kimi and Qwen may count the whole
prompt as ``input_tokens`` in ``message_start`` and send the cached split in
``message_delta``: the later value wins, so nothing is counted twice.

The usage objects are the shapes captured from the live endpoints and
published in maximhq/bifrost (core/providers/anthropic/qwenstreamusage_test.go,
deepseekusage_test.go); the counts are theirs."""

from __future__ import annotations

from gateway_bridge.usage_mapping import TokenUsage, from_anthropic, from_anthropic_stream

KIMI_START = {
    "input_tokens": 173306,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "output_tokens": 0,
    "service_tier": "standard",
    "prompt_tokens": 173306,
    "cached_tokens": 0,
}
KIMI_DELTA = {
    "input_tokens": 250,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 173056,
    "output_tokens": 166,
    "output_tokens_details": {"thinking_tokens": 1},
    "prompt_tokens": 173306,
    "completion_tokens": 166,
    "total_tokens": 173472,
    "cached_tokens": 173056,
}
QWEN_START = {"input_tokens": 8834, "output_tokens": 0}
QWEN_DELTA = {
    "input_tokens": 18,
    "output_tokens": 426,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 8831,
    "cache_creation": {"ephemeral_5m_input_tokens": 0},
}


def test_kimi_cache_reads_are_billed_once_as_cache_reads():
    expected = TokenUsage(input=250, cache_read=173056, output=166)
    assert from_anthropic(KIMI_DELTA) == expected  # a whole message's usage
    assert from_anthropic_stream([KIMI_START, KIMI_DELTA]) == expected
    assert expected.prompt_total == KIMI_DELTA["prompt_tokens"]


def test_qwen_streams_the_cached_split_in_message_delta():
    usage = from_anthropic_stream([QWEN_START, QWEN_DELTA])
    assert usage == TokenUsage(input=18, cache_read=8831, output=426)
    assert usage.prompt_total == 8849  # not 8834 + 8831


def test_deepseek_disk_cache_hits_are_cache_reads_outside_input():
    usage = {
        "input_tokens": 101,
        "cache_creation_input_tokens": 13,
        "cache_read_input_tokens": 7,
        "output_tokens": 23,
        "prompt_tokens": 121,
    }
    mapped = from_anthropic(usage)
    assert mapped == TokenUsage(input=101, cache_read=7, cache_write=13, output=23)
    assert mapped.prompt_total == usage["prompt_tokens"]


def test_a_stream_that_ends_before_message_delta_bills_what_message_start_said():
    # A Kimi stream cut after message_start: the whole prompt as input, no cache read.
    assert from_anthropic_stream([KIMI_START]) == TokenUsage(input=173306)
