"""Each protocol's usage maps to the four billed classes once, and back:
cached tokens are subtracted where the protocol includes them and never
where it does not; reasoning is output, counted once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway_bridge import usage_mapping as um
from gateway_bridge.usage_mapping import TokenUsage


def test_openai_prompt_tokens_include_cached_ones():
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    assert um.from_openai(usage) == TokenUsage(
        input=176, cache_read=1024, output=300, reasoning=120
    )


def test_openai_responses_api_spelling():
    usage = {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 32},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 4},
    }
    assert um.from_openai(usage) == TokenUsage(input=18, cache_read=32, output=10, reasoning=4)


def test_openai_without_details_has_no_cache():
    assert um.from_openai({"prompt_tokens": 7, "completion_tokens": 3}) == TokenUsage(7, 0, 0, 3)


def test_anthropic_input_excludes_cache_reads_and_writes():
    usage = {
        "input_tokens": 25,
        "cache_creation_input_tokens": 2000,
        "cache_read_input_tokens": 4000,
        "output_tokens": 500,
    }
    assert um.from_anthropic(usage) == TokenUsage(
        input=25, cache_read=4000, cache_write=2000, output=500
    )


def test_anthropic_cache_writes_of_both_lifetimes_are_one_class():
    usage = {
        "input_tokens": 50,
        "cache_creation_input_tokens": 1800,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 600, "ephemeral_1h_input_tokens": 1200},
        "output_tokens": 7,
        "service_tier": "standard",
        "server_tool_use": {"web_search_requests": 1},
    }
    assert um.from_anthropic(usage) == TokenUsage(input=50, cache_write=1800, output=7)
    # only the breakdown (a proxy that drops the total): its sum
    del usage["cache_creation_input_tokens"]
    assert um.from_anthropic(usage).cache_write == 1800
    # a malformed breakdown is malformed usage
    assert um.from_anthropic({**usage, "cache_creation": "1800"}) is None
    assert um.from_anthropic({**usage, "cache_creation": {"ephemeral_1h_input_tokens": -1}}) is None


def test_anthropic_stream_cache_breakdown_is_cumulative_too():
    start = {
        "input_tokens": 472,
        "cache_creation_input_tokens": 1800,
        "cache_creation": {"ephemeral_5m_input_tokens": 600, "ephemeral_1h_input_tokens": 1200},
        "output_tokens": 2,
    }
    final = {**start, "output_tokens": 89}  # newer message_delta events repeat every count
    assert um.from_anthropic_stream([start, {"output_tokens": 40}, final]) == TokenUsage(
        input=472, cache_write=1800, output=89
    )


def test_anthropic_stream_counts_are_cumulative_not_added():
    events = [
        {"input_tokens": 25, "cache_read_input_tokens": 4000, "output_tokens": 1},  # message_start
        {"output_tokens": 120},  # message_delta
        {"output_tokens": 503},  # the final message_delta
    ]
    assert um.from_anthropic_stream(events) == TokenUsage(
        input=25, cache_read=4000, cache_write=0, output=503
    )
    assert um.from_anthropic_stream([]) is None


def test_gemini_prompt_includes_cached_content_and_thoughts_are_output():
    usage = {
        "promptTokenCount": 1000,
        "cachedContentTokenCount": 600,
        "candidatesTokenCount": 200,
        "thoughtsTokenCount": 50,
        "toolUsePromptTokenCount": 10,
        "totalTokenCount": 1260,
    }
    assert um.from_gemini(usage) == TokenUsage(input=410, cache_read=600, output=250, reasoning=50)


def test_gemini_stream_last_chunk_wins():
    chunks = [
        {"promptTokenCount": 10, "candidatesTokenCount": 1},
        None,
        {"promptTokenCount": 10, "candidatesTokenCount": 42},
    ]
    assert um.from_gemini_stream(chunks) == TokenUsage(input=10, output=42)


@pytest.mark.parametrize(
    ("mapper", "usage"),
    [
        (um.from_openai, None),
        (um.from_openai, "12 tokens"),
        (um.from_openai, {"prompt_tokens": -1, "completion_tokens": 2}),
        (um.from_openai, {"prompt_tokens": "12", "completion_tokens": 2}),
        (um.from_openai, {"prompt_tokens": 5, "prompt_tokens_details": "x"}),
        (um.from_openai, {"prompt_tokens": 5, "completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": 3}}),
        (um.from_anthropic, {"input_tokens": 1.5}),
        (um.from_gemini, {"promptTokenCount": True}),
        (um.from_anthropic_stream, [{"output_tokens": 3}, "garbage"]),
    ],
)  # fmt: skip
def test_garbage_usage_maps_to_none(mapper, usage):
    assert mapper(usage) is None


def test_cached_beyond_the_prompt_is_clamped():
    usage = {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 99}}
    assert um.from_openai(usage) == TokenUsage(input=0, cache_read=10)


counts = st.integers(min_value=0, max_value=10**7)


@given(counts, counts, counts, counts, st.data())
def test_round_trips_through_every_protocol(inp, cr, cw, out, data):
    reasoning = data.draw(st.integers(min_value=0, max_value=out))
    t = TokenUsage(input=inp, cache_read=cr, cache_write=cw, output=out, reasoning=reasoning)
    assert um.from_anthropic(um.to_anthropic(t)) == TokenUsage(inp, cr, cw, out, 0)
    # OpenAI and Gemini have no cache-write class: those tokens come back as input.
    assert um.from_openai(um.to_openai(t)) == TokenUsage(inp + cw, cr, 0, out, reasoning)
    assert um.from_gemini(um.to_gemini(t)) == TokenUsage(inp + cw, cr, 0, out, reasoning)
    assert um.to_openai(t)["total_tokens"] == t.prompt_total + out


_COUNT = st.one_of(
    st.integers(min_value=-5, max_value=um.MAX_COUNT + 5),
    st.booleans(),
    st.floats(allow_nan=False),
    st.none(),
    st.text(max_size=3),
)


_DETAILS = st.dictionaries(st.sampled_from(["cached_tokens", "audio_tokens"]), _COUNT, max_size=2)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "prompt_tokens",
                "completion_tokens",
                "total_tokens",
                "prompt_tokens_details",
                "completion_tokens_details",
            ]
        ),
        st.one_of(_COUNT, _DETAILS),
        max_size=5,
    )
)
def test_openai_plain_counts_map_as_the_general_rule_does(usage):
    """``from_openai``'s shortcut for two plain counts (a total, cached tokens)
    agrees with the general mapping on every input, malformed ones included."""
    assert um.from_openai(usage) == um._usage(um._openai, usage)


def test_openai_compatible_vendors_cached_token_spellings():
    deepseek = {
        "prompt_tokens": 1000,
        "completion_tokens": 50,
        "total_tokens": 1050,
        "prompt_cache_hit_tokens": 800,
        "prompt_cache_miss_tokens": 200,
    }
    assert um.from_openai(deepseek) == TokenUsage(input=200, cache_read=800, output=50)
    kimi = {"prompt_tokens": 300, "completion_tokens": 9, "total_tokens": 309, "cached_tokens": 256}
    assert um.from_openai(kimi) == TokenUsage(input=44, cache_read=256, output=9)
    glm = {
        "prompt_tokens": 90,
        "completion_tokens": 5,
        "total_tokens": 95,
        "prompt_tokens_details": {"cached_tokens": 64},
    }
    assert um.from_openai(glm) == TokenUsage(input=26, cache_read=64, output=5)
