"""Builders for usage tests: catalogue models, prices and valid event dicts."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import factory

from usage.events import SCHEMA_VERSION
from usage.ingest.aggregate import SUM_COLUMNS
from usage.models import CatalogModel, Price

_request_ids = itertools.count(1)


class CatalogModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CatalogModel
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"test-model-{n}")
    display_name = factory.LazyAttribute(lambda o: o.name)


class PriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Price

    model = factory.SubFactory(CatalogModelFactory)
    currency = "USD"
    input_per_mtok = 1_000_000
    cache_read_per_mtok = 100_000
    cache_write_per_mtok = 1_250_000
    output_per_mtok = 4_000_000
    effective_from = datetime(2024, 1, 1, tzinfo=UTC)


def event(
    key,
    *,
    started_at: datetime | None = None,
    duration_us: int = 850_000,
    **overrides,
) -> dict:
    """A valid event dict for ``key`` (an ``ApiKey``); fields can be overridden."""
    started = started_at or datetime(2025, 3, 4, 10, 15, tzinfo=UTC)
    data = {
        "request_id": f"req-{next(_request_ids):08d}",
        "started_at": started.isoformat(),
        "finished_at": (started + timedelta(microseconds=duration_us)).isoformat(),
        "organization_id": key.organization_id,
        "sub_account_id": key.sub_account_id,
        "api_key_id": key.pk,
        "model": "sim-chat-small",
        "node_id": 1,
        "protocol": "openai",
        "endpoint": "chat.completions",
        "stream": False,
        "status_code": 200,
        "error_type": "",
        "input_tokens": 1200,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 300,
        "reasoning_tokens": 0,
        "ttft_us": 120_000,
        "latency_us": duration_us,
        "upstream_us": duration_us - 2_000,
        "overhead_us": 2_000,
        "queue_us": None,
        "client_ip": "203.0.113.7",
        "priority": 0,
        "cache_status": "miss",
        "credential_id": None,
        "upstream_cost": 0,
        "upstream_currency": "",
        "end_user": "",
        "tags": {},
        "is_test": False,
        "version": SCHEMA_VERSION,
    }
    data.update(overrides)
    return data


def _hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def expected_rollups(organization_id: int) -> dict[tuple, dict]:
    """Rollup sums recomputed by brute force from the billed call records
    (load-test calls marked "not billed" are stored but in no rollup)."""
    from usage.models import CallRecord, Grain

    out: dict[tuple, dict] = {}
    for c in CallRecord.objects.billed().filter(organization_id=organization_id):
        sub, node, hour = c.sub_account_id or 0, c.node_id or 0, _hour(c.started_at)
        mode = "stream" if c.stream else "plain"
        for cell in (
            (Grain.ORG, 0, 0, "", 0, "", ""),
            (Grain.SUB_ACCOUNT, sub, 0, "", 0, "", ""),
            (Grain.KEY, 0, c.api_key_id, "", 0, "", ""),
            (Grain.MODEL, 0, 0, c.model, 0, "", ""),
            (Grain.NODE, 0, 0, "", node, "", ""),
            (Grain.TRAFFIC, 0, 0, c.model, 0, c.protocol, mode),
            (Grain.FULL, sub, c.api_key_id, c.model, node, c.protocol, mode),
        ):
            s = out.setdefault((str(cell[0]), *cell[1:], hour), dict.fromkeys(SUMS, 0))
            s["calls"] += 1
            s["calls_2xx"] += 200 <= c.status_code < 300
            s["calls_4xx"] += 400 <= c.status_code < 500
            s["calls_429"] += c.status_code == 429
            s["calls_5xx"] += c.status_code >= 500
            s["stream_calls"] += c.stream
            s["cache_hit_calls"] += c.cache_status != "miss"
            s["unpriced_calls"] += not c.priced
            for f in (
                "input_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "output_tokens",
                "reasoning_tokens",
                "cost",
                "latency_us",
            ):
                s[f if f != "latency_us" else "latency_sum_us"] += getattr(c, f)
            if c.ttft_us is not None:
                s["ttft_count"] += 1
                s["ttft_sum_us"] += c.ttft_us
            s["queue_sum_us"] += c.queue_us or 0
            s["overhead_sum_us"] += c.overhead_us or 0
            s["upstream_sum_us"] += c.upstream_us or 0
            s["response_cache_calls"] += c.cache_status == "response_hit"
            s["rate_limited_calls"] += c.error_type in ("rpm_limit_exceeded", "tpm_limit_exceeded")
            s["cap_refused_calls"] += (
                c.error_type.endswith("_cap_exceeded")
                or c.error_type == "prepaid_balance_exhausted"
            )
            s["queue_refused_calls"] += c.error_type in ("queue_timeout", "queue_full")
            comparable = c.upstream_currency == c.currency
            s["upstream_cost"] += c.upstream_cost if comparable else 0
            billed = c.input_tokens + c.cache_read_tokens + c.cache_write_tokens + c.output_tokens
            s["uncosted_calls"] += not comparable and c.node_id is not None and billed > 0
    return out


# The rollup sums, each recomputed above from the call records: a column added
# to SUM_COLUMNS without a line above stays 0 here and fails the comparison.
SUMS = SUM_COLUMNS


def stored_rollups(organization_id: int) -> dict[tuple, dict]:
    """The rollup rows as stored, in the shape of ``expected_rollups``; also
    checks each row's histograms hold exactly its call and TTFT counts."""
    from usage.models import Rollup
    from usage.sketch import LogHistogram

    out = {}
    for r in Rollup.objects.filter(organization_id=organization_id):
        assert LogHistogram.from_bytes(r.latency_hist).count == r.calls
        assert LogHistogram.from_bytes(r.ttft_hist).count == r.ttft_count
        cell = (r.grain, r.sub_account_id, r.api_key_id, r.model, r.node_id, r.protocol, r.mode)
        out[(*cell, r.hour)] = {f: getattr(r, f) for f in SUMS}
    return out
