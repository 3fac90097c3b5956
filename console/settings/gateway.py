"""The embedded LLM gateway (gateway_bridge): bodies, upstream timeouts, retries,
routing, breakers, limits, usage emission, caches and metrics."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console.kernel import config
from console.settings.base import VAR_DIR
from console.settings.workers import PUBSUB_REDIS_URL, REDIS_URL

# --- gateway bridge ---------------------------------------------------------
# Requests bigger than this get 413 before they are parsed.
GATEWAY_MAX_BODY_BYTES = config.env_int("GATEWAY_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024)
# Fair admission (issue 19, gateway_bridge.pipeline.fair): bodies of at least this many
# bytes take one of their organization's slots before they are read (429 when none is
# free) and are validated in a parse worker process before the event loop parses them.
GATEWAY_LARGE_BODY_BYTES = config.env_int("GATEWAY_LARGE_BODY_BYTES", 256 * 1024, minimum=1024)
GATEWAY_LARGE_BODY_CONCURRENCY = config.env_int("GATEWAY_LARGE_BODY_CONCURRENCY", 2, minimum=1)
# Parse worker processes per gateway process (0: large bodies are parsed on the loop).
GATEWAY_PARSE_WORKERS = config.env_int("GATEWAY_PARSE_WORKERS", 1, minimum=0)
# Peers (IPs or CIDRs) whose X-Forwarded-For is believed; everyone else's is ignored.
GATEWAY_TRUSTED_PROXIES = config.env_list("GATEWAY_TRUSTED_PROXIES")
# Upstream timeouts, seconds: connect, response head, gap between stream events, whole call.
GATEWAY_CONNECT_TIMEOUT = config.env_float("GATEWAY_CONNECT_TIMEOUT", 2.0, minimum=0.01)
GATEWAY_FIRST_BYTE_TIMEOUT = config.env_float("GATEWAY_FIRST_BYTE_TIMEOUT", 60.0, minimum=0.01)
GATEWAY_IDLE_TIMEOUT = config.env_float("GATEWAY_IDLE_TIMEOUT", 30.0, minimum=0.01)
GATEWAY_TOTAL_TIMEOUT = config.env_float("GATEWAY_TOTAL_TIMEOUT", 600.0, minimum=0.01)
# Retries before the first byte reached the client (connect errors, timeouts, 429, 5xx).
GATEWAY_RETRIES = config.env_int("GATEWAY_RETRIES", 2, minimum=0)
GATEWAY_RETRY_BACKOFF_SECONDS = config.env_float("GATEWAY_RETRY_BACKOFF_SECONDS", 0.05, minimum=0)
# Output budget of a call that sets no max_tokens: it is reserved, and sent to the node.
GATEWAY_DEFAULT_MAX_TOKENS = config.env_int("GATEWAY_DEFAULT_MAX_TOKENS", 4096, minimum=1)
# How long a call waits for a free node slot before 503.
GATEWAY_QUEUE_TIMEOUT = config.env_float("GATEWAY_QUEUE_TIMEOUT", 10.0, minimum=0)
GATEWAY_QUEUE_MAX_DEPTH = config.env_int("GATEWAY_QUEUE_MAX_DEPTH", 1000, minimum=0)
# Routing: prefix_affinity | round_robin | least_outstanding, and per-model overrides
# as "model=policy" pairs.
GATEWAY_ROUTING_POLICY = config.env_str("GATEWAY_ROUTING_POLICY", "prefix_affinity")
GATEWAY_ROUTING_OVERRIDES = dict(
    item.split("=", 1) for item in config.env_list("GATEWAY_ROUTING_OVERRIDES") if "=" in item
)
GATEWAY_LOAD_FACTOR = config.env_float("GATEWAY_LOAD_FACTOR", 1.25, minimum=1.0)
GATEWAY_AFFINITY_PREFIX_CHARS = config.env_int("GATEWAY_AFFINITY_PREFIX_CHARS", 256, minimum=1)
# Circuit breaker per node.
GATEWAY_BREAKER_ERROR_RATE = config.env_float("GATEWAY_BREAKER_ERROR_RATE", 0.15, minimum=0)
GATEWAY_BREAKER_MIN_CALLS = config.env_int("GATEWAY_BREAKER_MIN_CALLS", 100, minimum=1)
GATEWAY_BREAKER_WINDOW_SECONDS = config.env_int("GATEWAY_BREAKER_WINDOW_SECONDS", 60, minimum=1)
GATEWAY_BREAKER_OPEN_SECONDS = config.env_float("GATEWAY_BREAKER_OPEN_SECONDS", 30.0, minimum=0)
# How long a process trusts a cached key; Redis pub/sub invalidates sooner.
GATEWAY_KEY_CACHE_SECONDS = config.env_float(
    "GATEWAY_KEY_CACHE_SECONDS", 60.0 if PUBSUB_REDIS_URL else 1.0, minimum=0
)
# The limits' Redis: spend caps, balances, rate counters, vendor keys' limits. It
# must never evict (maxmemory-policy noeviction): an evicted counter is spend
# that no longer counts.
GATEWAY_LIMITS_REDIS_URL = config.env_str("GATEWAY_LIMITS_REDIS_URL") or REDIS_URL
if GATEWAY_LIMITS_REDIS_URL and GATEWAY_LIMITS_REDIS_URL != REDIS_URL:
    config.parse_redis_url(GATEWAY_LIMITS_REDIS_URL, "GATEWAY_LIMITS_REDIS_URL")
# Limits store: "redis" (shared by every gateway process) or "memory" (this process).
GATEWAY_LIMITS_STORE = config.env_str(
    "GATEWAY_LIMITS_STORE", "redis" if GATEWAY_LIMITS_REDIS_URL else "memory"
)
if GATEWAY_LIMITS_STORE not in ("redis", "memory"):
    raise ImproperlyConfigured("GATEWAY_LIMITS_STORE must be redis or memory")
if GATEWAY_LIMITS_STORE == "redis" and not GATEWAY_LIMITS_REDIS_URL:
    raise ImproperlyConfigured(
        "GATEWAY_LIMITS_STORE=redis needs GATEWAY_LIMITS_REDIS_URL or REDIS_URL"
    )
# Usage events: batch size and delay, and the spool directory for broker outages.
GATEWAY_EMIT_MAX_BATCH = config.env_int("GATEWAY_EMIT_MAX_BATCH", 500, minimum=1)
GATEWAY_EMIT_MAX_DELAY = config.env_float("GATEWAY_EMIT_MAX_DELAY", 0.25, minimum=0.001)
GATEWAY_SPOOL_DIR = Path(config.env_str("GATEWAY_SPOOL_DIR") or VAR_DIR / "spool")
# Each finished call's usage event also appended to a journal file in the
# spool directory (one write, no fsync): a killed gateway's queued events survive.
GATEWAY_USAGE_JOURNAL = config.env_bool("GATEWAY_USAGE_JOURNAL", True)
# Response cache entries kept in process when there is no Redis.
GATEWAY_RESPONSE_CACHE_ENTRIES = config.env_int("GATEWAY_RESPONSE_CACHE_ENTRIES", 10_000, minimum=0)
# Responses API: how long a stored response (store: true) can be retrieved and
# continued (previous_response_id), and how many are kept in process without Redis.
GATEWAY_RESPONSES_RETENTION_SECONDS = config.env_int(
    "GATEWAY_RESPONSES_RETENTION_SECONDS", 30 * 24 * 3600, minimum=1
)
GATEWAY_RESPONSES_MAX_ENTRIES = config.env_int("GATEWAY_RESPONSES_MAX_ENTRIES", 10_000, minimum=0)
# ... and in how many bytes in all (in process), and the largest one kept (anywhere).
GATEWAY_RESPONSES_MAX_BYTES = config.env_int(
    "GATEWAY_RESPONSES_MAX_BYTES", 256 * 1024 * 1024, minimum=0
)
GATEWAY_RESPONSES_MAX_ENTRY_BYTES = config.env_int(
    "GATEWAY_RESPONSES_MAX_ENTRY_BYTES", 8 * 1024 * 1024, minimum=0
)
# Stored responses' Redis: every entry has a time to live, so give it a maxmemory
# with volatile-lru (the oldest conversations go first when it is full).
GATEWAY_RESPONSES_REDIS_URL = config.env_str("GATEWAY_RESPONSES_REDIS_URL") or REDIS_URL
if GATEWAY_RESPONSES_REDIS_URL and GATEWAY_RESPONSES_REDIS_URL != REDIS_URL:
    config.parse_redis_url(GATEWAY_RESPONSES_REDIS_URL, "GATEWAY_RESPONSES_REDIS_URL")
# /metrics answers "Authorization: Bearer <GATEWAY_METRICS_TOKEN>" only (see below).
GATEWAY_METRICS_TOKEN = config.env_str("GATEWAY_METRICS_TOKEN")

# --- gateway hardening (issue 19) -------------------------------------------
# /metrics names every node and key-change counter: closed (401) unless a
# token is set and sent, or it is opened on purpose for an internal scraper.
GATEWAY_METRICS_PUBLIC = config.env_bool("GATEWAY_METRICS_PUBLIC", False)
# The gateway processes of one host (uvicorn --workers N) share their metrics
# through this directory: a scrape of any of them shows the whole host. Each
# separately scraped server needs its own (issue 20).
GATEWAY_METRICS_DIR = Path(config.env_str("GATEWAY_METRICS_DIR") or VAR_DIR / "metrics")
# Distinct models a process names in gateway_requests_total's model label
# (the rest count as "other").
GATEWAY_METRICS_MAX_MODELS = config.env_int("GATEWAY_METRICS_MAX_MODELS", 100, minimum=1)
# Deadline of each command of the limits' Redis client (seconds): past it the
# call gets 503 limits_unavailable instead of waiting on a stalled Redis.
GATEWAY_LIMITS_REDIS_TIMEOUT = config.env_float("GATEWAY_LIMITS_REDIS_TIMEOUT", 0.25, minimum=0.001)
# On Sentinel and Cluster: replicas that must acknowledge (WAIT) an admission or a
# settle before it counts, so a failover cannot lose it and let a cap overrun; with
# fewer the call gets 503 limits_unavailable. 0 trades that guarantee for
# availability while a primary has no replica. Ignored on one Redis.
GATEWAY_LIMITS_REDIS_REPLICAS = config.env_int("GATEWAY_LIMITS_REDIS_REPLICAS", 1, minimum=0)
# Presented keys found unusable are remembered (by their keyed hash) this long,
# at most this many, so a flood of garbage keys reaches the database once each.
GATEWAY_NEGATIVE_KEY_CACHE_SECONDS = config.env_int(
    "GATEWAY_NEGATIVE_KEY_CACHE_SECONDS", 300, minimum=0
)
GATEWAY_NEGATIVE_KEY_CACHE_ENTRIES = config.env_int(
    "GATEWAY_NEGATIVE_KEY_CACHE_ENTRIES", 100_000, minimum=0
)
# --- end of gateway hardening ------------------------------------------------
