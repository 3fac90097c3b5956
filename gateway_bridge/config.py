"""The gateway's settings, read once: ``GatewayConfig.from_settings()``.

``Gateway`` takes one (``Gateway(config=...)``; by default the settings' own
when it is made) and hands each part what it needs, so the stages never read
``django.conf.settings`` per call and a test builds a gateway with the values it
wants without patching settings. docs/configuration.md describes each variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from gateway_bridge.breaker import RouterConfig


@dataclass(frozen=True, slots=True)
class UpstreamTimeouts:
    """Every upstream request's timeouts in seconds (``UpstreamPool.request``'s keywords)."""

    connect_timeout: float
    first_byte_timeout: float
    idle_timeout: float
    total_timeout: float

    def as_keywords(self) -> dict[str, float | None]:
        return {
            "connect_timeout": self.connect_timeout,
            "first_byte_timeout": self.first_byte_timeout,
            "idle_timeout": self.idle_timeout,
            "total_timeout": self.total_timeout,
        }


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Where caps and rate limits are counted: ``redis`` (shared by every
    gateway process) or ``memory`` (this process)."""

    store: str
    redis_url: str
    redis_timeout: float  # each command's deadline
    redis_replicas: int  # replicas a write waits for (Sentinel, Cluster)

    @property
    def shared(self) -> bool:
        return self.store == "redis"

    @classmethod
    def from_settings(cls) -> LimitsConfig:
        s = settings
        return cls(
            store=s.GATEWAY_LIMITS_STORE,
            redis_url=s.GATEWAY_LIMITS_REDIS_URL,
            redis_timeout=s.GATEWAY_LIMITS_REDIS_TIMEOUT,
            redis_replicas=s.GATEWAY_LIMITS_REDIS_REPLICAS,
        )


@dataclass(frozen=True, slots=True)
class KeyCacheConfig:
    """How long a key's entry is trusted, and the refused keys remembered."""

    seconds: float
    negative_entries: int
    negative_seconds: int

    @classmethod
    def from_settings(cls) -> KeyCacheConfig:
        s = settings
        return cls(
            seconds=s.GATEWAY_KEY_CACHE_SECONDS,
            negative_entries=s.GATEWAY_NEGATIVE_KEY_CACHE_ENTRIES,
            negative_seconds=s.GATEWAY_NEGATIVE_KEY_CACHE_SECONDS,
        )


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """What one gateway process is configured with (``GATEWAY_*``). No defaults
    here: console/settings/gateway.py has them, ``from_settings`` reads them."""

    routing: RouterConfig
    timeouts: UpstreamTimeouts
    limits: LimitsConfig
    key_cache: KeyCacheConfig
    metrics_dir: Path  # this host's shared metrics directory
    metrics_token: str  # the bearer token /metrics asks for ("": none)
    metrics_public: bool  # /metrics open without a token
    spool_dir: Path  # usage spools and journals, a slot per process
    usage_journal: bool
    response_cache_entries: int
    cache_redis_url: str  # the response cache ("": in process)
    responses_redis_url: str  # stored responses ("": in process)
    responses_max_bytes: int  # in process, all entries together
    responses_max_entry_bytes: int  # one entry, anywhere
    trusted_proxies: tuple[str, ...]
    max_body_bytes: int
    large_body_bytes: int
    large_body_concurrency: int
    parse_workers: int
    retries: int
    retry_backoff_seconds: float
    default_max_tokens: int
    metrics_max_models: int
    responses_max_entries: int
    responses_retention_seconds: int
    emit_max_batch: int
    emit_max_delay: float

    @property
    def hold_seconds(self) -> float:
        """How long a call may hold its reservation: its whole time and queueing, and a minute."""
        return self.timeouts.total_timeout + self.routing.queue_timeout + 60

    @classmethod
    def from_settings(cls) -> GatewayConfig:
        s = settings
        return cls(
            routing=RouterConfig(
                default_policy=s.GATEWAY_ROUTING_POLICY,
                policies=dict(s.GATEWAY_ROUTING_OVERRIDES),
                load_factor=s.GATEWAY_LOAD_FACTOR,
                prefix_chars=s.GATEWAY_AFFINITY_PREFIX_CHARS,
                breaker_window=s.GATEWAY_BREAKER_WINDOW_SECONDS,
                breaker_error_rate=s.GATEWAY_BREAKER_ERROR_RATE,
                breaker_min_calls=s.GATEWAY_BREAKER_MIN_CALLS,
                breaker_open_seconds=s.GATEWAY_BREAKER_OPEN_SECONDS,
                queue_timeout=s.GATEWAY_QUEUE_TIMEOUT,
                max_queue_depth=s.GATEWAY_QUEUE_MAX_DEPTH,
            ),
            timeouts=UpstreamTimeouts(
                connect_timeout=s.GATEWAY_CONNECT_TIMEOUT,
                first_byte_timeout=s.GATEWAY_FIRST_BYTE_TIMEOUT,
                idle_timeout=s.GATEWAY_IDLE_TIMEOUT,
                total_timeout=s.GATEWAY_TOTAL_TIMEOUT,
            ),
            limits=LimitsConfig.from_settings(),
            key_cache=KeyCacheConfig.from_settings(),
            trusted_proxies=tuple(s.GATEWAY_TRUSTED_PROXIES),
            max_body_bytes=s.GATEWAY_MAX_BODY_BYTES,
            large_body_bytes=s.GATEWAY_LARGE_BODY_BYTES,
            large_body_concurrency=s.GATEWAY_LARGE_BODY_CONCURRENCY,
            parse_workers=s.GATEWAY_PARSE_WORKERS,
            retries=s.GATEWAY_RETRIES,
            retry_backoff_seconds=s.GATEWAY_RETRY_BACKOFF_SECONDS,
            default_max_tokens=s.GATEWAY_DEFAULT_MAX_TOKENS,
            metrics_max_models=s.GATEWAY_METRICS_MAX_MODELS,
            metrics_dir=Path(s.GATEWAY_METRICS_DIR),
            metrics_token=s.GATEWAY_METRICS_TOKEN or "",
            metrics_public=bool(s.GATEWAY_METRICS_PUBLIC),
            spool_dir=Path(s.GATEWAY_SPOOL_DIR),
            usage_journal=bool(s.GATEWAY_USAGE_JOURNAL),
            response_cache_entries=s.GATEWAY_RESPONSE_CACHE_ENTRIES,
            cache_redis_url=s.CACHE_REDIS_URL or "",
            responses_redis_url=s.GATEWAY_RESPONSES_REDIS_URL or "",
            responses_max_bytes=s.GATEWAY_RESPONSES_MAX_BYTES,
            responses_max_entry_bytes=s.GATEWAY_RESPONSES_MAX_ENTRY_BYTES,
            responses_max_entries=s.GATEWAY_RESPONSES_MAX_ENTRIES,
            responses_retention_seconds=s.GATEWAY_RESPONSES_RETENTION_SECONDS,
            emit_max_batch=s.GATEWAY_EMIT_MAX_BATCH,
            emit_max_delay=s.GATEWAY_EMIT_MAX_DELAY,
        )
