"""``python manage.py bench_keys``: what a refused key costs the gateway, by path.

Measured in this process, on the configured database (SQLite in the embedded
mode), in one run:

* ``checksum_refusal``: a key in the checksummed format with a typo, through
  the gateway's auth stage (``gateway_bridge.pipeline.auth.authenticate``
  with a real ``GatewayState``): refused by its checksum, no hash, cache or
  query;
* ``unknown_key_lookup``: a well-formed key without the checksum mark (the
  legacy shape) that is in no database, through the same stage: the old path,
  keyed hash, a hop to the gateway's database thread, the key query, then the
  negative cache. Every key is a new one, so none is answered from the
  negative cache (a flood of random keys, as an attacker sends);

and the same two without the stage around them: ``accounts`` ``checksum_refuses``
against ``api_key_authenticate`` (hash and query) called directly.

Each figure is the median over ``--repeat`` rounds of the mean µs per check;
``ratio`` is the lookup's µs over the refusal's (the target: at least 20).
Nothing is written to the database. Prints one JSON object.

    python manage.py bench_keys [--refusals 50000] [--lookups 2000] [--repeat 3]
"""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.utils import DatabaseError

from accounts.facade import KEY_PREFIX, ApiKey, api_key_authenticate, checksum_refuses, new_secret
from console.kernel import ipnet
from gateway_bridge.config import KeyCacheConfig
from gateway_bridge.pipeline import auth
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.state import GatewayState

TARGET_RATIO = 20
_ID_ALPHABET = "abcdefghijkmnopqrstuvwxyz23456789"


def _mistyped() -> str:
    """A freshly issued key's text with one character of its random part changed."""
    _, raw, _ = new_secret(KEY_PREFIX)
    i = len(raw) - 10
    wrong = raw[:i] + ("a" if raw[i] != "a" else "b") + raw[i + 1 :]
    assert checksum_refuses(wrong)
    return wrong


def _unknown_legacy() -> str:
    """Well formed, no checksum mark, in no database."""
    public_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))
    raw = f"{KEY_PREFIX}{public_id}_{secrets.token_urlsafe(32)}"
    assert not checksum_refuses(raw)
    return raw


class Command(BaseCommand):
    help = "Time a mistyped checksummed key's refusal against an unknown key's lookup; JSON."

    def add_arguments(self, parser):
        parser.add_argument("--refusals", type=int, default=50_000, help="Checks per round")
        parser.add_argument("--lookups", type=int, default=2_000, help="Lookups per round")
        parser.add_argument("--repeat", type=int, default=3, help="Rounds (the median is kept)")

    def handle(self, *args, refusals, lookups, repeat, **options):
        if min(refusals, lookups, repeat) < 1:
            raise CommandError("--refusals, --lookups and --repeat must be at least 1.")
        try:
            keys_in_db = ApiKey.objects.count()
        except DatabaseError as exc:
            raise CommandError(f"No key table ({exc}): run manage.py migrate first.") from exc
        bad = [_mistyped() for _ in range(min(refusals, 5_000))]
        names = ("stage_refusal", "stage_lookup", "fn_refusal", "fn_lookup")
        rounds: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(repeat):
            stage_refusal, stage_lookup = asyncio.run(_stage_round(bad, refusals, lookups))
            rounds["stage_refusal"].append(stage_refusal)
            rounds["stage_lookup"].append(stage_lookup)
            rounds["fn_refusal"].append(_fn_refusal(bad, refusals))
            rounds["fn_lookup"].append(_fn_lookup(lookups))
        med = {name: statistics.median(values) for name, values in rounds.items()}
        stage_ratio = med["stage_lookup"] / med["stage_refusal"]
        out = {
            "what": (
                "in-process microseconds (us) per check, median of the rounds' means: a mistyped "
                "checksummed key refused by its checksum, against a well-formed unknown "
                "key without the checksum (hash + key query + negative cache), each new"
            ),
            "vendor": connection.vendor,
            "keys_in_db": keys_in_db,
            "rounds": repeat,
            "checks_per_round": {"refusal": refusals, "lookup": lookups},
            "gateway_auth_stage": {
                "measured": "gateway_bridge.pipeline.auth.authenticate, real GatewayState",
                "checksum_refusal_us": round(med["stage_refusal"], 3),
                "unknown_key_lookup_us": round(med["stage_lookup"], 3),
                "checksum_refusal_per_s": round(1e6 / med["stage_refusal"]),
                "unknown_key_lookup_per_s": round(1e6 / med["stage_lookup"]),
                "ratio": round(stage_ratio, 1),
            },
            "key_check_functions": {
                "measured": "accounts checksum_refuses vs api_key_authenticate",
                "checksum_refusal_us": round(med["fn_refusal"], 3),
                "unknown_key_lookup_us": round(med["fn_lookup"], 3),
                "ratio": round(med["fn_lookup"] / med["fn_refusal"], 1),
            },
            "rounds_us": {name: [round(v, 3) for v in values] for name, values in rounds.items()},
            "target_ratio": TARGET_RATIO,
            "met": stage_ratio >= TARGET_RATIO,
        }
        self.stdout.write(json.dumps(out, indent=2))


async def _stage_round(bad: list[str], refusals: int, lookups: int) -> tuple[float, float]:
    """Mean µs per call of the auth stage: refusals, then lookups."""
    state = GatewayState(KeyCacheConfig.from_settings())
    scope = {"client": ("203.0.113.9", 40000), "query_string": b""}
    try:
        await _stage(state, scope, bad[:100])  # warm up both paths
        await _stage(state, scope, [_unknown_legacy() for _ in range(20)])
        keys = [bad[i % len(bad)] for i in range(refusals)]
        refused = await _stage(state, scope, keys) / refusals
        keys = [_unknown_legacy() for _ in range(lookups)]
        looked_up = await _stage(state, scope, keys) / lookups
        return refused, looked_up
    finally:
        await asyncio.to_thread(state.executor.shutdown, wait=True)


async def _stage(state: GatewayState, scope: dict, keys: list[str]) -> float:
    """µs for ``authenticate`` over ``keys``, every one refused with the usual 401."""
    authenticate = auth.authenticate
    empty = ipnet.EMPTY
    t0 = time.perf_counter()
    for raw in keys:
        try:
            await authenticate(
                state, empty, Call("openai", "models"), scope, {"authorization": f"Bearer {raw}"}
            )
        except GatewayError as err:
            if err.code != "invalid_api_key":
                raise
        else:
            raise CommandError(f"a bench key was accepted: {raw[:16]}…")
    return (time.perf_counter() - t0) * 1e6


def _fn_refusal(bad: list[str], n: int) -> float:
    keys = [bad[i % len(bad)] for i in range(n)]
    t0 = time.perf_counter()
    for raw in keys:
        if not checksum_refuses(raw):
            raise CommandError("a mistyped key passed its checksum")
    return (time.perf_counter() - t0) * 1e6 / n


def _fn_lookup(n: int) -> float:
    keys = [_unknown_legacy() for _ in range(n)]
    api_key_authenticate(keys[0])  # warm up: the connection
    t0 = time.perf_counter()
    for raw in keys:
        if api_key_authenticate(raw) is not None:
            raise CommandError("an unknown key was found")
    return (time.perf_counter() - t0) * 1e6 / n
