"""The model marketplace (member page, REST API, staff per-channel breakdown)
and the public marketplace and status pages: the figures equal those computed
straight from the call records of a synthetic month (percentiles within the
sketches' 1 %, counts and shares exact); the public pages show no
organization's data; the status page's day states follow injected failures."""

from __future__ import annotations

import math
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import Role
from console.kernel.money import format_amount
from tests.factories import MembershipFactory, UserFactory
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.models import CallRecord, CatalogModel, Price
from usage.percentiles import EXACT_BELOW
from usage.performance import WINDOWS, daily_status, floor_hour, model_performance, window_start
from usage.sketch import RELATIVE_ACCURACY
from usage.synth import batched, ensure_org, generate

pytestmark = pytest.mark.django_db

TOLERANCE = RELATIVE_ACCURACY + 1e-9


@pytest.fixture(autouse=True)
def _fresh_ingest(settings):
    from usage.ingest.directory import invalidate_directory
    from usage.prices import invalidate_price_book

    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    settings.USAGE_RETENTION_DAYS = 0
    settings.CONSOLE_MARKETPLACE_CACHE_SECONDS = 0
    invalidate_price_book()
    invalidate_directory()
    yield
    invalidate_price_book()
    invalidate_directory()


@pytest.fixture
def catalog(db):
    from usage.seed import seed_catalog

    seed_catalog()


@pytest.fixture
def month(catalog):
    """Two organizations' synthetic month (and a day before it, outside every window)."""
    now = timezone.now()  # the pages measure up to now: the data is made relative to it
    start = floor_hour(now) - timedelta(days=31) + timedelta(hours=1)
    orgs = []
    for i, slug in enumerate(("month-a", "month-b")):
        org, keys = ensure_org(slug)
        events = generate(keys, start=start, hours=31 * 24, calls=2200, seed=40 + i, end_limit=now)
        for chunk in batched(events, 500):
            ingest_events(chunk)
        orgs.append(org)
    return orgs, now


def exact(values, q):
    """The rule the pages use: the nearest rank below ``EXACT_BELOW`` values
    (exact), the sketches' rank ``q * (n - 1)`` (within 1 %) above."""
    ordered = sorted(values)
    if len(ordered) < EXACT_BELOW:
        return ordered[max(1, math.ceil(round(q * len(ordered), 9))) - 1]
    return ordered[math.floor(q * (len(ordered) - 1))]


def tokens_per_s(c) -> float | None:
    if c.output_tokens <= 0 or not 200 <= c.status_code < 300 or c.cache_status == "response_hit":
        return None
    gen = c.latency_us - c.ttft_us if c.stream and c.ttft_us is not None else c.latency_us
    return c.output_tokens / (gen / 1e6) if gen > 0 else None


def close(got, want):
    if want is None:
        return got is None
    return got is not None and abs(got - want) <= TOLERANCE * want + 1e-3


def test_marketplace_figures_equal_the_call_records_of_a_synthetic_month(month):
    _orgs, now = month
    figures = model_performance(now=now)
    end = floor_hour(now) + timedelta(hours=1)
    for window in WINDOWS:
        calls = list(
            CallRecord.objects.filter(started_at__gte=window_start(window, now), started_at__lt=end)
        )
        models = sorted({c.model for c in calls})
        assert sorted(figures[window]) == models
        for model in models:
            mine = [c for c in calls if c.model == model]
            got = figures[window][model]
            assert got.calls == len(mine), (window, model)
            failed = sum(c.status_code >= 500 for c in mine)
            assert got.availability == (len(mine) - failed) / len(mine)
            prompt = sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens for c in mine)
            cached = sum(c.cache_read_tokens for c in mine)
            assert got.cache_hit_share == (cached / prompt if prompt else None)
            lat = [c.latency_us / 1000 for c in mine]
            ttft = [c.ttft_us / 1000 for c in mine if c.ttft_us is not None]
            tps = [v for c in mine if (v := tokens_per_s(c)) is not None]
            assert close(got.latency_p50_ms, exact(lat, 0.5))
            assert close(got.latency_p99_ms, exact(lat, 0.99))
            assert close(got.latency_p999_ms, exact(lat, 0.999))
            assert close(got.ttft_p50_ms, exact(ttft, 0.5) if ttft else None)
            assert close(got.ttft_p99_ms, exact(ttft, 0.99) if ttft else None)
            tps_p50 = sorted(tps)[math.floor(0.5 * (len(tps) - 1))] if tps else None
            assert close(got.tokens_per_s_p50, tps_p50), (window, model)
    # The windows are nested and really differ: a month holds more than a day.
    small = figures["24h"]["sim-chat-small"].calls
    assert (
        0 < small < figures["7d"]["sim-chat-small"].calls < figures["30d"]["sim-chat-small"].calls
    )
    # Calls of the day before the month are in no window.
    assert CallRecord.objects.filter(started_at__lt=window_start("30d", now)).exists()


