"""Key lifecycle as the gateway sees it, with its key cache trusting an entry
for five minutes: a removed member's keys stop at once (in this process and,
with Redis, in another one within a second), handed-over keys keep working,
and a rotation's grace period ends to the second."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from django.conf import settings

from accounts.actors import Actor
from accounts.models import Role
from accounts.services import api_key_rotate, membership_remove
from tests.factories import MembershipFactory, issue_key
from tests.gateway_bridge.harness import gateway_process
from tests.services import require

BODY = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def call(url: str, raw: str) -> int:
    req = urllib.request.Request(  # noqa: S310 - a local test gateway
        f"{url}/v1/chat/completions",
        data=json.dumps(BODY).encode(),
        headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def long_cache(gw, monkeypatch):
    """The key cache trusts an entry for five minutes (Redis deployments use 60 s)."""
    monkeypatch.setattr(gw.gateway.state, "key_ttl", 300)
    return gw


@pytest.fixture
def developer(tenant):
    member = MembershipFactory(organization=tenant.org, role=Role.DEVELOPER)
    return member, Actor(member, "127.0.0.1")


def test_a_removed_members_keys_stop_at_once(long_cache, tenant, developer):
    member, actor = developer
    _, raw = issue_key(actor, "laptop")
    assert call(long_cache.url, raw) == 200  # now cached for five minutes
    membership_remove(actor=tenant.actor, membership_id=member.pk)
    assert call(long_cache.url, raw) == 401


def test_handed_over_keys_keep_working(long_cache, tenant, developer):
    member, actor = developer
    key, raw = issue_key(actor, "batch-job")
    assert call(long_cache.url, raw) == 200
    membership_remove(
        actor=tenant.actor, membership_id=member.pk, keys="hand_over", hand_over_to=tenant.owner.pk
    )
    assert call(long_cache.url, raw) == 200
    [event] = long_cache.emitter.wait_for(2)[-1:]
    assert event["api_key_id"] == key.pk


def test_a_rotation_grace_period_ends_to_the_second(long_cache, tenant):
    key, old = tenant.new_key()
    assert call(long_cache.url, old) == 200  # the old secret is cached for five minutes
    key, new = api_key_rotate(actor=tenant.actor, key_id=key.pk, grace_seconds=2)
    ends = key.previous_valid_until.timestamp()
    assert call(long_cache.url, old) == 200  # in its grace period (and cached again)
    assert call(long_cache.url, new) == 200
    time.sleep(max(0.0, ends - time.time()) + 0.05)
    assert call(long_cache.url, old) == 401  # not a minute later: now
    assert call(long_cache.url, new) == 200


def test_a_removed_members_keys_stop_in_another_process_within_a_second(
    tenant, developer, tmp_path, gateway_settings
):
    require(bool(settings.REDIS_URL), "REDIS_URL is not set: cross-process revocation uses Redis")
    member, actor = developer
    _, raw = issue_key(actor, "server")
    with gateway_process(tmp_path / "b", GATEWAY_KEY_CACHE_SECONDS="300") as b:
        assert call(b.url, raw) == 200
        removed_at = time.monotonic()
        membership_remove(actor=tenant.actor, membership_id=member.pk)
        while call(b.url, raw) != 401:
            assert time.monotonic() - removed_at < 1.0, "the removal took over a second"
            time.sleep(0.02)
