"""The header rows of the analytics CSVs for people reading the console in
another language (``console.kernel.csv_header``): one table for every chart's
columns (they share most keys: ``bucket_start``, ``calls``, ``series``) and
the margin report's. Scripts, and ``?header=keys``, get the keys each chart
builder names in its ``Chart.columns``. A ``{currency}`` in a key is the
currency the chart names in it (``spend_USD``)."""

from __future__ import annotations

from django.utils.translation import pgettext_lazy

CSV_LABELS = {
    # time and grouping
    "bucket_start": pgettext_lazy("CSV header", "Bucket start"),
    "period": pgettext_lazy("CSV header", "Period"),
    "day": pgettext_lazy("CSV header", "Day"),
    "month": pgettext_lazy("CSV header", "Month"),
    "series": pgettext_lazy("CSV header", "Series"),
    "kind": pgettext_lazy("CSV header", "Type"),
    "id": pgettext_lazy("CSV header", "ID"),
    "name": pgettext_lazy("CSV header", "Name"),
    "model": pgettext_lazy("CSV header", "Model"),
    "api_key_id": pgettext_lazy("CSV header", "API key ID"),
    "api_key": pgettext_lazy("CSV header", "API key"),
    "sub_account": pgettext_lazy("CSV header", "Sub-account"),
    "node_id": pgettext_lazy("CSV header", "Node ID"),
    "node": pgettext_lazy("CSV header", "Node"),
    "tag_key": pgettext_lazy("CSV header", "Tag key"),
    "group": pgettext_lazy("CSV header", "Group"),
    # calls and errors
    "calls": pgettext_lazy("CSV header", "Calls"),
    "calls_2xx": pgettext_lazy("CSV header", "2xx calls"),
    "calls_4xx": pgettext_lazy("CSV header", "4xx calls (not 429)"),
    "calls_429": pgettext_lazy("CSV header", "429 calls"),
    "calls_5xx": pgettext_lazy("CSV header", "5xx calls"),
    "error_rate": pgettext_lazy("CSV header", "Error rate"),
    # the SLA ledger (overview)
    "target_pct": pgettext_lazy("CSV header", "Availability target (%)"),
    "availability_pct": pgettext_lazy("CSV header", "Availability (%)"),
    "failed_calls": pgettext_lazy("CSV header", "Failed calls"),
    "failure_budget": pgettext_lazy("CSV header", "Failure budget"),
    "budget_left": pgettext_lazy("CSV header", "Failure budget left"),
    "error_rate_pct": pgettext_lazy("CSV header", "Error rate (%)"),
    "rate_4xx_pct": pgettext_lazy("CSV header", "4xx rate (%)"),
    "rate_429_pct": pgettext_lazy("CSV header", "429 rate (%)"),
    "rate_5xx_pct": pgettext_lazy("CSV header", "5xx rate (%)"),
    "errors": pgettext_lazy("CSV header", "Errors"),
    "rate_limited_calls": pgettext_lazy("CSV header", "Refused by rate limit"),
    "cap_refused_calls": pgettext_lazy("CSV header", "Refused by spend cap or balance"),
    "queue_refused_calls": pgettext_lazy("CSV header", "Refused by queue"),
    "refused_pct": pgettext_lazy("CSV header", "Refused (%)"),
    # latency
    "calls_with_ttft": pgettext_lazy("CSV header", "Calls with a first token"),
    "mean_latency_ms": pgettext_lazy("CSV header", "Mean latency (ms)"),
    "mean_upstream_ms": pgettext_lazy("CSV header", "Mean upstream time (ms)"),
    "queue_ms": pgettext_lazy("CSV header", "Queue (ms)"),
    "overhead_ms": pgettext_lazy("CSV header", "Gateway overhead (ms)"),
    "first_token_ms": pgettext_lazy("CSV header", "Upstream to first token (ms)"),
    "decode_ms": pgettext_lazy("CSV header", "Decode (ms)"),
    "latency_sum_us": pgettext_lazy("CSV header", "Latency sum (µs)"),
    "ttft_sum_us": pgettext_lazy("CSV header", "Time to first token sum (µs)"),
    "queue_sum_us": pgettext_lazy("CSV header", "Queue sum (µs)"),
    "overhead_sum_us": pgettext_lazy("CSV header", "Gateway overhead sum (µs)"),
    "upstream_sum_us": pgettext_lazy("CSV header", "Upstream sum (µs)"),
    "p50": pgettext_lazy("CSV header", "Latency p50"),
    "p99": pgettext_lazy("CSV header", "Latency p99"),
    "ttft_p50": pgettext_lazy("CSV header", "Time to first token p50"),
    "p50_ms": pgettext_lazy("CSV header", "p50 (ms)"),
    "p90_ms": pgettext_lazy("CSV header", "p90 (ms)"),
    "p99_ms": pgettext_lazy("CSV header", "p99 (ms)"),
    "p99.9_ms": pgettext_lazy("CSV header", "p99.9 (ms)"),
    "ttft_p50_ms": pgettext_lazy("CSV header", "Time to first token p50 (ms)"),
    # tokens and cache
    "tokens": pgettext_lazy("CSV header", "Tokens"),
    "input_tokens": pgettext_lazy("CSV header", "Input tokens (uncached)"),
    "cache_read_tokens": pgettext_lazy("CSV header", "Cache read tokens"),
    "cache_write_tokens": pgettext_lazy("CSV header", "Cache write tokens"),
    "output_tokens": pgettext_lazy("CSV header", "Output tokens (incl. reasoning)"),
    "reasoning_tokens": pgettext_lazy("CSV header", "Reasoning tokens"),
    "prompt_tokens": pgettext_lazy("CSV header", "Prompt tokens"),
    "cached_prompt_tokens": pgettext_lazy("CSV header", "Cached prompt tokens"),
    "unpriced_cached_tokens": pgettext_lazy("CSV header", "Cached tokens without a price"),
    "calls_with_cache_hit": pgettext_lazy("CSV header", "Calls with a cache hit"),
    "token_hit_rate_pct": pgettext_lazy("CSV header", "Cached prompt share (%)"),
    "call_hit_share_pct": pgettext_lazy("CSV header", "Calls with a cache hit (%)"),
    "prefix_hit_calls": pgettext_lazy("CSV header", "Prefix cache hit calls"),
    "response_cache_calls": pgettext_lazy("CSV header", "Response cache calls"),
    "prefix_hit_share_pct": pgettext_lazy("CSV header", "Prefix cache hits (%)"),
    "response_hit_share_pct": pgettext_lazy("CSV header", "Response cache hits (%)"),
    "hit_rate": pgettext_lazy("CSV header", "Cached prompt share"),
    # money
    "spend": pgettext_lazy("CSV header", "Spend"),
    "spend_{currency}": pgettext_lazy("CSV header", "Spend (%(currency)s)"),
    "saved_{currency}": pgettext_lazy("CSV header", "Saved (%(currency)s)"),
    "share_pct": pgettext_lazy("CSV header", "Share (%)"),
    "invoiced_by_issue_date_{currency}": pgettext_lazy(
        "CSV header", "Invoiced, by issue date (%(currency)s)"
    ),
    "paid_by_payment_date_{currency}": pgettext_lazy(
        "CSV header", "Paid, by payment date (%(currency)s)"
    ),
    "refunded_completed_by_refund_date_{currency}": pgettext_lazy(
        "CSV header", "Refunded, by refund date (%(currency)s)"
    ),
    # nodes
    "status": pgettext_lazy("CSV header", "Status"),
    "health": pgettext_lazy("CSV header", "Health"),
    "running": pgettext_lazy("CSV header", "Running"),
    "waiting": pgettext_lazy("CSV header", "Waiting"),
    "kv_cache_usage_pct": pgettext_lazy("CSV header", "KV cache usage (%)"),
    "prefix_cache_hit_rate_pct": pgettext_lazy("CSV header", "Prefix cache hit rate (%)"),
    "last_probe": pgettext_lazy("CSV header", "Last probed"),
    "from": pgettext_lazy("CSV header", "From"),
    "to": pgettext_lazy("CSV header", "To"),
    "state": pgettext_lazy("CSV header", "State"),
    "seconds": pgettext_lazy("CSV header", "Seconds"),
    "opened_at": pgettext_lazy("CSV header", "Opened at"),
    "closed_at": pgettext_lazy("CSV header", "Closed at"),
    "gateway": pgettext_lazy("CSV header", "Gateway"),
    "reason": pgettext_lazy("CSV header", "Reason"),
    "seconds_open": pgettext_lazy("CSV header", "Seconds open"),
}

# The margin report (platform staff).
MARGIN_CSV_LABELS = {
    "table": pgettext_lazy("CSV header", "Table"),
    "key": pgettext_lazy("CSV header", "Key"),
    "name": pgettext_lazy("CSV header", "Name"),
    "currency": pgettext_lazy("CSV header", "Currency"),
    "calls": pgettext_lazy("CSV header", "Calls"),
    "revenue": pgettext_lazy("CSV header", "Revenue"),
    "vendor_cost": pgettext_lazy("CSV header", "Vendor cost"),
    "margin": pgettext_lazy("CSV header", "Margin"),
    "margin_pct": pgettext_lazy("CSV header", "Margin (%)"),
    "calls_without_comparable_cost": pgettext_lazy("CSV header", "Calls without a comparable cost"),
}