def _owner(org, **user):
    return MembershipFactory(organization=org, role=Role.OWNER, user=UserFactory(**user)).user


def test_the_page_and_the_api_show_the_platform_figures_and_the_callers_own_prices(month, client):
    (a, b), now = month
    model = CatalogModel.objects.get(name="sim-chat-small")
    Price.objects.create(
        model=model,
        organization=a,
        currency="USD",
        input_per_mtok=4_321_000,
        cache_read_per_mtok=432_000,
        cache_write_per_mtok=5_432_000,
        output_per_mtok=9_876_000,
        effective_from=now - timedelta(days=40),
    )
    figures = model_performance(now=now)["7d"]
    client.force_login(_owner(a))
    r = client.get(reverse("analytics:marketplace"), {"window": "7d"})
    assert r.status_code == 200
    html = r.content.decode()
    row = re.search(r'<tr data-model="sim-chat-small">(.*?)</tr>', html, re.S).group(1)
    assert (
        format_amount(4_321_000, "USD", exact=True) in row
        and format_amount(9_876_000, "USD", exact=True) in row
    )
    calls = figures["sim-chat-small"].calls
    assert f">{calls:,}<" in row
    # Each figure links to the organization's own chart of it, model and range preset.
    assert "/analytics/latency/?range=7d&amp;model=sim-chat-small" in row
    assert "/analytics/cache/?range=7d&amp;model=sim-chat-small" in row

    api = client.get("/api/v1/marketplace/", {"window": "7d"}).json()
    entry = next(m for m in api["models"] if m["name"] == "sim-chat-small")
    assert entry["price_per_mtok"]["input"] == 4_321_000 and entry["negotiated"]
    assert entry["list_price_per_mtok"]["input"] != 4_321_000
    assert entry["figures"] == figures["sim-chat-small"].as_dict()
    assert client.get("/api/v1/marketplace/", {"window": "1y"}).status_code == 400

    # Another organization's member sees the same figures and the list price, not a's price.
    client.force_login(_owner(b))
    other = client.get("/api/v1/marketplace/", {"window": "7d"}).json()
    entry_b = next(m for m in other["models"] if m["name"] == "sim-chat-small")
    assert entry_b["figures"] == entry["figures"]
    assert entry_b["price_per_mtok"]["input"] != 4_321_000 and not entry_b["negotiated"]
    assert "4,321" not in client.get(reverse("analytics:marketplace")).content.decode()
    # b pays list price less its discount, said on the page; a negotiated price pays full.
    b.discount_rate = "0.85"
    b.save(update_fields=["discount_rate"])
    html = client.get(reverse("analytics:marketplace")).content.decode()
    assert "your discount on list prices is 15 %" in html
    entry_b = next(
        m
        for m in client.get("/api/v1/marketplace/").json()["models"]
        if m["name"] == "sim-chat-small"
    )
    assert entry_b["price_per_mtok"]["input"] == entry_b["list_price_per_mtok"]["input"] * 85 // 100


def _order(html: str) -> list[str]:
    table = html.split('id="marketplace"', 1)[1]
    return re.findall(r'<tr data-model="([^"]+)">', table)


