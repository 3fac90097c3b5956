"""Percentiles of latency and time to first token as people read them: exact
from the call records while a window holds few calls, from the merged rollup
sketches (``usage.quantiles``, within 1 %) above that.

A sketch reports a bucket's representative value, so on a handful of calls
its p99 and p99.9 can lie below the slowest call (16 calls of up to 2,450 ms
once showed a p99.9 of 1,963 ms). Below ``EXACT_BELOW`` values the records
are read instead and each percentile is the *nearest-rank* order statistic:
the ``ceil(q * n)``-th smallest of the ``n`` values (the smallest for
``q = 0``), so p100 is the slowest call and no percentile exceeds it. The
values counted are the ones the sketch holds (billed calls; TTFT only where a
call has one); when the records no longer hold them all (retention dropped
some), the sketch answers.

``percentiles_of`` is the one place that chooses; every reader of latency
percentiles for a window (the marketplace, the public pages, the per-channel
breakdown) goes through it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from usage.quantiles import encoded_count, encoded_quantiles

#: Below this many values in a window, percentiles are exact (nearest rank).
EXACT_BELOW = 2000

Encoded = bytes | memoryview | None


def nearest_rank(values_us: Sequence[int], quantiles: Iterable[float]) -> dict[float, float | None]:
    """Each quantile (ms) as the ``ceil(q * n)``-th smallest value (us), or
    ``None`` for no values."""
    ordered = sorted(values_us)
    n = len(ordered)
    out: dict[float, float | None] = {}
    for q in quantiles:
        if not 0.0 <= q <= 1.0:
            raise ValueError("quantile must be between 0 and 1")
        if not n:
            out[q] = None
            continue
        # Rounded first: 0.999 * 1000 is not exactly 999 in binary floating point.
        rank = max(1, math.ceil(round(q * n, 9)))
        out[q] = ordered[rank - 1] / 1000.0
    return out


def percentiles_of(
    encoded: Iterable[Encoded],
    quantiles: Iterable[float],
    values_us: Callable[[], Sequence[int]],
) -> dict[float, float | None]:
    """Quantiles (ms) of a window whose rollup sketches are ``encoded``:
    exact (``nearest_rank`` of ``values_us()``, read only then) when the
    sketches hold fewer than ``EXACT_BELOW`` values and the records hold as
    many, the sketches' otherwise."""
    blobs = [bytes(b) for b in encoded if b]
    quantiles = tuple(quantiles)
    held = encoded_count(blobs)
    if 0 < held < EXACT_BELOW:
        values = values_us()
        if len(values) == held:
            return nearest_rank(values, quantiles)
    return encoded_quantiles(blobs, quantiles)
