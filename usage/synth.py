"""Synthetic usage: organizations with sub-accounts and keys, and realistic
events for them, in time order, pushed through the real ingest path.

Traffic follows a diurnal curve (busy afternoons, quiet nights, quieter
weekends). Latencies are lognormal: time to first token around a quarter of
a second, then a per-token decode time, with a heavy tail. About a third of
chat calls hit the prefix cache (cache-read tokens), a few write it; a small
share fails with 429s, 5xxs and 400s. Request ids are derived from the seed,
the organization and the call's index, so running the same generation twice
ingests nothing new.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from accounts.facade import KEY_PREFIX, ApiKey, Organization, SubAccount, new_secret
from usage.events import SCHEMA_VERSION

# model, weight, kind, protocol, endpoint, stream endpoint
MODELS = (
    ("sim-chat-small", 40, "chat", "openai", "chat.completions"),
    ("sim-chat-large", 20, "chat", "openai", "chat.completions"),
    ("gpt-4o-mini", 15, "chat", "openai", "chat.completions"),
    ("claude-3-5-haiku", 10, "chat", "anthropic", "messages"),
    ("gemini-1.5-flash", 7, "chat", "gemini", "generateContent"),
    ("sim-embed", 8, "embedding", "openai", "embeddings"),
)
NODES = (1, 2, 3)
# Like real inference servers, each node serves a few models, not every one.
MODEL_NODES = {
    "sim-chat-small": (1, 2),
    "sim-chat-large": (2, 3),
    "gpt-4o-mini": (3,),
    "claude-3-5-haiku": (1,),
    "gemini-1.5-flash": (2, 3),
    "sim-embed": (1,),
}
# And each key (an application) calls a handful of models.
MODELS_PER_KEY = 3
SUB_ACCOUNTS = ("research", "production", "staging")
# hour-of-day weights (UTC), busiest mid-afternoon
_DIURNAL = [0.25 + 0.75 * math.exp(-(((h - 15) / 5.0) ** 2)) for h in range(24)]


@dataclass(frozen=True, slots=True)
class SynthKey:
    key_id: int
    organization_id: int
    sub_account_id: int | None
    weight: float


def ensure_org(slug: str, name: str | None = None) -> tuple[Organization, list[SynthKey]]:
    """The organization ``slug`` with three sub-accounts and keys, created if missing."""
    with transaction.atomic():
        org, _ = Organization.objects.get_or_create(
            slug=slug, defaults={"name": name or slug.replace("-", " ").title()}
        )
        subs = [SubAccount.objects.get_or_create(organization=org, name=n)[0] for n in SUB_ACCOUNTS]
        wanted = [("synth-org-key", None)] + [
            (f"synth-{s.name}-{i}", s) for s in subs for i in (1, 2)
        ]
        keys: list[SynthKey] = []
        for i, (key_name, sub) in enumerate(wanted):
            key = (
                ApiKey.objects.filter(organization=org, name=key_name)
                .exclude(status="revoked")
                .first()
            )
            if key is None:
                public_id, _raw, digest = new_secret(KEY_PREFIX)
                key = ApiKey.objects.create(
                    organization=org,
                    sub_account=sub,
                    name=key_name,
                    public_id=public_id,
                    secret_hash=digest,
                )
            keys.append(SynthKey(key.pk, org.pk, key.sub_account_id, 1.0 / (i + 1)))
        return org, keys


def hourly_counts(calls: int, start: datetime, hours: int) -> list[int]:
    """``calls`` spread over ``hours`` by the diurnal curve (largest remainder)."""
    weights = []
    for h in range(hours):
        t = start + timedelta(hours=h)
        weekend = 0.55 if t.weekday() >= 5 else 1.0
        weights.append(_DIURNAL[t.hour] * weekend)
    total = sum(weights)
    exact = [calls * w / total for w in weights]
    counts = [int(x) for x in exact]
    rest = calls - sum(counts)
    for i in sorted(range(hours), key=lambda i: exact[i] - counts[i], reverse=True)[:rest]:
        counts[i] += 1
    return counts


Event = dict[str, Any]
# A catalogue entry of ``MODELS``: name, weight, kind, protocol, endpoint.
ModelSpec = tuple[str, int, str, str, str]


def _key_models(keys: list[SynthKey], seed: int) -> dict[int, tuple[list[ModelSpec], list[int]]]:
    """The handful of models each key calls, with their weights (from the seed)."""
    key_models = {}
    for i, k in enumerate(keys):
        picked = random.Random(f"{seed}-{i}").sample(  # noqa: S311
            MODELS, MODELS_PER_KEY, counts=[m[1] for m in MODELS]
        )
        unique = list({m[0]: m for m in picked}.values())
        key_models[k.key_id] = (unique, [m[1] for m in unique])
    return key_models


def _outcome(r: float) -> tuple[int, str]:
    """The status and error type of a call, from one uniform draw."""
    if r < 0.012:
        return 429, "rate_limited"
    if r < 0.017:
        return (500, "upstream_error") if r < 0.015 else (503, "overloaded")
    if r < 0.022:
        return 400, "invalid_request"
    return 200, ""


def _work(rng: random.Random, kind: str, model: str, ok: bool) -> dict[str, Any]:
    """A call's tokens, cache use and times (the draws in a fixed order, so a
    seed gives the same events)."""
    lognorm, rand = rng.lognormvariate, rng.random
    prompt = int(lognorm(6.5, 0.9)) + 8
    cache_status = "miss"
    cache_read = cache_write = 0
    if kind == "embedding":
        return {"prompt": prompt, "cache_status": cache_status, "cache_read": 0,
                "cache_write": 0, "stream": False, "output": 0, "reasoning": 0, "ttft": None,
                "latency": int(lognorm(math.log(40_000), 0.4))}  # fmt: skip
    stream = rand() < 0.6
    c = rand()
    if ok and c < 0.32:
        cache_status = "prefix_hit"
        cache_read = int(prompt * (0.5 + 0.45 * rand()))
        prompt -= cache_read
    elif ok and c < 0.36:
        cache_write = prompt // 2
        prompt -= cache_write
    output = int(lognorm(5.3, 0.8)) + 1 if ok else 0
    thinks = ok and model == "sim-chat-large" and rand() < 0.2
    reasoning = int(output * 0.4) if thinks else 0
    ttft = int(lognorm(math.log(250_000), 0.5)) if ok else None
    if ttft is not None and cache_status == "prefix_hit":
        ttft = ttft * 2 // 3
    decode = int(output * lognorm(math.log(18_000), 0.35))
    latency = (ttft or int(lognorm(math.log(60_000), 0.6))) + decode
    return {"prompt": prompt, "cache_status": cache_status, "cache_read": cache_read,
            "cache_write": cache_write, "stream": stream, "output": output,
            "reasoning": reasoning, "ttft": ttft, "latency": latency}  # fmt: skip


def _event(
    rng: random.Random, spec: ModelSpec, key: SynthKey, started: datetime, org_id: int,
    request_id: str, index: int,
) -> Event:  # fmt: skip
    """One call's event: its outcome, work and serving node drawn from ``rng``."""
    model, _w, kind, protocol, endpoint = spec
    status, error = _outcome(rng.random())
    ok = status == 200
    w = _work(rng, kind, model, ok)
    overhead = int(rng.lognormvariate(math.log(1_500), 0.3))
    serving = MODEL_NODES.get(model, NODES)
    node = serving[index % len(serving)] if status != 429 else None
    stream, latency = w["stream"], w["latency"]
    return {
        "request_id": request_id,
        "started_at": started.isoformat(),
        "finished_at": (started + timedelta(microseconds=latency)).isoformat(),
        "organization_id": org_id,
        "sub_account_id": key.sub_account_id,
        "api_key_id": key.key_id,
        "model": model,
        "node_id": node,
        "protocol": protocol,
        "endpoint": ("streamGenerateContent" if stream else endpoint)
        if protocol == "gemini"
        else endpoint,
        "stream": stream,
        "status_code": status,
        "error_type": error,
        "input_tokens": w["prompt"] if ok or status == 500 else 0,
        "cache_read_tokens": w["cache_read"],
        "cache_write_tokens": w["cache_write"],
        "output_tokens": w["output"],
        "reasoning_tokens": w["reasoning"],
        "ttft_us": w["ttft"],
        "latency_us": latency,
        "upstream_us": max(latency - overhead, 0) if node else None,
        "overhead_us": overhead,
        "queue_us": None,
        "client_ip": f"198.51.100.{index % 250 + 1}",
        "priority": 0,
        "cache_status": w["cache_status"],
        "version": SCHEMA_VERSION,
    }


