"""Shared pieces of the rollup writers: column lists and histogram merging."""

from __future__ import annotations

from usage.ingest.aggregate import N_SUMS, SUM_COLUMNS, bucket_counts
from usage.sketch import add_counts_to_encoded

KEY_COLUMNS = (
    "organization_id",
    "grain",
    "sub_account_id",
    "api_key_id",
    "model",
    "node_id",
    "protocol",
    "mode",
)

# The sketch columns, in the order of ``aggregate.HISTS``.
HIST_COLUMNS = ("latency_hist", "ttft_hist", "tps_hist")


def merged_hist(old: bytes | memoryview | None, indexes: list[int]) -> bytes:
    """``old`` (an encoding, maybe empty) plus this batch's bucket indexes."""
    counts, zero = bucket_counts(indexes)
    return add_counts_to_encoded(old, counts, zero)


__all__ = ["HIST_COLUMNS", "KEY_COLUMNS", "N_SUMS", "SUM_COLUMNS", "merged_hist"]
