"""A key asks the gateway for its own balance, limits and spend: OpenAI's old
billing paths (as New API serves them) and ``GET /v1/key`` (OpenRouter's
``/api/v1/key`` too), after real calls through the gateway."""

from __future__ import annotations

import http.client
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import openai
import pytest

from accounts.actors import Actor
from accounts.models import Role
from accounts.services import api_key_revoke, sub_account_create
from gateway_bridge.limits import MemoryLimitStore, balance_key
from invoicing.facade import LedgerKind, ledger_entry_create
from tests.factories import MembershipFactory, OrganizationFactory, issue_key
from tests.services import require
from usage.ingest import ingest_events
from usage.models import CallRecord

USD = 1_000_000
BODY = {
    "model": "sim-chat-small",
    "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
    "max_tokens": 40,
}


def get(gw, raw: str | None, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(gw.host, gw.port, timeout=10)
    try:
        headers = {"Authorization": f"Bearer {raw}"} if raw else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read(), parse_float=Decimal)
    finally:
        conn.close()


def ok(gw, raw: str, path: str) -> dict:
    status, body = get(gw, raw, path)
    assert status == 200, body
    return body


def chat(gw, raw: str, n: int = 1) -> None:
    client = openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)
    for _ in range(n):
        client.chat.completions.create(**BODY)


def usd(micro: int) -> Decimal:
    return Decimal(micro) / USD


def cap(info: dict, scope: str, period: str) -> dict:
    (found,) = [c for c in info["caps"] if c["scope"] == scope and c["period"] == period]
    return found


def charged(key) -> int:
    return sum(CallRecord.objects.filter(api_key_id=key.id).values_list("cost", flat=True))


def month() -> str:
    return datetime.now(UTC).strftime("%Y-%m")


def today_range() -> str:
    today = datetime.now(UTC).date()
    return f"start_date={today.isoformat()}&end_date={(today + timedelta(days=1)).isoformat()}"


def test_spend_moves_with_calls_and_agrees_with_the_caps_it_is_counted_against(gw, tenant):
    # Given a key with a daily and a lifetime cap, a model list and rate limits
    key, raw = tenant.new_key(
        spend_cap_daily=5 * USD,
        spend_cap_lifetime=2 * USD,
        allowed_models=["sim-chat-small"],
        rpm_limit=600,
        tpm_limit=90_000,
    )
    before = ok(gw, raw, "/v1/key")["data"]
    assert before["name"] == key.name and before["prefix"] == key.prefix
    assert raw not in json.dumps(before, default=str)  # never the secret
    assert before["currency"] == "USD" and before["usage"] == 0
    assert cap(before, "key", "daily")["limit"] == usd(5 * USD)
    assert cap(before, "key", "lifetime")["limit"] == usd(2 * USD)
    assert cap(before, "key", "monthly")["limit"] is None
    assert before["limit"] == usd(2 * USD) and before["limit_remaining"] == usd(2 * USD)
    assert before["allowed_models"] == ["sim-chat-small"]
    assert before["rate_limits"]["key"] == {"requests_per_minute": 600, "tokens_per_minute": 90000}
    assert before["prepaid_balance"] is None

    # When the key makes calls (not ingested yet: the worker has not run)
    chat(gw, raw, 3)
    after = ok(gw, raw, "/v1/key")["data"]
    daily = cap(after, "key", "daily")
    counter, held = gw.call(
        lambda: gw.gateway.limits.store.peek(f"{{o:{key.organization_id}}}cap:k:{key.id}:life")
    )
    # Then the capped periods show the counters the caps enforce
    assert daily["source"] == "limits" and daily["spent"] > 0 and held == 0
    assert cap(after, "key", "lifetime")["spent"] == usd(counter) == daily["spent"]
    assert after["usage"] == after["usage_daily"] == daily["spent"]
    assert after["limit_remaining"] == usd(2 * USD - counter)
    # and the uncapped month adds the settled calls the database lacks
    monthly = cap(after, "key", "monthly")
    assert (monthly["source"], monthly["spent"]) == ("usage", daily["spent"])

    # When the worker ingests them, the call records say the same
    ingest_events(gw.emitter.wait_for(3))
    assert usd(charged(key)) == daily["spent"]
    usage = ok(gw, raw, f"/v1/dashboard/billing/usage?{today_range()}")
    assert usage == {"object": "list", "total_usage": usd(charged(key)) * 100}  # cents
    sub = ok(gw, raw, "/v1/dashboard/billing/subscription")
    # New API's hard limit: spent + what is left, here the lifetime cap itself
    assert sub["object"] == "billing_subscription" and sub["hard_limit_usd"] == 2
    assert sub["soft_limit_usd"] == sub["system_hard_limit_usd"] == 2
    assert sub["access_until"] == 0
    # OpenRouter's path answers the same
    assert ok(gw, raw, "/api/v1/key") == ok(gw, raw, "/v1/key")


