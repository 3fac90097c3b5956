"""Which buckets and rules a key's call goes through, in the org's timezone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from accounts.keys import AuthenticatedKey
from gateway_bridge.limits import plan
from gateway_bridge.limits.plan import PERIOD_MARGIN_SECONDS


def auth(**overrides) -> AuthenticatedKey:
    fields = {
        "key_id": 42,
        "public_id": "abcdefghij",
        "name": "k",
        "organization_id": 3,
        "organization_slug": "acme",
        "currency": "USD",
        "timezone": "UTC",
        "billing_mode": "postpaid",
        "sub_account_id": 7,
        "owner_id": None,
        "allowed_models_key": (),
        "allowed_models_sub_account": (),
        "allowed_models_org": (),
        "ip_allowlist": (),
        "priority": "normal",
        "expires_at": None,
        "key_caps": (1_000, 20_000, 300_000),
        "sub_account_caps": (None, 50_000, None),
        "key_rpm": 60,
        "key_tpm": None,
        "sub_account_rpm": None,
        "sub_account_tpm": None,
        "org_rpm": None,
        "org_tpm": 90_000,
    }
    fields.update(overrides)
    return AuthenticatedKey(**fields)


def test_every_key_of_a_call_carries_the_organizations_hash_tag():
    """One Redis Cluster slot holds all of a call's keys, so one script can
    reserve on all of them."""
    from redis.crc import key_slot

    caps, rates = plan(auth(billing_mode="prepaid"), datetime(2026, 12, 2, 15, 0, tzinfo=UTC))
    keys = [c.key for c in caps] + [r.key for r in rates]
    assert len(keys) == 7
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"{o:3}")}
    other = plan(auth(organization_id=4), datetime(2026, 12, 2, 15, 0, tzinfo=UTC))[0][0].key
    assert other.startswith("{o:4}")


def test_buckets_and_rules_for_the_levels_with_limits():
    now = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
    caps, rates = plan(auth(), now)
    assert [(c.code, c.key, c.limit) for c in caps] == [
        ("key_daily_cap_exceeded", "{o:3}cap:k:42:d:2026-12-02", 1_000),
        ("key_monthly_cap_exceeded", "{o:3}cap:k:42:m:2026-12", 20_000),
        ("key_lifetime_cap_exceeded", "{o:3}cap:k:42:life", 300_000),
        ("sub_account_monthly_cap_exceeded", "{o:3}cap:s:7:m:2026-12", 50_000),
    ]
    assert caps[0].ttl_seconds == 9 * 3600 + PERIOD_MARGIN_SECONDS
    assert caps[2].ttl_seconds is None
    assert [(r.scope, r.key, r.rpm, r.tpm) for r in rates] == [
        ("key", "{o:3}rl:k:42", 60, None),
        ("org", "{o:3}rl:o:3", None, 90_000),
    ]


def test_prepaid_orgs_get_the_balance_bucket_and_keys_without_sub_account_skip_its_level():
    now = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
    caps, rates = plan(
        auth(billing_mode="prepaid", sub_account_id=None, key_caps=(None, None, None),
             sub_account_caps=(None, None, None), sub_account_rpm=5, org_tpm=None),
        now,
    )  # fmt: skip
    assert [(c.code, c.key, c.limit, c.ttl_seconds) for c in caps] == [
        ("prepaid_balance_exhausted", "{o:3}bal:o:3", 0, None)
    ]
    assert [r.scope for r in rates] == ["key"]


def test_the_day_turns_at_midnight_in_a_half_hour_timezone():
    a = auth(timezone="Asia/Kolkata")  # UTC+05:30: local midnight is 18:30 UTC
    before = datetime(2026, 12, 1, 18, 29, 59, tzinfo=UTC)
    after = before + timedelta(seconds=1)
    caps_before, _ = plan(a, before)
    caps_after, _ = plan(a, after)
    assert caps_before[0].key == "{o:3}cap:k:42:d:2026-12-01"
    assert caps_after[0].key == "{o:3}cap:k:42:d:2026-12-02"
    assert caps_before[0].ttl_seconds == 1 + PERIOD_MARGIN_SECONDS
    assert caps_after[0].ttl_seconds == 24 * 3600 + PERIOD_MARGIN_SECONDS
    assert caps_after[0].resets_at == datetime(2026, 12, 2, 18, 30, tzinfo=UTC).timestamp()
    # The month had turned too (December 1st began at 18:30 UTC on November 30th).
    assert caps_before[1].key == "{o:3}cap:k:42:m:2026-12"


def test_the_month_turns_in_the_orgs_timezone_not_utc():
    a = auth(timezone="America/New_York")
    caps, _ = plan(a, datetime(2027, 1, 1, 4, 59, tzinfo=UTC))  # 23:59 on Dec 31 there
    assert [c.key for c in caps[:2]] == ["{o:3}cap:k:42:d:2026-12-31", "{o:3}cap:k:42:m:2026-12"]
    caps, _ = plan(a, datetime(2027, 1, 1, 5, 0, tzinfo=UTC))
    assert [c.key for c in caps[:2]] == ["{o:3}cap:k:42:d:2027-01-01", "{o:3}cap:k:42:m:2027-01"]


def test_a_dst_day_is_23_hours_long():
    a = auth(timezone="America/New_York")
    start = datetime(2026, 3, 8, 5, 0, tzinfo=UTC)  # midnight EST, clocks spring forward at 2:00
    caps, _ = plan(a, start)
    assert caps[0].key == "{o:3}cap:k:42:d:2026-03-08"
    assert caps[0].ttl_seconds == 23 * 3600 + PERIOD_MARGIN_SECONDS


def test_an_unknown_timezone_falls_back_to_utc():
    caps, _ = plan(auth(timezone="Mars/Olympus"), datetime(2026, 12, 2, 23, 0, tzinfo=UTC))
    assert caps[0].key == "{o:3}cap:k:42:d:2026-12-02"


def test_a_load_test_key_not_billed_spends_no_prepaid_balance_but_keeps_its_caps():
    now = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
    caps, _ = plan(
        auth(billing_mode="prepaid", sub_account_id=None, key_caps=(None, None, 5_000),
             test_traffic=True),
        now,
    )  # fmt: skip
    assert [(c.code, c.limit) for c in caps] == [("key_lifetime_cap_exceeded", 5_000)]


def test_a_load_test_key_not_billed_spends_no_sub_account_cap():
    now = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
    team = {"sub_account_id": 9, "sub_account_caps": (1_000, None, None)}
    billed, _ = plan(auth(**team, key_caps=(None, None, 5_000)), now)
    assert [c.code for c in billed] == [
        "key_lifetime_cap_exceeded",
        "sub_account_daily_cap_exceeded",
    ]
    load, _ = plan(auth(**team, key_caps=(None, None, 5_000), test_traffic=True), now)
    assert [c.code for c in load] == ["key_lifetime_cap_exceeded"]
