"""Summing a batch of call rows into rollup cells, in Python, before any SQL.

Each call is added once, to its FULL-grain cell; the other grains are then
derived from those few cells, so the per-call cost does not grow with the
number of grains. A latency is bucketed once per call (``usage.sketch``) and
kept as a list of bucket indexes until the cell is written, because lists
concatenate and count (``Counter``) at C speed.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from math import ceil, log
from typing import Any

from usage.ingest.rows import CallRow
from usage.models import Grain
from usage.sketch import _INV_LOG_GAMMA

# Sums kept per cell, in this order, then the two bucket lists.
SUM_COLUMNS = (
    "calls",
    "calls_2xx",
    "calls_4xx",
    "calls_429",
    "calls_5xx",
    "stream_calls",
    "cache_hit_calls",
    "unpriced_calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost",
    "latency_sum_us",
    "ttft_count",
    "ttft_sum_us",
    # Where time goes: sums over the calls that report them (a missing one adds 0).
    "queue_sum_us",
    "overhead_sum_us",
    "upstream_sum_us",
    # Calls answered from the gateway's response cache (also in cache_hit_calls).
    "response_cache_calls",
    # Refusals by cause, from the gateway's error code (see below).
    "rate_limited_calls",
    "cap_refused_calls",
    "queue_refused_calls",
    # What upstream vendors charge, in the organization's currency, and the
    # calls whose charge is not comparable (see ``sum_calls``).
    "upstream_cost",
    "uncosted_calls",
)
N_SUMS = len(SUM_COLUMNS)
LAT_BINS = N_SUMS
TTFT_BINS = N_SUMS + 1
# Output speed: thousandths of an output token per second of generation, for
# each 2xx call with output tokens not answered from the response cache.
# Generation time is latency less time to first token for a stream, the
# whole latency otherwise (a call with none is not counted).
TPS_BINS = N_SUMS + 2
HISTS = (LAT_BINS, TTFT_BINS, TPS_BINS)
(
    _QUEUE,
    _OVERHEAD,
    _UPSTREAM,
    _RESPONSE_CACHE,
    _RATE_LIMITED,
    _CAP_REFUSED,
    _QUEUE_REFUSED,
    _UPSTREAM_COST,
    _UNCOSTED,
) = range(SUM_COLUMNS.index("queue_sum_us"), N_SUMS)

# The gateway's refusal codes (``gateway_bridge.limits``, ``gateway_bridge.gateway``).
RATE_LIMIT_CODES = frozenset({"rpm_limit_exceeded", "tpm_limit_exceeded"})
CAP_SUFFIX = "_cap_exceeded"  # key_daily_cap_exceeded, sub_account_monthly_cap_exceeded, ...
PREPAID_CODE = "prepaid_balance_exhausted"  # 402
QUEUE_CODES = frozenset({"queue_timeout", "queue_full"})  # 503, 429
# Spend caps and the prepaid balance (402). Any other code ending in
# CAP_SUFFIX is a cap too (a new cap period, say); these are listed only so
# the common ones cost one dict lookup.
CAP_CODES = frozenset(
    [f"{scope}_{period}{CAP_SUFFIX}" for scope in ("key", "sub_account")
     for period in ("daily", "monthly", "lifetime")] + [PREPAID_CODE]
)  # fmt: skip
# Error code to the refusal sum it counts in.
_REFUSAL_SLOT = {
    **dict.fromkeys(RATE_LIMIT_CODES, _RATE_LIMITED),
    **dict.fromkeys(CAP_CODES, _CAP_REFUSED),
    **dict.fromkeys(QUEUE_CODES, _QUEUE_REFUSED),
}


# A cell's key: (org, grain, sub, key, model, node, protocol, mode, hour) for
# a rollup cell (without the grain: a FULL cell of ``sum_calls``), (org, kind,
# tag key, hour, value) for an attribution cell.
CellKey = tuple[Any, ...]
# A rollup cell: its key, its sums (``SUM_COLUMNS``), then its three bucket lists.
RollupCell = tuple[CellKey, list[Any]]
# An attribution cell: its key and its sums (``ATTRIBUTION_SUMS``).
AttributionCell = tuple[CellKey, list[int]]

# Bucket index standing for a zero duration (below any real bucket: 1 us is 0).
ZERO = -(2**31)


def mode_of(stream: bool) -> str:
    """The rollups' name for a call's streaming: "stream" or "plain"."""
    return "stream" if stream else "plain"


def grain_cells(
    org: int, sub: int, key: int, model: str, node: int, protocol: str, mode: str, hour: int
) -> tuple[CellKey, ...]:
    """The cell of every grain a call of these dimensions adds to, each keyed
    (org, grain, sub, key, model, node, protocol, mode, hour); the FULL one last."""
    return (
        (org, Grain.ORG.value, 0, 0, "", 0, "", "", hour),
        (org, Grain.SUB_ACCOUNT.value, sub, 0, "", 0, "", "", hour),
        (org, Grain.KEY.value, 0, key, "", 0, "", "", hour),
        (org, Grain.MODEL.value, 0, 0, model, 0, "", "", hour),
        (org, Grain.NODE.value, 0, 0, "", node, "", "", hour),
        (org, Grain.TRAFFIC.value, 0, 0, model, 0, protocol, mode, hour),
        (org, Grain.FULL.value, sub, key, model, node, protocol, mode, hour),
    )


def sum_calls(rows: list[CallRow], hours: list[int]) -> dict[CellKey, list[Any]]:
    """FULL-grain sums keyed by (org, sub, key, model, node, protocol, mode, hour_ts):
    here each call's counts (by status class, streaming, cache, pricing) and
    its buckets (latency, time to first token, output speed); its sums in
    ``_add_sums``."""
    cells: dict[CellKey, list[Any]] = {}
    get = cells.get
    inv = _INV_LOG_GAMMA
    for row, hour in zip(rows, hours, strict=True):
        stream = row.stream
        key = (
            row.organization_id,
            row.sub_account_id or 0,
            row.api_key_id,
            row.model,
            row.node_id or 0,
            row.protocol,
            mode_of(stream),
            hour,
        )
        a = get(key)
        if a is None:
            a = cells[key] = [0] * N_SUMS + [[], [], []]
        a[0] += 1
        status = row.status_code
        ok = 200 <= status < 300
        if ok:
            a[1] += 1
        elif 400 <= status < 500:
            a[2] += 1
            if status == 429:
                a[3] += 1
        elif status >= 500:
            a[4] += 1
        if stream:
            a[5] += 1
        cache = row.cache_status
        if cache != "miss":
            a[6] += 1
            if cache == "response_hit":
                a[_RESPONSE_CACHE] += 1
        if not row.priced:
            a[7] += 1
        lat = row.latency_us
        a[LAT_BINS].append(ceil(log(lat) * inv) if lat else ZERO)
        ttft = row.ttft_us
        if ttft is not None:
            a[TTFT_BINS].append(ceil(log(ttft) * inv) if ttft else ZERO)
        out = row.output_tokens
        if ok and out > 0 and cache != "response_hit":
            gen = lat - ttft if stream and ttft is not None else lat
            if gen > 0:
                v = out * 1_000_000_000 // gen
                a[TPS_BINS].append(ceil(log(v) * inv) if v else ZERO)
        _add_sums(a, row)
    return cells


def _add_sums(a: list[Any], row: CallRow) -> None:
    """Add a call's sums to its cell: tokens, cost, the vendor's charge,
    latency and time to first token, where the time went, and the cause of a
    refusal."""
    inp = row.input_tokens
    cr = row.cache_read_tokens
    cw = row.cache_write_tokens
    out = row.output_tokens
    a[8] += inp
    a[9] += cr
    a[10] += cw
    a[11] += out
    a[12] += row.reasoning_tokens
    a[13] += row.cost
    # The vendor's charge counts where it is in the organization's
    # currency (the rollup's); a call an upstream served with tokens to pay
    # for, at an unknown cost or in another currency, counts as uncosted.
    if row.upstream_currency == row.currency:
        a[_UPSTREAM_COST] += row.upstream_cost
    elif row.node_id is not None and (inp or cr or cw or out):
        a[_UNCOSTED] += 1
    a[14] += row.latency_us
    ttft = row.ttft_us
    if ttft is not None:
        a[15] += 1
        a[16] += ttft
    t = row.queue_us
    if t:
        a[_QUEUE] += t
    t = row.overhead_us
    if t:
        a[_OVERHEAD] += t
    t = row.upstream_us
    if t:
        a[_UPSTREAM] += t
    err = row.error_type
    if err:
        slot = _REFUSAL_SLOT.get(err)
        if slot is None and err.endswith(CAP_SUFFIX):
            slot = _CAP_REFUSED
        if slot is not None:
            a[slot] += 1


def all_grains(full: dict[CellKey, list[Any]]) -> list[RollupCell]:
    """Every grain's cells from the FULL cells, sorted by key: the order in
    which rows are locked, the same in every worker, so workers never deadlock.

    The FULL cells are first grouped under each derived cell, then each
    group is summed at once, column by column (``map(sum, zip(...))``) and
    its bucket lists chained: no intermediate list per FULL cell added."""
    groups: dict[CellKey, list[list[Any]]] = {}
    get = groups.get
    out: dict[CellKey, list[Any]] = {}
    for dims, sums in full.items():
        *derived, whole = grain_cells(*dims)
        for cell in derived:
            members = get(cell)
            if members is None:
                groups[cell] = [sums]
            else:
                members.append(sums)
        out[whole] = sums
    for cell, members in groups.items():
        if len(members) == 1:
            (sums,) = members
            out[cell] = [*sums[:N_SUMS], *(list(sums[h]) for h in HISTS)]
        else:
            acc: list[Any] = list(map(sum, zip(*[m[:N_SUMS] for m in members], strict=True)))
            for h in HISTS:
                acc.append(list(chain.from_iterable([m[h] for m in members])))
            out[cell] = acc
    return sorted(out.items(), key=lambda item: item[0])


def bucket_counts(indexes: list[int]) -> tuple[dict[int, int], int]:
    """Bucket counts without the zero bucket, and the zero count."""
    counts = Counter(indexes)
    zero = counts.pop(ZERO, 0)
    return counts, zero


# The attribution rollups' sums (``usage.models.AttributionRollup``), in this order.
ATTRIBUTION_SUMS = (
    "calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost",
)
TAG = "tag"
END_USER = "user"


def sum_attribution(rows: list[CallRow], hours: list[int]) -> list[AttributionCell]:
    """The batch's attribution cells, keyed (org, kind, tag key, hour, value)
    and sorted (the order rows are locked in, the same in every worker): one
    per tag a call carries, one for its end user. Calls with neither add
    nothing, and cost one test each."""
    cells: dict[CellKey, list[int]] = {}
    get = cells.get
    for row, hour in zip(rows, hours, strict=True):
        tags = row.tags
        user = row.end_user
        if not (tags or user):
            continue
        org = row.organization_id
        add = (
            1,
            row.input_tokens,
            row.cache_read_tokens,
            row.cache_write_tokens,
            row.output_tokens,
            row.cost,
        )
        keys: list[CellKey] = [(org, TAG, k, hour, v) for k, v in tags.items()]
        if user:
            keys.append((org, END_USER, "", hour, user))
        for key in keys:
            a = get(key)
            if a is None:
                cells[key] = list(add)
            else:
                for i, v in enumerate(add):
                    a[i] += v
    return sorted(cells.items())
