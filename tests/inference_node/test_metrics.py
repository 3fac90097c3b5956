"""The Prometheus parser and the load read from each engine's real metric names."""

from __future__ import annotations

import math

import pytest

from inference_node.metrics import NodeLoad, node_load, parse_prometheus, recent_hit_rate

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# vLLM 0.10+ (V1 engine), data parallel over two engines.
VLLM_CURRENT = f"""\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{{generation="0"}} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 4.0
vllm:num_requests_running{{engine="1",model_name="{MODEL}"}} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} 2.0
vllm:num_requests_waiting{{engine="1",model_name="{MODEL}"}} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="{MODEL}"}} 0.3125
vllm:kv_cache_usage_perc{{engine="1",model_name="{MODEL}"}} 0.5
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="{MODEL}"}} 12000.0
vllm:prefix_cache_queries_total{{engine="1",model_name="{MODEL}"}} 8000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="{MODEL}"}} 9000.0
vllm:prefix_cache_hits_total{{engine="1",model_name="{MODEL}"}} 1000.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.001",model_name="{MODEL}"}} 0.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="{MODEL}"}} 120.0
vllm:time_to_first_token_seconds_count{{engine="0",model_name="{MODEL}"}} 120.0
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="{MODEL}"}} 14.2
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0"}} 1.0
"""

# vLLM 0.5/0.6 (V0 engine): gpu_cache_usage_perc and a hit-rate gauge.
VLLM_OLD = f"""\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="{MODEL}"}} 2.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{{model_name="{MODEL}"}} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="{MODEL}"}} 5.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{model_name="{MODEL}"}} 0.875
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{{model_name="{MODEL}"}} 0.0
# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{{model_name="{MODEL}"}} 0.42
"""

# vLLM 0.8 (early V1): counters named gpu_prefix_cache_*.
VLLM_V08 = f"""\
vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 1.0
vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} 0.0
vllm:gpu_cache_usage_perc{{engine="0",model_name="{MODEL}"}} 0.1
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{{engine="0",model_name="{MODEL}"}} 400.0
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{{engine="0",model_name="{MODEL}"}} 100.0
"""

SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 5.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 2048.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.12
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 120.5
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 7.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.65
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 81920.0
"""

# llama.cpp server started with --metrics (unlabelled, integers).
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1024
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 512
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 682.667
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.0625
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 256
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""


def test_vllm_current_sums_engines_and_takes_the_fullest_kv_pool():
    load = node_load(VLLM_CURRENT)
    assert load.running == 7 and load.waiting == 2
    assert load.kv_cache_usage == 0.5
    assert load.prefix_cache_queries == 20000 and load.prefix_cache_hits == 10000
    assert load.prefix_cache_hit_rate == pytest.approx(0.5)


def test_vllm_counters_without_the_total_suffix_are_read_too():
    text = VLLM_CURRENT.replace("_queries_total", "_queries").replace("_hits_total", "_hits")
    assert node_load(text).prefix_cache_hit_rate == pytest.approx(0.5)


def test_vllm_old_names_and_hit_rate_gauge():
    load = node_load(VLLM_OLD)
    assert (load.running, load.waiting) == (2, 5)
    assert load.kv_cache_usage == 0.875
    assert load.prefix_cache_queries is None and load.prefix_cache_hits is None
    assert load.prefix_cache_hit_rate == pytest.approx(0.42)


def test_vllm_gpu_prefix_counters():
    load = node_load(VLLM_V08)
    assert load.kv_cache_usage == pytest.approx(0.1)
    assert (load.prefix_cache_queries, load.prefix_cache_hits) == (400, 100)
    assert load.prefix_cache_hit_rate == pytest.approx(0.25)


def test_sglang():
    load = node_load(SGLANG)
    assert (load.running, load.waiting) == (5, 7)
    assert load.kv_cache_usage == pytest.approx(0.12)
    assert load.prefix_cache_hit_rate == pytest.approx(0.65)


def test_llamacpp():
    load = node_load(LLAMACPP)
    assert (load.running, load.waiting) == (2, 1)
    assert load.kv_cache_usage == pytest.approx(0.0625)
    assert load.prefix_cache_hit_rate is None


def test_llamacpp_without_kv_ratio_reports_none_not_zero():
    text = "\n".join(line for line in LLAMACPP.splitlines() if "kv_cache_usage" not in line)
    load = node_load(text)
    assert load.kv_cache_usage is None and load.running == 2


def test_unrelated_metrics_give_an_empty_load():
    load = node_load('process_cpu_seconds_total 12.5\nhttp_requests_total{code="200"} 3\n')
    assert load == NodeLoad() and not load.has_any


def test_parser_survives_garbage_nan_inf_escapes_and_timestamps():
    text = "\n".join(
        [
            "# a comment",
            "# TYPE weird gauge",
            "this is not a metric line at all",
            'broken{label="unterminated} 1',
            "no_value_here",
            "too many fields 1 2 3",
            "bad_value abc",
            'esc{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",brace="}{"} 2.5 1700000000000',
            "nan_metric NaN",
            "inf_metric +Inf",
            "neg_inf -Inf",
            "sci 1.5e3",
            "  spaced_metric   4  ",
            "# EOF",
        ]
    )
    samples = parse_prometheus(text)
    assert set(samples) == {"esc", "nan_metric", "inf_metric", "neg_inf", "sci", "spaced_metric"}
    labels, value = samples["esc"][0]
    assert labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb", "brace": "}{"}
    assert value == 2.5
    assert math.isnan(samples["nan_metric"][0][1])
    assert samples["inf_metric"][0][1] == math.inf and samples["neg_inf"][0][1] == -math.inf
    assert samples["sci"][0][1] == 1500.0 and samples["spaced_metric"][0][1] == 4.0


def test_non_finite_values_are_ignored_for_load():
    text = (
        'vllm:num_requests_running{model_name="a"} NaN\n'
        'vllm:num_requests_running{model_name="b"} 2\n'
        'vllm:kv_cache_usage_perc{model_name="a"} +Inf\n'
        'vllm:kv_cache_usage_perc{model_name="b"} 0.2\n'
    )
    load = node_load(text)
    assert load.running == 2 and load.kv_cache_usage == pytest.approx(0.2)


def test_fractions_are_clamped_to_zero_one():
    assert node_load("sglang:token_usage 1.7\n").kv_cache_usage == 1.0
    assert node_load("vllm:gpu_prefix_cache_hit_rate -0.2\n").prefix_cache_hit_rate == 0.0


def test_zero_queries_give_no_rate():
    text = "vllm:prefix_cache_queries_total 0\nvllm:prefix_cache_hits_total 0\n"
    assert node_load(text).prefix_cache_hit_rate is None


def _counters(queries, hits):
    return node_load(
        f"vllm:prefix_cache_queries_total {queries}\nvllm:prefix_cache_hits_total {hits}\n"
    )


def test_recent_hit_rate_uses_the_delta_between_scrapes():
    # Cumulative 50 %, but of the last 1000 queried tokens 900 hit.
    current = _counters(11000, 5500)
    assert current.prefix_cache_hit_rate == pytest.approx(0.5)
    assert recent_hit_rate(10000, 4600, current) == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("prev_q", "prev_h"),
    [(None, None), (11000, 5500), (50000, 100)],  # first scrape, no new queries, counter reset
)
def test_recent_hit_rate_falls_back_to_cumulative(prev_q, prev_h):
    assert recent_hit_rate(prev_q, prev_h, _counters(11000, 5500)) == pytest.approx(0.5)


def test_recent_hit_rate_with_only_a_gauge():
    assert recent_hit_rate(100, 50, node_load(SGLANG)) == pytest.approx(0.65)
