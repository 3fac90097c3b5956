"""Quantiles of merged latency sketches: the encoded histograms of rollup
rows (``usage.sketch``) added up without decoding each into a dict, and the
quantiles read off the merge with ``LogHistogram.quantile``'s rank rule."""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate

from usage.sketch import _HEADER, bucket_value, merge_encoded

_BODY = 1 + _HEADER.size
_ITEMSIZE = {ord(code): array(code).itemsize for code in "BHIQ"}
_LIMIT = {ord(code): 256 ** array(code).itemsize - 1 for code in "BHIQ"}
# Array types wide enough for a merged count, narrowest first: (code, width, limit).
_FIELDS = tuple((c, array(c).itemsize, 256 ** array(c).itemsize - 1) for c in "BHIQ")


def _dense(blob: bytes) -> tuple[int, int, array[int]]:
    lo, zero = _HEADER.unpack_from(blob, 1)
    counts: array[int] = array(chr(blob[0]))
    counts.frombytes(blob[1 + _HEADER.size :])
    if sys.byteorder == "big":
        counts.byteswap()
    return lo, zero, counts


def _merged_dense(blobs: list[bytes]) -> tuple[int, int, array[int] | list[int]]:
    """The dense counts of the merge of several encodings. Each one's counts
    are spread into fixed-width fields of one big integer (strided byte
    copies), added up per first bucket, then shifted into place and added:
    the additions of every bucket happen in C, with no per-bucket Python
    loop. The fields are as narrow as the largest possible sum allows (the
    sum of each encoding's array type limit), so none can overflow."""
    bound = sum(_LIMIT[b[0]] for b in blobs)
    fitting = [(c, w) for c, w, limit in _FIELDS if bound <= limit]
    if not fitting:  # counts near 2**64: add them up as Python integers
        return _merged_slowly(blobs)
    code, width = fitting[0]
    bits = 8 * width
    zero = 0
    lo_min = hi_max = None
    by_lo: dict[int, int] = {}  # encodings starting at the same bucket, added unshifted
    get = by_lo.get
    unpack = _HEADER.unpack_from
    for b in blobs:
        lo, z = unpack(b, 1)
        zero += z
        size = _ITEMSIZE[b[0]]
        n = (len(b) - _BODY) // size
        if not n:
            continue
        if lo_min is None or lo < lo_min:
            lo_min = lo
        if hi_max is None or lo + n > hi_max:
            hi_max = lo + n
        data = memoryview(b)[_BODY:]
        field: memoryview | bytearray
        if size == width:
            field = data
        else:
            field = bytearray(width * n)
            for k in range(size):
                # Encodings are little-endian: byte k of a count goes to byte k of its field.
                field[k::width] = data[k::size]
        by_lo[lo] = get(lo, 0) + int.from_bytes(field, "little")
    if lo_min is None:
        return 0, zero, array(code)
    total = 0
    for lo, part in by_lo.items():
        total += part << (bits * (lo - lo_min))
    counts = array(code)
    counts.frombytes(total.to_bytes(width * (hi_max - lo_min), "little"))
    if sys.byteorder == "big":
        counts.byteswap()
    return lo_min, zero, counts


def _merged_slowly(blobs: list[bytes]) -> tuple[int, int, list[int]]:
    hist = merge_encoded(blobs)
    lo = min(hist.bins) if hist.bins else 0
    hi = max(hist.bins) + 1 if hist.bins else 0
    return lo, hist.zero_count, [hist.bins.get(k, 0) for k in range(lo, hi)]


def encoded_count(encoded: Iterable[bytes | memoryview | None]) -> int:
    """How many values the merge of these encoded histograms holds."""
    total = 0
    for b in encoded:
        if b:
            zero, counts = _dense(bytes(b))[1:]
            total += zero + sum(counts)
    return total


def encoded_quantiles(
    encoded: Iterable[bytes | memoryview | None], quantiles: Iterable[float]
) -> dict[float, float | None]:
    """Quantiles (ms) of the merge of these encoded histograms, with the same
    rank rule as ``LogHistogram.quantile``. One cumulative pass answers every
    quantile, and a single row (the usual case: one row per hour of a grain)
    is read straight from its dense counts without building a dict."""
    blobs = [bytes(b) for b in encoded if b]
    if not blobs:
        return dict.fromkeys(quantiles)
    counts: array[int] | list[int]
    if len(blobs) == 1:
        lo, zero, counts = _dense(blobs[0])
    else:
        lo, zero, counts = _merged_dense(blobs)
    cumulative = list(accumulate(counts, initial=zero))
    total = cumulative[-1]
    out: dict[float, float | None] = {}
    for q in quantiles:
        if not 0.0 <= q <= 1.0:
            raise ValueError("quantile must be between 0 and 1")
        if total == 0:
            out[q] = None
            continue
        rank = q * (total - 1)
        if zero > rank:
            out[q] = 0.0
            continue
        i = bisect_right(cumulative, rank, 1)
        if i >= len(cumulative):  # float rounding at q == 1: the last non-empty bucket
            i = max(j for j, c in enumerate(counts, 1) if c)
        out[q] = bucket_value(lo + i - 1) / 1000.0
    return out
