"""Mergeable latency histograms: DDSketch-style log-spaced buckets.

A positive value ``v`` (integer microseconds) falls in bucket
``k = ceil(log_gamma(v))`` with ``gamma = (1 + a) / (1 - a)``; the bucket's
representative value ``2 * gamma**k / (gamma + 1)`` is within relative error
``a`` of every value in it, so any quantile read from the counts is too.
Zero goes in a separate zero bucket. Merging is adding counts, so hourly
rows combine into any time range.

Encoding (``to_bytes``): one type byte (``B``, ``H``, ``I`` or ``Q``: the narrowest
array type that holds the largest count), a little-endian header of the first
bucket index (int32) and the zero count (uint64), then the dense counts from
the first to the last non-empty bucket.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Iterable

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
_INV_LOG_GAMMA = 1.0 / _LOG_GAMMA
_HEADER = struct.Struct("<iQ")
_BIG_ENDIAN = sys.byteorder == "big"
_TYPECODES = (("B", 0xFF), ("H", 0xFFFF), ("I", 0xFFFFFFFF), ("Q", 0xFFFFFFFFFFFFFFFF))


def bucket_index(value_us: int) -> int:
    """The bucket of a positive value (``value_us >= 1``)."""
    return math.ceil(math.log(value_us) * _INV_LOG_GAMMA)


def bucket_value(index: int) -> float:
    """The representative value of a bucket."""
    return 2.0 * math.exp(index * _LOG_GAMMA) / (GAMMA + 1.0)


class LogHistogram:
    """Counts per log-spaced bucket. ``bins`` maps bucket index to count."""

    __slots__ = ("bins", "zero_count")

    def __init__(self) -> None:
        self.bins: dict[int, int] = {}
        self.zero_count = 0

    def add(self, value_us: int, count: int = 1) -> None:
        if value_us < 0:
            raise ValueError("histogram values are durations and cannot be negative")
        if count <= 0:
            return
        if value_us == 0:
            self.zero_count += count
            return
        k = math.ceil(math.log(value_us) * _INV_LOG_GAMMA)
        bins = self.bins
        bins[k] = bins.get(k, 0) + count

    def add_bins(self, counts: dict[int, int]) -> None:
        """Add pre-bucketed counts (index -> count); ingest buckets values once."""
        bins = self.bins
        for k, c in counts.items():
            bins[k] = bins.get(k, 0) + c

    def merge(self, other: LogHistogram) -> None:
        self.zero_count += other.zero_count
        self.add_bins(other.bins)

    @property
    def count(self) -> int:
        return self.zero_count + sum(self.bins.values())

    def quantile(self, q: float) -> float | None:
        """The value at rank ``q * (count - 1)`` within the relative accuracy,
        or ``None`` for an empty histogram."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("quantile must be between 0 and 1")
        total = self.count
        if total == 0:
            return None
        rank = q * (total - 1)
        seen = self.zero_count
        if seen > rank:
            return 0.0
        for k in sorted(self.bins):
            seen += self.bins[k]
            if seen > rank:
                return bucket_value(k)
        return bucket_value(max(self.bins))  # float rounding at q == 1

    def to_bytes(self) -> bytes:
        bins = self.bins
        if not bins and not self.zero_count:
            return b""
        if bins:
            lo, hi = min(bins), max(bins)
            top = max(bins.values())
        else:
            lo, hi, top = 0, -1, 0
        code = next(c for c, limit in _TYPECODES if top <= limit)
        dense = array(code, bytes(array(code).itemsize * (hi - lo + 1)))
        for k, c in bins.items():
            dense[k - lo] = c
        if _BIG_ENDIAN:
            dense.byteswap()
        return code.encode() + _HEADER.pack(lo, self.zero_count) + dense.tobytes()

    @classmethod
    def from_bytes(cls, b: bytes | memoryview | None) -> LogHistogram:
        hist = cls()
        if not b:
            return hist
        b = bytes(b)
        code = chr(b[0])
        if code not in "BHIQ":
            raise ValueError("not a usage.sketch histogram")
        lo, hist.zero_count = _HEADER.unpack_from(b, 1)
        dense = array(code)
        dense.frombytes(b[1 + _HEADER.size :])
        if _BIG_ENDIAN:
            dense.byteswap()
        hist.bins = {lo + i: c for i, c in enumerate(dense) if c}
        return hist

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LogHistogram):
            return NotImplemented
        return self.zero_count == other.zero_count and self.bins == other.bins

    def __repr__(self) -> str:
        return f"LogHistogram(count={self.count}, buckets={len(self.bins)})"


def merge_encoded(encoded: Iterable[bytes | memoryview | None]) -> LogHistogram:
    """Decode and merge many encodings at once (the analytics read path)."""
    total: dict[int, int] = {}
    zero = 0
    unpack = _HEADER.unpack_from
    for b in encoded:
        if not b:
            continue
        b = bytes(b)
        lo, z = unpack(b, 1)
        zero += z
        dense = array(chr(b[0]))
        dense.frombytes(b[1 + _HEADER.size :])
        if _BIG_ENDIAN:
            dense.byteswap()
        get = total.get
        for i, c in enumerate(dense, lo):
            if c:
                total[i] = get(i, 0) + c
    hist = LogHistogram()
    hist.bins = total
    hist.zero_count = zero
    return hist


def _limit(code: str) -> int:
    return dict(_TYPECODES)[code]


def encode_counts(counts: dict[int, int], zero: int = 0) -> bytes:
    """Encode bucket counts (index -> count) without building a histogram."""
    hist = LogHistogram()
    hist.bins = counts
    hist.zero_count = zero
    return hist.to_bytes()


def add_counts_to_encoded(
    old: bytes | memoryview | None, counts: dict[int, int], zero: int = 0
) -> bytes:
    """``old`` plus bucket counts, re-encoded, working on the dense array
    directly (the ingest path: one call per rollup row per batch)."""
    if not old:
        return encode_counts(dict(counts), zero)
    if type(old) is not bytes:
        old = bytes(old)
    code = chr(old[0])
    lo, old_zero = _HEADER.unpack_from(old, 1)
    dense = array(code)
    dense.frombytes(memoryview(old)[_BODY:])
    if _BIG_ENDIAN:
        dense.byteswap()
    if counts:
        kmin, kmax = min(counts), max(counts)
        if not dense:
            lo = kmin
        if kmin < lo:
            dense[0:0] = array(code, bytes(dense.itemsize * (lo - kmin)))
            lo = kmin
        grow = kmax - lo + 1 - len(dense)
        if grow > 0:
            dense.frombytes(bytes(dense.itemsize * grow))
        try:
            for k, c in counts.items():
                dense[k - lo] += c
        except OverflowError:
            # A count outgrew the array type (rare: then it stays wider).
            return _add_counts_widening(old, counts, zero)
    if _BIG_ENDIAN:
        dense.byteswap()
    return code.encode() + _HEADER.pack(lo, old_zero + zero) + dense.tobytes()


_BODY = 1 + _HEADER.size


def _add_counts_widening(old: bytes, counts: dict[int, int], zero: int) -> bytes:
    """``add_counts_to_encoded`` with the array type widened first to fit
    the largest possible sum."""
    hist = LogHistogram.from_bytes(old)
    hist.add_bins(counts)
    hist.zero_count += zero
    return hist.to_bytes()
