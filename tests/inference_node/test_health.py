"""Health probes against a real HTTP server on 127.0.0.1: what is recorded,
when a node flips, and the audit events of each flip."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from accounts.models import AuditEvent
from inference_node import health, probes, tasks
from inference_node.models import Node, NodeHealth, NodeStatus
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db


def _probe(node: Node) -> Node:
    health.probe_nodes([node])
    node.refresh_from_db()
    return node


def _events(node, action):
    return list(
        AuditEvent.objects.filter(target_type="node", target_id=str(node.pk), action=action)
    )


def test_first_success_makes_an_unknown_node_healthy_and_records_what_it_saw(org, fake_node):
    node = NodeFactory(organization=org, base_url=fake_node.url, health=NodeHealth.UNKNOWN)
    node = _probe(node)
    assert node.health == NodeHealth.HEALTHY
    assert node.consecutive_successes == 1 and node.consecutive_failures == 0
    assert node.last_seen_at is not None and node.last_error == ""
    assert node.last_latency_ms is not None and node.last_latency_ms < 1000
    assert node.discovered_models == [{"id": "llama", "max_model_len": 8192}]
    # An organization's own node is asked for its health and models, not /metrics.
    assert not node.metrics_available and node.running is None
    assert "/metrics" not in fake_node.paths
    (event,) = _events(node, "node.healthy")
    assert event.organization == org and event.actor_label == "system"
    assert event.params["from"] == "unknown" and event.params["to"] == "healthy"


def test_a_shared_nodes_metrics_are_read(fake_node):
    node = _probe(NodeFactory(organization=None, base_url=fake_node.url))
    assert node.metrics_available
    assert (node.running, node.waiting, node.kv_cache_usage) == (3, 1, 0.25)
    assert node.prefix_cache_hit_rate == pytest.approx(0.4)


def test_failures_then_successes_flip_health_with_one_audit_event_each(org, fake_node):
    node = NodeFactory(organization=org, base_url=fake_node.url)  # healthy
    fake_node.health_status = 503
    for expected_failures in (1, 2):
        node = _probe(node)
        assert node.health == NodeHealth.HEALTHY  # not yet: NODE_UNHEALTHY_AFTER is 3
        assert node.consecutive_failures == expected_failures
    seen_before = node.last_seen_at
    node = _probe(node)
    assert node.health == NodeHealth.UNHEALTHY and node.consecutive_failures == 3
    assert node.last_error == "/health answered HTTP 503"
    assert node.last_seen_at == seen_before
    (down,) = _events(node, "node.unhealthy")
    assert down.params["error"] == "/health answered HTTP 503"
    assert down.params["consecutive_failures"] == 3

    # When the node answers again, it takes NODE_HEALTHY_AFTER (2) successes.
    fake_node.health_status = 200
    node = _probe(node)
    assert node.health == NodeHealth.UNHEALTHY and node.consecutive_successes == 1
    node = _probe(node)
    assert node.health == NodeHealth.HEALTHY and node.last_error == ""
    assert len(_events(node, "node.healthy")) == 1
    assert len(_events(node, "node.unhealthy")) == 1


def test_a_failure_run_broken_by_a_success_starts_over(org, fake_node):
    node = NodeFactory(organization=org, base_url=fake_node.url)
    fake_node.health_status = 500
    _probe(node)
    _probe(node)
    fake_node.health_status = 200
    _probe(node)
    fake_node.health_status = 500
    node = _probe(node)
    assert node.health == NodeHealth.HEALTHY and node.consecutive_failures == 1


def test_unreachable_node_error_names_no_address(org, fake_node):
    fake_node.stop()
    node = NodeFactory(organization=org, base_url=fake_node.url, health=NodeHealth.UNKNOWN)
    node = _probe(node)
    assert not node.last_seen_at and node.consecutive_failures == 1
    assert node.last_error == "cannot connect (connection refused)"
    assert str(fake_node.port) not in node.last_error and "127.0.0.1" not in node.last_error


def test_a_hanging_node_fails_within_the_timeout(org, fake_node):
    fake_node.delay = 1.6
    node = NodeFactory(organization=org, base_url=fake_node.url)
    started = time.monotonic()
    node = _probe(node)
    assert time.monotonic() - started < 1.5
    assert "no answer within the timeout" in node.last_error


def test_missing_metrics_is_fine_and_clears_load(org, fake_node):
    node = NodeFactory(organization=org, base_url=fake_node.url, running=9, kv_cache_usage=0.9)
    fake_node.metrics = None  # /metrics answers 404
    node = _probe(node)
    assert node.consecutive_successes == 1 and node.last_error == ""
    assert not node.metrics_available and node.running is None and node.kv_cache_usage is None


def test_a_model_list_that_is_not_one_fails_the_probe(org, fake_node):
    fake_node.models = "nope"
    node = _probe(NodeFactory(organization=org, base_url=fake_node.url))
    assert node.last_error == "/v1/models answered no model list"


def test_token_is_sent_and_a_wrong_one_is_reported(org, fake_node):
    fake_node.required_token = "right-token-123456"
    node = NodeFactory(organization=org, base_url=fake_node.url, token="wrong-token-123456")
    node = _probe(node)
    assert "HTTP 401 (check the node's token)" in node.last_error
    assert "wrong-token" not in node.last_error
    node.token = "right-token-123456"
    node.save()
    node = _probe(node)
    assert node.last_error == "" and "Bearer right-token-123456" in fake_node.seen_auth


def test_hit_rate_is_taken_from_the_delta_between_two_scrapes(fake_node):
    node = NodeFactory(organization=None, base_url=fake_node.url)
    fake_node.set_counters(1000, 100)
    node = _probe(node)
    assert node.prefix_cache_hit_rate == pytest.approx(0.1)  # cumulative on the first
    fake_node.set_counters(2000, 1000)
    node = _probe(node)
    assert node.prefix_cache_hit_rate == pytest.approx(0.9)  # 900 of the last 1000


def test_nodes_are_probed_concurrently():
    fakes = []
    try:
        from tests.inference_node.conftest import FakeNode

        fakes = [FakeNode() for _ in range(5)]
        for fake in fakes:
            fake.delay = 0.4
            NodeFactory(base_url=fake.url)
        started = time.monotonic()
        round_ = health.probe_nodes()
        elapsed = time.monotonic() - started
        assert round_.ok == 5
        assert elapsed < 1.5  # five nodes one after another would take 5 x 0.4 s or more
    finally:
        for fake in fakes:
            fake.stop()


def test_only_active_and_draining_nodes_are_probed(org, fake_node):
    active = NodeFactory(organization=org, base_url=fake_node.url)
    draining = NodeFactory(organization=org, base_url=fake_node.url, status=NodeStatus.DRAINING)
    disabled = NodeFactory(organization=org, base_url=fake_node.url, status=NodeStatus.DISABLED)
    round_ = health.probe_nodes()
    assert {r.node_id for r in round_.results} == {active.pk, draining.pk}
    disabled.refresh_from_db()
    assert disabled.last_probe_at is None


def test_shared_node_transition_is_audited_without_an_organization(fake_node):
    fake_node.health_status = 503
    node = NodeFactory(organization=None, base_url=fake_node.url)
    for _ in range(3):
        node = _probe(node)
    (event,) = _events(node, "node.unhealthy")
    assert event.organization is None


def test_audit_events_never_carry_the_token(org, fake_node):
    node = NodeFactory(organization=org, base_url=fake_node.url, token="sekrit-token-abcdef")
    fake_node.health_status = 503
    for _ in range(3):
        _probe(node)
    fake_node.health_status = 200
    for _ in range(2):
        _probe(node)
    events = AuditEvent.objects.filter(target_id=str(node.pk))
    assert events.count() == 2
    assert all("sekrit" not in str(e.params) for e in events)


def test_probe_task_runs_a_round_and_skips_while_one_is_running(org, fake_node):
    NodeFactory(organization=org, base_url=fake_node.url)
    assert tasks.probe_nodes() == 1
    cache.add(tasks.LOCK_KEY, "1", timeout=30)
    try:
        assert tasks.probe_nodes() == 0
    finally:
        cache.delete(tasks.LOCK_KEY)


def test_beat_schedules_the_probe_task(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["inference-node-probe"]
    assert entry["task"] == "inference_node.probe_nodes" == tasks.probe_nodes.name
    assert entry["schedule"] == float(settings.NODE_PROBE_INTERVAL_SECONDS)


def test_an_unexpected_error_fails_only_that_node(org, fake_node, monkeypatch):
    good = NodeFactory(organization=org, base_url=fake_node.url)
    odd = NodeFactory(organization=org, base_url=fake_node.url)
    real = health.probe_node

    async def flaky(session, target, *, timeout):
        if target.node_id == odd.pk:
            raise RuntimeError("boom")
        return await real(session, target, timeout=timeout)

    monkeypatch.setattr(probes, "probe_node", flaky)
    round_ = health.probe_nodes()
    by_id = {r.node_id: r for r in round_.results}
    assert by_id[good.pk].ok and not by_id[odd.pk].ok
    odd.refresh_from_db()
    assert odd.last_error == "probe failed (RuntimeError)"
