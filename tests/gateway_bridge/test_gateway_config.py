"""The gateway's settings are read once, into a typed GatewayConfig: a gateway
made with a config uses its values whatever the settings say later."""

from __future__ import annotations

import dataclasses

from gateway_bridge.config import GatewayConfig, KeyCacheConfig
from gateway_bridge.gateway import Gateway
from gateway_bridge.metrics_http import metrics_allowed


def test_the_config_is_the_settings_read_once(settings):
    settings.GATEWAY_RETRIES = 5
    settings.GATEWAY_ROUTING_POLICY = "least_outstanding"
    settings.GATEWAY_TRUSTED_PROXIES = ["10.0.0.0/8"]
    config = GatewayConfig.from_settings()
    settings.GATEWAY_RETRIES = 0  # later changes do not reach a config already read
    assert config.retries == 5
    assert config.routing.default_policy == "least_outstanding"
    assert config.trusted_proxies == ("10.0.0.0/8",)
    assert config.hold_seconds == config.timeouts.total_timeout + config.routing.queue_timeout + 60


def test_a_gateway_uses_the_config_it_is_given(settings, tmp_path):
    base = GatewayConfig.from_settings()
    config = dataclasses.replace(
        base,
        retries=7,
        max_body_bytes=2048,
        default_max_tokens=99,
        metrics_dir=tmp_path,
        routing=dataclasses.replace(base.routing, default_policy="round_robin"),
        key_cache=KeyCacheConfig(seconds=7.5, negative_entries=11, negative_seconds=13),
        response_cache_entries=17,
        spool_dir=tmp_path / "spool",
        metrics_token="scrape-me",
    )
    settings.GATEWAY_RETRIES = 1
    gateway = Gateway(config=config)
    assert gateway.config is config
    assert (gateway.forwarding.retries, gateway.max_body, gateway.admission.default_max_tokens) == (
        7,
        2048,
        99,
    )
    assert gateway.admission.hold_seconds == config.hold_seconds
    assert gateway.router.policy_for("any-model") == "round_robin"
    assert gateway.forwarding.timeouts["total_timeout"] == config.timeouts.total_timeout
    assert gateway.state.key_ttl == 7.5
    assert (gateway.state.negative.max_entries, gateway.cache.max_entries) == (11, 17)
    emitter = gateway.emitter
    try:
        assert emitter.spool.path.parent == tmp_path / "spool"
    finally:
        emitter.close()


def test_metrics_answer_the_configured_token_only():
    assert metrics_allowed("Bearer scrape-me", "scrape-me", public=False)
    assert not metrics_allowed("Bearer other", "scrape-me", public=True)
    assert not metrics_allowed("", "", public=False)
    assert metrics_allowed("", "", public=True)
