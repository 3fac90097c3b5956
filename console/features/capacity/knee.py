"""The knee of a stepped load test: where more clients stop buying throughput
and start buying waiting.

Definition: the knee is the first step (after the first) at which the p99
latency rises more than ``p99_rise`` (default 25 %) over the previous step's
while the requests per second grow less than ``qps_growth`` (default 20 %)
over the previous step's. Steps without a p99 (no successful call) are
skipped: they carry no latency to compare. ``None``: no knee in the steps run
(the service was not saturated, or there were fewer than two steps).
"""

from __future__ import annotations

from collections.abc import Sequence

P99_RISE = 0.25
QPS_GROWTH = 0.20


def find_knee(
    points: Sequence[tuple[float, float | None]],
    *,
    p99_rise: float = P99_RISE,
    qps_growth: float = QPS_GROWTH,
) -> int | None:
    """Index of the knee in ``points`` ((requests/s, p99 ms) per step, in step
    order), or ``None``."""
    previous: tuple[float, float] | None = None
    for index, (qps, p99) in enumerate(points):
        if p99 is None:
            continue
        if previous is not None:
            last_qps, last_p99 = previous
            if p99 > last_p99 * (1 + p99_rise) and qps < last_qps * (1 + qps_growth):
                return index
        previous = (qps, p99)
    return None