def generate(
    keys: list[SynthKey],
    *,
    start: datetime,
    hours: int,
    calls: int,
    seed: int = 1,
    end_limit: datetime | None = None,
) -> Iterator[Event]:
    """Yield ``calls`` valid event dicts over ``hours`` hours from ``start``, in
    started_at order. No event starts after ``end_limit`` (default: now)."""
    rng = random.Random(seed)  # noqa: S311 - synthetic data, not secrets
    end_limit = end_limit or datetime.now(UTC)
    key_weights = [k.weight for k in keys]
    key_models = _key_models(keys, seed)
    org_id = keys[0].organization_id
    index = 0
    for h, count in enumerate(hourly_counts(calls, start, hours)):
        hour_start = start + timedelta(hours=h)
        offsets = sorted(rng.randrange(3_600_000_000) for _ in range(count))
        picked_keys = rng.choices(keys, key_weights, k=count)
        for off, key in zip(offsets, picked_keys, strict=True):
            choices, weights = key_models[key.key_id]
            spec = rng.choices(choices, weights)[0]
            started = hour_start + timedelta(microseconds=off)
            if started > end_limit:
                return
            index += 1
            yield _event(rng, spec, key, started, org_id, f"syn{seed}-{org_id}-{index}", index)


def batched(events: Iterator[Event], size: int) -> Iterator[list[Event]]:
    batch: list[Event] = []
    for e in events:
        batch.append(e)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