def test_sorting_and_the_side_by_side_comparison(month, client):
    (a, _b), now = month
    figures = model_performance(now=now)["30d"]
    client.force_login(_owner(a))
    url = reverse("analytics:marketplace")
    r = client.get(url, {"window": "30d", "sort": "-calls"})
    order = _order(r.content.decode())
    measured = sorted(figures, key=lambda m: (figures[m].calls, m), reverse=True)
    assert order[: len(measured)] == measured
    # Models without calls sort last, whichever way.
    assert set(order[len(measured) :]).isdisjoint(figures)
    r = client.get(url, {"window": "30d", "sort": "latency_p50"})
    chat = [m for m in _order(r.content.decode()) if m in figures]
    assert chat == sorted(figures, key=lambda m: (figures[m].latency_p50_ms, m))
    assert 'aria-sort="ascending"' in r.content.decode()

    r = client.get(url, {"window": "30d", "compare": ["sim-chat-large", "gpt-4o-mini"]})
    html = r.content.decode()
    table = html.split('id="compare-table"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'<tr data-model="([^"]+)">', table) == sorted(
        ["sim-chat-large", "gpt-4o-mini"], key=_order(html).index
    )
    cells = re.findall(r'data-col="([a-z_0-9]+)"', table)
    assert cells[:6] == [
        "ttft_p50",
        "latency_p50",
        "latency_p99",
        "tokens_per_s",
        "cache",
        "availability",
    ]
    # A bad choice is ignored, said so, and never a 500.
    r = client.get(url, {"sort": "evil", "compare": "no-such-model"})
    assert r.status_code == 200 and 'id="marketplace-errors"' in r.content.decode()


def test_staff_see_one_models_figures_per_channel_and_members_do_not(month, client):
    (a, _b), now = month
    member = _owner(a)
    client.force_login(member)
    url = reverse("analytics:marketplace")
    assert 'id="channel-table"' not in client.get(url, {"model": "sim-chat-small"}).content.decode()
    staff = _owner(a, is_staff=True)
    client.force_login(staff)
    html = client.get(url, {"model": "sim-chat-small", "window": "30d"}).content.decode()
    table = html.split('id="channel-table"', 1)[1].split("</table>", 1)[0]
    total = CallRecord.objects.filter(
        model="sim-chat-small", started_at__gte=window_start("30d", now)
    )
    per_node = {n: total.filter(node_id=n).count() for n in (1, 2)}
    for count in per_node.values():
        assert count and f">{count:,}<" in table


# --- the public pages ----------------------------------------------------------------


def test_public_pages_are_off_by_default_and_need_no_sign_in(client, settings, catalog):
    assert client.get(reverse("analytics:public_marketplace")).status_code == 404
    assert client.get(reverse("analytics:public_status")).status_code == 404
    settings.CONSOLE_PUBLIC_MARKETPLACE = True
    settings.CONSOLE_PUBLIC_STATUS = True
    assert client.get(reverse("analytics:public_marketplace")).status_code == 200
    assert client.get(reverse("analytics:public_status")).status_code == 200


