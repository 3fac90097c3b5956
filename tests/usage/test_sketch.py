"""Latency histograms: accuracy against exact percentiles, merging, encoding."""

from __future__ import annotations

import math
import random

import pytest

from usage.sketch import (
    RELATIVE_ACCURACY,
    LogHistogram,
    add_counts_to_encoded,
    merge_encoded,
)

QUANTILES = (0.0, 0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0)


def exact(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def assert_within_accuracy(hist: LogHistogram, values: list[int]) -> None:
    for q in QUANTILES:
        want = exact(values, q)
        got = hist.quantile(q)
        if want == 0:
            assert got == 0
        else:
            assert abs(got - want) <= RELATIVE_ACCURACY * want * (1 + 1e-9), (q, got, want)


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.0])
def test_quantiles_of_lognormal_latencies_are_within_one_percent(sigma):
    rng = random.Random(sigma)
    values = [max(1, int(rng.lognormvariate(math.log(250_000), sigma))) for _ in range(20_000)]
    hist = LogHistogram()
    for v in values:
        hist.add(v)
    assert hist.count == len(values)
    assert_within_accuracy(hist, values)


def test_merged_histograms_answer_like_one_over_all_values():
    rng = random.Random(7)
    parts = [
        [max(1, int(rng.lognormvariate(math.log(m), 0.8))) for _ in range(3000)]
        for m in (5_000, 80_000, 1_500_000)
    ]
    merged = LogHistogram()
    for part in parts:
        h = LogHistogram()
        for v in part:
            h.add(v)
        merged.merge(LogHistogram.from_bytes(h.to_bytes()))
    assert_within_accuracy(merged, [v for p in parts for v in p])


def test_zero_durations_go_to_the_zero_bucket():
    hist = LogHistogram()
    hist.add(0, count=3)
    hist.add(1_000)
    assert hist.count == 4
    assert hist.quantile(0.5) == 0.0
    assert hist.quantile(1.0) == pytest.approx(1_000, rel=RELATIVE_ACCURACY)
    with pytest.raises(ValueError, match="negative"):
        hist.add(-1)


def test_encoding_round_trips_and_empty_is_empty():
    hist = LogHistogram()
    for v in (1, 2, 10, 10, 70_000, 10**12):
        hist.add(v)
    hist.add(0)
    hist.add(500, count=70_000)  # forces a wider count type
    again = LogHistogram.from_bytes(memoryview(hist.to_bytes()))
    assert again == hist
    assert LogHistogram().to_bytes() == b""
    assert LogHistogram.from_bytes(b"").count == 0
    assert LogHistogram.from_bytes(None).quantile(0.5) is None


def test_adding_counts_to_an_encoding_equals_merging():
    rng = random.Random(3)
    base = LogHistogram()
    for _ in range(500):
        base.add(int(rng.lognormvariate(10, 1)) + 1)
    extra = LogHistogram()
    for _ in range(500):
        extra.add(int(rng.lognormvariate(14, 2)) + 1)  # reaches past both ends
    extra.add(0, 2)
    encoded = add_counts_to_encoded(base.to_bytes(), extra.bins, extra.zero_count)
    base.merge(extra)
    assert LogHistogram.from_bytes(encoded) == base


def test_merging_720_hourly_histograms_equals_one_histogram_of_everything():
    # A 30-day hourly series merges 720 encoded rows; its speed is measured by
    # bench_analytics, its result here.
    rng = random.Random(1)
    encoded = []
    whole = LogHistogram()
    for _ in range(720):
        h = LogHistogram()
        for _ in range(300):
            value = int(rng.lognormvariate(math.log(400_000), 1.2)) + 1
            h.add(value)
            whole.add(value)
        encoded.append(h.to_bytes())
    merged = merge_encoded(encoded)
    assert merged.count == whole.count == 720 * 300
    for q in (0.5, 0.9, 0.99, 0.999):
        assert merged.quantile(q) == whole.quantile(q)


def test_quantile_rejects_out_of_range():
    with pytest.raises(ValueError, match="between 0 and 1"):
        LogHistogram().quantile(1.5)


@pytest.mark.parametrize(
    ("old_bins", "old_zero", "add_bins", "add_zero"),
    [
        ({100: 200, 105: 3}, 0, {100: 100, 90: 1, 120: 2}, 1),  # 300 outgrows a byte
        ({100: 65_000}, 4, {100: 1_000}, 0),  # outgrows 16 bits
        ({}, 5, {42: 7, 40: 1}, 2),  # zero-only encoding gets its first buckets
        ({50: 1}, 0, {}, 3),  # only zeros added
    ],
)
def test_adding_counts_widens_and_extends_the_encoding_as_needed(
    old_bins, old_zero, add_bins, add_zero
):
    base = LogHistogram()
    base.add_bins(old_bins)
    base.zero_count = old_zero
    encoded = add_counts_to_encoded(base.to_bytes(), dict(add_bins), add_zero)
    base.add_bins(add_bins)
    base.zero_count += add_zero
    assert LogHistogram.from_bytes(encoded) == base
    assert encoded == base.to_bytes()