def test_a_sub_accounts_caps_and_the_keys_expiry_are_shown(gw, tenant):
    sub = sub_account_create(actor=tenant.actor, name="team", spend_cap_monthly=3 * USD)
    expires = datetime.now(UTC) + timedelta(days=3)
    _, raw = tenant.new_key(sub_account_id=sub.id, expires_at=expires)
    chat(gw, raw)
    info = ok(gw, raw, "/v1/key")["data"]
    monthly = cap(info, "sub_account", "monthly")
    assert monthly["limit"] == 3 and monthly["source"] == "limits" and monthly["spent"] > 0
    assert info["limit_remaining"] == 3 - monthly["spent"]
    assert info["expires_at"] == expires.isoformat()
    sub_info = ok(gw, raw, "/v1/dashboard/billing/subscription")
    assert sub_info["access_until"] == int(expires.timestamp())


def test_a_prepaid_organization_sees_its_balance_go_down(gw, tenant):
    tenant.org.billing_mode = "prepaid"
    tenant.org.save(update_fields=["billing_mode"])
    ledger_entry_create(
        organization_id=tenant.org.id,
        kind=LedgerKind.GRANT,
        amount=10 * USD,
        reference="t",
        reason="opening",
    )
    key, raw = tenant.new_key()
    assert ok(gw, raw, "/v1/key")["data"]["prepaid_balance"] == {
        "balance": 10,
        "held": 0,
        "available": 10,
    }
    chat(gw, raw, 2)
    # Before ingest: the balance counter (what the next call is admitted against)
    used, _ = gw.call(lambda: gw.gateway.limits.store.snapshot(balance_key(tenant.org.id)))
    balance = ok(gw, raw, "/v1/key")["data"]["prepaid_balance"]
    assert balance["balance"] == usd(-used) < 10
    ingest_events(gw.emitter.wait_for(2))
    cost = charged(key)
    assert balance["balance"] == usd(10 * USD - cost)
    info = ok(gw, raw, "/v1/key")["data"]
    assert info["limit_remaining"] == usd(10 * USD - cost) and info["usage"] == usd(cost)
    # A client's hard_limit_usd - total_usage / 100 is the balance left.
    sub = ok(gw, raw, "/v1/dashboard/billing/subscription")
    total = ok(gw, raw, "/v1/dashboard/billing/usage")["total_usage"]
    assert sub["hard_limit_usd"] == 10 and sub["hard_limit_usd"] - total / 100 == usd(
        10 * USD - cost
    )


def test_a_key_of_another_organization_sees_only_its_own(gw, tenant):
    key, raw = tenant.new_key(spend_cap_daily=5 * USD)
    chat(gw, raw, 2)
    other_org = OrganizationFactory(name="Other", slug="other", billing_mode="prepaid")
    owner = MembershipFactory(organization=other_org, role=Role.OWNER)
    other_key, other_raw = issue_key(Actor(owner, "127.0.0.1"))

    mine = ok(gw, raw, "/v1/key")["data"]
    theirs = ok(gw, other_raw, "/v1/key")["data"]
    assert mine["usage"] > 0 and theirs["usage"] == 0
    assert theirs["prefix"] == other_key.prefix and theirs["organization"] == "other"
    assert theirs["prepaid_balance"] == {"balance": 0, "held": 0, "available": 0}
    text = json.dumps(theirs, default=str)
    assert key.prefix not in text and "acme" not in text
    assert ok(gw, other_raw, "/v1/dashboard/billing/usage")["total_usage"] == 0


