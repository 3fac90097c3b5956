"""Calls for the margin tests, ingested through the real path (so rollups
hold them): two organizations billed in USD and EUR, a vendor channel and a
self-hosted node, costs in the organization's currency, in another one, and
unknown; and the figures recomputed by brute force from the call records."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from accounts.models import ApiKey, Organization
from inference_node.facade import CostPrice, Node
from tests.factories import OrganizationFactory
from tests.usage.factories import PriceFactory, event
from usage.facade import PPM, rate
from usage.ingest import ingest_events
from usage.models import CallRecord, CatalogModel

T0 = datetime(2025, 6, 2, 9, 0, tzinfo=UTC)
# What the vendor charges per Mtok: $0.07 in, $0.01 cached, $0.09 cache write, $0.30 out.
USD_COST = CostPrice("USD", 70_000, 10_000, 90_000, 300_000)
EUR_COST = CostPrice("EUR", 60_000, 9_000, 80_000, 250_000)


@dataclass
class MarginWorld:
    usd_org: Organization
    eur_org: Organization
    vendor: Node
    local: Node
    request_ids: list[str]


def _key(org, name: str) -> ApiKey:
    return ApiKey.objects.create(
        organization=org, name=name, public_id=f"tm{org.pk:04d}{name}"[:16], secret_hash="0" * 64
    )


def _charged(key, price: CostPrice | None, credential: int | None, **fields) -> dict:
    e = event(key, **fields)
    if price is not None:
        tokens = (
            e["input_tokens"],
            e["cache_read_tokens"],
            e["cache_write_tokens"],
            e["output_tokens"],
        )
        e.update(upstream_cost=rate(tokens, price, PPM), upstream_currency=price.currency)
    e["credential_id"] = credential
    return e


def seed_margin(usd_org: Organization | None = None) -> MarginWorld:
    """Calls over two days (T0's and the next), ingested; the catalogue must be seeded."""
    usd_org = usd_org or OrganizationFactory(name="Acme", slug="acme-m", currency="USD")
    eur_org = OrganizationFactory(name="=Globex", slug="globex-m", currency="EUR")
    small = CatalogModel.objects.get(name="sim-chat-small")
    PriceFactory(model=small, currency="EUR", input_per_mtok=90_000, output_per_mtok=350_000)
    vendor = Node.objects.create(name="vendor-openai", base_url="https://api.example.test")
    local = Node.objects.create(name="gpu-local", base_url="http://10.0.0.9:8000")
    a, b = _key(usd_org, "a"), _key(eur_org, "b")
    events = []
    for day in (0, 1):
        t = T0 + timedelta(days=day, minutes=7)
        events += [
            # USD calls a vendor served at a USD cost price: comparable.
            *(
                _charged(a, USD_COST, 31, started_at=t, node_id=vendor.pk, input_tokens=1000 + i,
                         cache_read_tokens=333 * i, output_tokens=77 + 5 * i)
                for i in range(4)
            ),
            # A large model on a node with no cost price: revenue, no known cost.
            _charged(a, None, None, started_at=t, node_id=local.pk, model="sim-chat-large",
                     output_tokens=900),
            # Refused before any upstream: nothing to pay for, not "uncosted".
            _charged(a, None, None, started_at=t, node_id=None, status_code=429,
                     error_type="rpm_limit_exceeded", input_tokens=0, output_tokens=0, ttft_us=None),
            # EUR calls: one at a EUR cost price (comparable), one billed by the vendor in USD.
            _charged(b, EUR_COST, 32, started_at=t, node_id=local.pk, input_tokens=4321),
            _charged(b, USD_COST, 33, started_at=t, node_id=vendor.pk, output_tokens=555),
        ]  # fmt: skip
    result = ingest_events(events)
    assert result.accepted == len(events), result
    return MarginWorld(usd_org, eur_org, vendor, local, [e["request_id"] for e in events])


def brute_force(group: str, start: datetime, end: datetime) -> dict[tuple, list[int]]:
    """(group value, currency) -> [calls, revenue, cost, uncosted calls], from
    the call records: ``group`` is ``model``, ``node_id`` (0 for none) or
    ``organization_id``."""
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for c in CallRecord.objects.filter(started_at__gte=start, started_at__lt=end):
        value = getattr(c, group)
        s = out[(value if value is not None else 0, c.currency)]
        comparable = c.upstream_currency == c.currency
        billed = c.input_tokens + c.cache_read_tokens + c.cache_write_tokens + c.output_tokens
        s[0] += 1
        s[1] += c.cost
        s[2] += c.upstream_cost if comparable else 0
        s[3] += not comparable and c.node_id is not None and billed > 0
    return dict(out)
