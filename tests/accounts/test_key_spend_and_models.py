"""API keys pages: spend today / this month / lifetime against each cap (the
figures the gateway seeds its caps from, in the organization's time zone),
allow-list entries chosen from the model catalogue, and a status filter that
shows which status is shown."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.errors import ValidationFailed
from accounts.selectors import api_key_spend
from accounts.services import api_key_issue, api_key_revoke
from gateway_bridge.limits.plan import periods
from tests.factories import issue_key
from tests.usage.factories import PriceFactory, event
from usage.facade import SPEND_BY_KEY, spend_by_period
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog

pytestmark = pytest.mark.django_db

MODEL = "spend-test-model"


@pytest.fixture(autouse=True)
def _priced(settings):
    """One micro-unit per input token, nothing else: a call costs its tokens."""
    settings.USAGE_RETENTION_DAYS = 0
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    seed_catalog()  # the migration's rows are gone after a transactional test's flush
    PriceFactory(
        model__name=MODEL,
        input_per_mtok=1_000_000,
        cache_read_per_mtok=0,
        cache_write_per_mtok=0,
        output_per_mtok=0,
    )
    invalidate_price_book()
    invalidate_directory()
    yield
    invalidate_price_book()
    invalidate_directory()


def _spend(key, at: datetime, micro: int) -> None:
    ingest_events([event(key, started_at=at, model=MODEL, input_tokens=micro, output_tokens=0)])


def test_spend_counts_today_and_this_month_in_the_organizations_time_zone(org, owner, actor_for):
    # Given an organization in Shanghai (UTC+8) at 01:00 local on 11 March...
    org.timezone = "Asia/Shanghai"
    org.save()
    actor = actor_for(owner)
    key, _ = issue_key(actor, "svc", spend_cap_daily=5_000, spend_cap_monthly=400_000)
    now = datetime(2026, 3, 10, 17, 0, tzinfo=UTC)
    _spend(key, datetime(2026, 3, 10, 16, 30, tzinfo=UTC), 1_000)  # 00:30 on the 11th: today
    _spend(key, datetime(2026, 3, 10, 15, 30, tzinfo=UTC), 20_000)  # 23:30 on the 10th
    _spend(key, datetime(2026, 2, 28, 17, 0, tzinfo=UTC), 300_000)  # 01:00 on 1 March
    _spend(key, datetime(2026, 2, 28, 15, 0, tzinfo=UTC), 4_000_000)  # 23:00 on 28 Feb

    # When the keys page reads its spend...
    today, month, life = api_key_spend(actor=actor, keys=[key], now=now)[key.pk]

    # Then the days and months are Shanghai's, not UTC's...
    assert (today.spent, month.spent, life.spent) == (1_000, 321_000, 4_321_000)
    assert (today.cap, month.cap, life.cap) == (5_000, 400_000, None)
    assert (today.percent, month.percent) == (20, 80)
    assert (today.level, month.level) == ("ok", "warn")
    # ...and the very figures the gateway seeds the key's caps from.
    bounds = {p: (s, e) for p, (s, e, _) in periods("Asia/Shanghai", now).items()}
    seeded = spend_by_period(
        organization_id=org.pk, grain=SPEND_BY_KEY, ident=key.pk, periods=bounds
    )
    assert seeded == {"d": today.spent, "m": month.spent, "life": life.spent}


def _bar(html: str, period: str) -> str:
    match = re.search(
        rf'<div class="spend-bar (\w+)" data-period="{period}">(.*?)</div>', html, re.S
    )
    assert match, f"no {period} bar"
    return match.group(1) + " " + match.group(2)


def _row(page: str, name: str) -> str:
    start = page.index(f'<tr data-key="{name}">')
    return page[start : page.index("</tr>", start)]


def test_the_keys_list_and_detail_show_spend_against_each_cap(client, org, owner, actor_for):
    key, _ = issue_key(
        actor_for(owner), "svc", spend_cap_daily=2_000_000, spend_cap_monthly=3_000_000
    )
    issue_key(actor_for(owner), "idle", spend_cap_lifetime=10_000_000)
    _spend(key, timezone.now() - timedelta(seconds=2), 1_500_000)
    client.force_login(owner.user)

    page = client.get(reverse("accounts:api_keys")).content.decode()
    row = _row(page, "svc")
    today = _bar(row, "today")
    assert "1.50 USD of 2.00 USD" in today
    assert '<progress max="100" value="75"' in today
    assert '<progress max="100" value="50"' in _bar(row, "this month")
    # No lifetime cap: the figure without a bar.
    lifetime = _bar(row, "lifetime")
    assert "1.50 USD" in lifetime and "<progress" not in lifetime
    idle = _row(page, "idle")
    assert '<progress max="100" value="0"' in _bar(idle, "lifetime")

    detail = client.get(reverse("accounts:api_key_detail", args=[key.pk])).content.decode()
    assert "Spend against caps" in detail
    assert '<progress max="100" value="75"' in _bar(detail, "today")


def test_a_cap_reached_says_so(client, org, owner, actor_for):
    key, _ = issue_key(actor_for(owner), "tight", spend_cap_daily=1_000_000)
    _spend(key, timezone.now() - timedelta(seconds=2), 1_000_000)
    client.force_login(owner.user)
    detail = client.get(reverse("accounts:api_key_detail", args=[key.pk])).content.decode()
    today = _bar(detail, "today")
    assert today.startswith("full ")
    assert '<progress max="100" value="100"' in today
    assert "cap reached" in today


def test_the_allow_list_offers_the_catalogues_models(client, org, owner):
    client.force_login(owner.user)
    html = client.get(reverse("accounts:api_key_create")).content.decode()
    assert f'type="checkbox" name="allowed_models" value="{MODEL}"' in html
    assert 'value="sim-chat-small"' in html  # seeded catalogue
    # An organization narrowed to some models offers only those.
    org.allowed_models = [MODEL]
    org.save()
    html = client.get(reverse("accounts:api_key_create")).content.decode()
    assert f'value="{MODEL}"' in html
    assert 'value="sim-chat-small"' not in html


def test_an_unknown_model_is_refused_with_where_to_find_valid_ones(client, org, owner):
    client.force_login(owner.user)
    response = client.post(
        reverse("accounts:api_key_create"),
        {"name": "typo", "allowed_models": ["gpt-99-turbo", MODEL], "priority": "normal"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "Unknown model: gpt-99-turbo" in html
    assert "Models &amp; prices page" in html
    assert not org.api_keys.filter(name="typo").exists()


def test_a_catalogue_model_is_saved_on_the_key(client, org, owner):
    client.force_login(owner.user)
    client.post(
        reverse("accounts:api_key_create"),
        {"name": "narrow", "allowed_models": [MODEL], "priority": "normal"},
    )
    key = org.api_keys.get(name="narrow")
    assert key.allowed_models == [MODEL]
    html = client.get(reverse("accounts:api_key_detail", args=[key.pk])).content.decode()
    assert re.search(rf'value="{MODEL}"[^>]*checked', html)


def test_the_service_refuses_unknown_models_for_the_api_too(owner, actor_for):
    with pytest.raises(ValidationFailed) as refused:
        api_key_issue(actor=actor_for(owner), name="k", allowed_models=["gpt-99-turbo"])
    assert "Unknown model: gpt-99-turbo" in refused.value.fields["allowed_models"][0]


@pytest.mark.parametrize(
    ("query", "current"),
    [("", "all"), ("?status=active", "active"), ("?status=revoked", "revoked")],
)
def test_the_status_filter_shows_which_is_selected(client, org, owner, actor_for, query, current):
    actor = actor_for(owner)
    issue_key(actor, "live")
    gone, _ = issue_key(actor, "gone")
    api_key_revoke(actor=actor, key_id=gone.pk)
    client.force_login(owner.user)
    html = client.get(reverse("accounts:api_keys") + query).content.decode()
    selected = re.findall(r'<a href="[^"]*" aria-current="page" class="current">(\w+)</a>', html)
    assert selected == [current]
    assert ('data-key="gone"' in html) == (current in ("all", "revoked"))


def test_restrictions_are_compact_chips(client, org, owner, actor_for):
    issue_key(
        actor_for(owner),
        "narrow",
        allowed_models=[MODEL, "sim-chat-small"],
        ip_allowlist=["203.0.113.0/24"],
        rpm_limit=60,
    )
    client.force_login(owner.user)
    html = client.get(reverse("accounts:api_keys")).content.decode()
    assert re.search(r'<li title="[^"]*sim-chat-small[^"]*">2 models</li>', html)
    assert "<li>60 RPM</li>" in html