def test_a_key_without_caps_shows_no_limits_and_new_apis_unlimited(gw, tenant):
    info = ok(gw, tenant.raw, "/v1/key")["data"]
    assert all(c["limit"] is None and c["remaining"] is None for c in info["caps"])
    assert {c["scope"] for c in info["caps"]} == {"key"}  # no sub-account
    assert info["limit"] is None and info["limit_remaining"] is None
    assert info["allowed_models"] is None
    assert info["rate_limits"]["key"] == {"requests_per_minute": None, "tokens_per_minute": None}
    sub = ok(gw, tenant.raw, "/v1/dashboard/billing/subscription")
    assert sub["hard_limit_usd"] == 100_000_000
    # Its spend is read from ingested calls (no counter to read).
    chat(gw, tenant.raw)
    ingest_events(gw.emitter.wait_for(1))
    info = ok(gw, tenant.raw, "/v1/key")["data"]
    assert info["usage"] == usd(charged(tenant.key)) > 0
    assert cap(info, "key", "daily")["source"] == "usage"


@pytest.mark.parametrize("path", ["/v1/key", "/api/v1/key", "/v1/dashboard/billing/subscription"])
def test_a_revoked_key_gets_openais_401(gw, tenant, path):
    key, raw = tenant.new_key()
    assert get(gw, raw, path)[0] == 200
    api_key_revoke(actor=tenant.actor, key_id=key.id)
    status, body = get(gw, raw, path)
    assert status == 401
    assert body["error"]["type"] == "authentication_error"
    assert body["error"]["code"] == "invalid_api_key"
    assert get(gw, None, path)[0] == 401


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("start_date=2026-13-01&end_date=2026-12-31", "start_date"),
        ("start_date=yesterday", "start_date"),
        ("start_date=20261201", "start_date"),
        ("start_date=2026-12-01&end_date=2026-11-01", "end_date"),
    ],
)
def test_a_bad_date_is_refused_in_openais_shape(gw, tenant, query, param):
    status, body = get(gw, tenant.raw, f"/v1/dashboard/billing/usage?{query}")
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert (body["error"]["param"], body["error"]["code"]) == (param, "invalid_date")


def test_with_redis_counters_the_spend_shown_is_the_shared_counters(
    tenant, start_gateway, settings
):
    require(bool(settings.REDIS_URL), "REDIS_URL is not set: the shared counters need Redis")
    settings.GATEWAY_LIMITS_STORE = "redis"
    gw = start_gateway()
    key, raw = tenant.new_key(spend_cap_monthly=3 * USD)
    chat(gw, raw, 2)
    used, held = gw.call(
        lambda: gw.gateway.limits.store.snapshot(
            f"{{o:{key.organization_id}}}cap:k:{key.id}:m:{month()}"
        )
    )
    monthly = cap(ok(gw, raw, "/v1/key")["data"], "key", "monthly")
    assert (monthly["spent"], monthly["held"], monthly["source"]) == (usd(used), 0, "limits")
    assert used > 0 and held == 0


class DownStore(MemoryLimitStore):
    """A limits store that cannot be reached (Redis gone)."""

    async def peek(self, key):
        raise ConnectionError("limits store unreachable")


def test_an_unreachable_limits_store_answers_503_to_retry_not_a_500(tenant, start_gateway):
    gw = start_gateway(limits=DownStore())
    _, raw = tenant.new_key(spend_cap_daily=USD)
    status, body = get(gw, raw, "/v1/key")
    assert status == 503
    assert (body["error"]["type"], body["error"]["code"]) == ("server_error", "limits_unavailable")


def test_only_openrouters_key_path_of_the_rest_api_goes_to_the_gateway():
    from gateway_bridge.app import owns

    assert owns("/api/v1/key") and owns("/v1/key")
    assert not owns("/api/v1/keys/") and not owns("/api/v1/keys/3/")  # the console's REST API