def test_public_pages_show_no_organizations_data_only_list_prices(client, settings, catalog):
    from accounts.models import ApiKey, SubAccount

    settings.CONSOLE_PUBLIC_MARKETPLACE = True
    settings.CONSOLE_PUBLIC_STATUS = True
    secrets = []
    model = CatalogModel.objects.get(name="sim-chat-small")
    now = timezone.now()
    for i, (name, price) in enumerate((("Zyxwv Holdings", 7_654_321), ("Qpqrst Labs", 8_765_432))):
        org, _keys = ensure_org(f"tenant-{i}", name)
        sub = SubAccount.objects.create(organization=org, name=f"subzq{i}-division")
        key = ApiKey.objects.filter(organization=org).first()
        Price.objects.create(
            model=model,
            organization=org,
            currency="USD",
            input_per_mtok=price,
            cache_read_per_mtok=price // 10,
            cache_write_per_mtok=price + 1,
            output_per_mtok=price * 2,
            effective_from=now - timedelta(days=40),
        )
        ingest_events([event(key, started_at=now - timedelta(hours=h)) for h in range(3)])
        secrets += [name, org.slug, sub.name, key.name, key.public_id]
        secrets += [
            format_amount(v, "USD", exact=True) for v in (price, price // 10, price + 1, price * 2)
        ]
        secrets += [str(v) for v in (price, price // 10, price + 1, price * 2)]
    listed = Price.objects.get(model=model, organization=None, currency="USD")
    pages = [
        client.get(reverse("analytics:public_marketplace"), {"window": w}).content.decode()
        for w in ("24h", "30d")
    ]
    pages.append(
        client.get(reverse("analytics:public_marketplace"), {"format": "json"}).content.decode()
    )
    pages.append(client.get(reverse("analytics:public_status")).content.decode())
    pages.append(
        client.get(reverse("analytics:public_status"), {"format": "json"}).content.decode()
    )
    for page in pages:
        for secret in secrets:
            assert not re.search(rf"(?<![\w.]){re.escape(secret)}(?![\w.])", page), secret
    assert format_amount(listed.input_per_mtok, "USD", exact=True) in pages[0]
    data = client.get(reverse("analytics:public_marketplace"), {"format": "json"}).json()
    entry = next(m for m in data["models"] if m["name"] == "sim-chat-small")
    assert entry["list_prices_per_mtok"]["USD"]["input"] == listed.input_per_mtok
    assert entry["figures"]["calls"] == 6  # both organizations' calls, summed
    assert set(entry) == {
        "name", "display_name", "provider", "modality", "context_window",
        "list_prices_per_mtok", "figures",
    }  # fmt: skip


def test_status_page_day_states_follow_injected_failures(client, settings, catalog):
    settings.CONSOLE_PUBLIC_STATUS = True
    org, _keys = ensure_org("status-org")
    from accounts.models import ApiKey

    key = ApiKey.objects.filter(organization=org).first()
    now = timezone.now()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)

    def calls(day_offset, ok, failed, *, status=502, at=None):
        at = at or today - timedelta(days=day_offset) + timedelta(hours=10)
        return [event(key, started_at=at, model="sim-chat-large") for _ in range(ok)] + [
            event(
                key,
                started_at=at,
                model="sim-chat-large",
                status_code=status,
                error_type="upstream_error" if status >= 500 else "invalid_request",
                output_tokens=0,
                ttft_us=None,
            )
            for _ in range(failed)
        ]

    result = ingest_events(
        calls(5, 90, 10)  # 90 %: down
        + calls(4, 980, 20)  # 98 %: degraded
        + calls(3, 50, 50, status=400)  # the caller's errors: up
        + calls(2, 995, 5)  # 99.5 % exactly: up
        + calls(89, 10, 0)  # the first day shown
        + calls(90, 0, 10)  # a day too old to show
        + calls(0, 1, 1, at=now - timedelta(minutes=5))  # the last hour: half failed, down now
    )
    assert result.dead_lettered == 0 and result.duplicates == 0
    data = client.get(reverse("analytics:public_status"), {"format": "json"}).json()
    row = next(m for m in data["models"] if m["model"] == "sim-chat-large")
    assert len(row["days"]) == 90
    states = {d["day"]: d["state"] for d in row["days"]}
    day = lambda n: (today - timedelta(days=n)).date().isoformat()  # noqa: E731
    assert states[day(5)] == "down"
    assert states[day(4)] == "degraded"
    assert states[day(3)] == "up"
    assert states[day(2)] == "up"
    assert states[day(89)] == "up"
    assert day(90) not in states
    assert states[day(1)] == "no_data" or now.hour == 0  # just after midnight: the last hour
    assert row["current"] == "down"
    idle = next(m for m in data["models"] if m["model"] == "sim-chat-small")
    assert idle["current"] == "no_data"
    html = client.get(reverse("analytics:public_status")).content.decode()
    assert f'data-day="{day(5)}" data-state="down"' in html
    assert daily_status(["sim-chat-large"], now=now)[0].current == "down"


def test_the_marketplace_and_public_pages_read_in_chinese(month, client, settings):
    from tests.console.test_chinese_pages import _stored_strings, _Text, english_in

    settings.CONSOLE_PUBLIC_MARKETPLACE = True
    settings.CONSOLE_PUBLIC_STATUS = True
    (a, _b), _now = month
    staff = _owner(a, is_staff=True, language="zh-hans")
    client.force_login(staff)
    url = reverse("analytics:marketplace")
    pages = [
        (url, {"window": "30d", "sort": "-calls", "compare": ["sim-chat-small", "sim-chat-large"]}),
        (url, {"model": "sim-chat-small", "sort": "bogus"}),
        (reverse("analytics:public_marketplace"), {}),
        (reverse("analytics:public_status"), {}),
    ]
    data = _stored_strings()  # the organizations' and the catalogue's own strings
    for path, params in pages:
        r = client.get(path, params)
        assert r.status_code == 200
        parser = _Text()
        parser.feed(r.content.decode())
        found = [f for t in parser.nodes if (f := english_in(t, data))]
        assert not found, (path, params, found)
        assert re.search(r"[\u4e00-\u9fff]", r.content.decode())
