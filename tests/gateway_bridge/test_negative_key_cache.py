"""Unknown keys and wrong secrets never reach the database twice: a flood of
garbage keys costs one database lookup per distinct key, then only a hash and
a dict look-up, for as long as the negative entries live (not 1 s), whatever
other keys are issued meanwhile; a valid key, and a key issued afterwards,
work at once; a key made usable again (its sub-account resumed) works at
once too. Lookups are counted on the gateway's key lookup function."""

from __future__ import annotations

import secrets
import time

import pytest

from accounts.services import sub_account_create, sub_account_update
from gateway_bridge import state_db as gateway_state
from gateway_bridge.negative_cache import NegativeCache
from tests.gateway_bridge.test_gateway_openai import raw_request

pytestmark = pytest.mark.django_db(transaction=True)

ALPHABET = "abcdefghijkmnopqrstuvwxyz23456789"


@pytest.fixture
def lookups(monkeypatch):
    """Every key the gateway looked up in the database."""
    seen: list[str] = []
    real = gateway_state.api_key_authenticate

    def counting(raw, **kwargs):
        seen.append(raw)
        return real(raw, **kwargs)

    monkeypatch.setattr(gateway_state, "api_key_authenticate", counting)
    return seen


def _random_key() -> str:
    public_id = "".join(secrets.choice(ALPHABET) for _ in range(10))
    return f"sk-{public_id}_{secrets.token_urlsafe(32)}"


def _status(gw, raw: str) -> int:
    status, _, _ = raw_request(gw, "GET", "/v1/models", headers={"Authorization": f"Bearer {raw}"})
    return status


def test_garbage_keys_reach_the_database_once_each(gw, tenant, lookups):
    # Given random well-formed keys, wrong secrets for the tenant's real key id and junk
    garbage = [_random_key() for _ in range(40)]
    garbage += [tenant.raw[:-6] + secrets.token_hex(3) for _ in range(5)]
    garbage += [f"not-a-key-{i}" for i in range(5)]
    # When they are all tried
    assert {_status(gw, raw) for raw in garbage} == {401}
    first = len(lookups)
    assert first <= len(garbage)
    # Then, after another key was issued elsewhere and tried again later (past
    # the old one-second memory), none of them reaches the database again
    tenant.new_key(name="issued meanwhile")
    time.sleep(1.2)
    assert {_status(gw, raw) for raw in garbage} == {401}
    assert len(lookups) == first
    assert gw.gateway.state.negative_hits >= len(garbage)
    # while the real key works, and a key issued now works at once
    assert _status(gw, tenant.raw) == 200
    _, fresh = tenant.new_key(name="fresh")
    assert _status(gw, fresh) == 200


def test_a_key_made_usable_again_works_at_once(gw, tenant, lookups):
    # Given a key of a suspended sub-account, refused and remembered as refused
    sub = sub_account_create(actor=tenant.actor, name="team")
    _, raw = tenant.new_key(name="team key", sub_account_id=sub.id)
    sub_account_update(actor=tenant.actor, sub_account_id=sub.id, status="suspended")
    time.sleep(0.3)  # with Redis the change is heard twice: in process, then over pub/sub
    assert _status(gw, raw) == 401
    before = len(lookups)
    assert _status(gw, raw) == 401
    assert len(lookups) == before  # refused from the negative cache
    # When the sub-account is resumed
    sub_account_update(actor=tenant.actor, sub_account_id=sub.id, status="active")
    # Then its key works on the very next call
    assert _status(gw, raw) == 200


def test_the_negative_cache_is_bounded_and_expires():
    now = [0.0]
    cache = NegativeCache(3, 10, clock=lambda: now[0])
    for digest in "abcd":
        cache.add(digest)
    assert len(cache) == 3 and "a" not in cache  # the least recently seen went first
    assert "b" in cache
    cache.add("e")  # "c" is now the least recently seen
    assert "c" not in cache and {"b", "d", "e"} == {d for d in "bde" if d in cache}
    now[0] = 10.0
    assert "b" not in cache and len(cache) == 2  # expired entries are dropped when met
    assert cache.discard(["d", "x"]) == 1
    NegativeCache(0, 10).add("a")  # disabled: keeps nothing
