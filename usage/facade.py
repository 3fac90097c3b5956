"""What other apps may use of ``usage``: its one public face.

Other apps import from here and nowhere else in ``usage`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``usage`` modules import each other directly, never this module.

What is published, by topic:

* money: ``rate`` (the one function that prices a call; ``PPM`` is the full
  price, what a vendor's cost price is rated at), ``discount_ppm_for``
  and ``discount_for`` (list price gets the organization's discount, a
  negotiated price pays full), ``PriceRow`` and ``TokenCounts``, and the
  ``PriceBook`` of every price row in memory;
* the usage contract: the event the gateway builds and the emitter encodes
  (``UsageEvent``, ``encode``, ``to_wire``, ``ENDPOINTS``),
  and the per-organization totals ingest hands to ``console.kernel.hooks.CALLS_INGESTED``
  receivers (``OrgUsageTotals``);
* what a key or sub-account spent per period, for the gateway's cap seeding
  (``spend_by_period`` with ``SPEND_BY_KEY`` / ``SPEND_BY_SUB_ACCOUNT``);
* no model but plain rows: what billing reads and marks (``usage.billing``:
  the period's billed calls grouped by price row, ``billed_usage_groups``;
  ``price_rows``; the re-rating adjustments on no invoice yet,
  ``unbilled_adjustments``, ``has_unbilled_adjustments``, ``rerate_reasons``,
  and locking, billing and releasing them; ``close_period``;
  ``has_billed_calls``, ``billed_cost``, ``costly_billed_calls``); call
  records as ``StoredCall`` rows (``call_rows``), the 5xx calls of a month
  (``failed_billed_calls``), an organization's rolled-up cost
  (``org_rollup_cost``), per-key calls and tokens
  (``calls_and_tokens_by_key``) and when a key's or sub-account's calls were
  first refused at one of its spend caps in each period
  (``first_cap_refusals``, for the alert rules: a refusal is the cap
  reached); the catalogue's models (``model_names``,
  ``catalog_models`` of ``CatalogModelRow``, ``connect_catalog_changes`` for
  a receiver of every catalogue or price change);
* the rollup reads the analytics pages draw (``series`` into a ``Series``,
  ``cache_savings``; ``unserved_models``, the names called that are no
  model), the keys a caller may see in call logs
  (``visible_keys``), the filter form pieces those pages share
  (``OrganizationFilterMixin`` with ``key_filter_field``,
  ``sub_account_filter_field`` and ``node_filter_field``) and the CSV guard
  (``csv_text``);
* cost attribution: ``attribution`` (calls grouped by a tag's value or by
  end user over a range, from the attribution rollups, into an
  ``Attribution`` of ``AttributionGroup``; ``ATTRIBUTE_BY_TAG`` /
  ``ATTRIBUTE_BY_END_USER``) and ``tag_keys`` (the tag keys in use);
* margin, for platform staff only: ``margin_report`` (revenue, vendor cost
  and margin by model, channel, organization and day, per currency, from the
  rollups) into a ``MarginReport`` of ``MarginLine`` and ``MarginDay``, and
  ``margin_basis_points`` (the integer margin share);
* the marketplace and status page: ``model_price_list`` (the prices an
  organization pays) and ``list_prices`` (list prices only, for the public
  page), and measured performance per model across every organization
  (``model_performance`` into ``Figures`` per ``PERFORMANCE_WINDOWS``;
  ``channel_performance`` per channel for platform staff; ``daily_status``,
  each model's up / degraded / down per day);
* cost attribution (``usage.attribution_rules``): the ``x-gateway-tags`` parser
  (``parse_tags_header``), ``clean_end_user``, ``missing_required``, their
  headers and ``AttributionError``;
* ``seed_catalog``, the default models and list prices;
* the call table's month partitions on PostgreSQL, for the soak's
  maintenance under load: ``ensure_call_partitions`` (what beat runs daily),
  ``drop_call_partitions_before`` (retention), ``drop_empty_call_partitions_after``,
  ``call_partitions`` (each a ``CallPartition``), ``call_partition_name``,
  ``call_rows_by_partition``, and the month arithmetic they take
  (``month_start``, ``add_months``);
* ``window_stats`` (a ``WindowStats``): calls, 5xx and p99 latency and TTFT of
  a model, node or organization over the last minutes, for the alert rules.
"""

from __future__ import annotations

from console.kernel.money import PPM
from usage.analytics import unserved_models
from usage.attribution import (
    BY_END_USER as ATTRIBUTE_BY_END_USER,
)
from usage.attribution import (
    BY_TAG as ATTRIBUTE_BY_TAG,
)
from usage.attribution import (
    Attribution,
    AttributionGroup,
    attribution,
    tag_keys,
)
from usage.attribution_rules import (
    END_USER_HEADER,
    TAGS_HEADER,
    AttributionError,
    clean_end_user,
    missing_required,
    parse_tags_header,
)
from usage.billing import (
    AdjustmentRow,
    BilledCost,
    UsageGroup,
    billed_cost,
    billed_usage_groups,
    close_period,
    costly_billed_calls,
    has_billed_calls,
    has_unbilled_adjustments,
    lock_unbilled_adjustments,
    mark_adjustments_billed,
    price_rows,
    release_adjustments,
    rerate_reasons,
    unbilled_adjustments,
)
from usage.call_csv import csv_text
from usage.catalog import (
    CatalogModelRow,
    ModelPrices,
    PerMtok,
    catalog_models,
    connect_catalog_changes,
    list_prices,
    model_names,
    model_price_list,
)
from usage.charts import Series, cache_savings, series
from usage.events import ENDPOINTS, UsageEvent, encode, to_wire
from usage.forms import (
    OrganizationFilterMixin,
    key_filter_field,
    node_filter_field,
    sub_account_filter_field,
)
from usage.logs import visible_keys
from usage.margin import MarginDay, MarginLine, MarginReport, margin_basis_points, margin_report
from usage.partitions import Partition as CallPartition
from usage.partitions import add_months, month_start
from usage.partitions import drop_empty_partitions_after as drop_empty_call_partitions_after
from usage.partitions import drop_partitions_before as drop_call_partitions_before
from usage.partitions import ensure_partitions as ensure_call_partitions
from usage.partitions import partition_name as call_partition_name
from usage.partitions import partitions as call_partitions
from usage.partitions import rows_by_partition as call_rows_by_partition
from usage.performance import (
    DEGRADED_BELOW,
    DOWN_BELOW,
    STATUS_DAYS,
    ChannelFigures,
    Figures,
    ModelStatus,
    channel_performance,
    daily_status,
    model_performance,
)
from usage.performance import WINDOWS as PERFORMANCE_WINDOWS
from usage.prices import PriceBook
from usage.rating import PriceRow, TokenCounts, discount_for, discount_ppm_for, rate
from usage.records import (
    FailedCall,
    StoredCall,
    call_rows,
    calls_and_tokens_by_key,
    failed_billed_calls,
    first_cap_refusals,
    org_rollup_cost,
)
from usage.seed import seed_catalog
from usage.spend import KEY as SPEND_BY_KEY
from usage.spend import SUB_ACCOUNT as SPEND_BY_SUB_ACCOUNT
from usage.spend import spend_by_period
from usage.totals import OrgUsageTotals
from usage.windows import WindowStats, window_stats

__all__ = [
    "ATTRIBUTE_BY_END_USER",
    "ATTRIBUTE_BY_TAG",
    "DEGRADED_BELOW",
    "DOWN_BELOW",
    "ENDPOINTS",
    "END_USER_HEADER",
    "PERFORMANCE_WINDOWS",
    "PPM",
    "SPEND_BY_KEY",
    "SPEND_BY_SUB_ACCOUNT",
    "STATUS_DAYS",
    "TAGS_HEADER",
    "AdjustmentRow",
    "Attribution",
    "AttributionError",
    "AttributionGroup",
    "BilledCost",
    "CallPartition",
    "CatalogModelRow",
    "ChannelFigures",
    "FailedCall",
    "Figures",
    "MarginDay",
    "MarginLine",
    "MarginReport",
    "ModelPrices",
    "ModelStatus",
    "OrgUsageTotals",
    "OrganizationFilterMixin",
    "PerMtok",
    "PriceBook",
    "PriceRow",
    "Series",
    "StoredCall",
    "TokenCounts",
    "UsageEvent",
    "UsageGroup",
    "WindowStats",
    "add_months",
    "attribution",
    "billed_cost",
    "billed_usage_groups",
    "cache_savings",
    "call_partition_name",
    "call_partitions",
    "call_rows",
    "call_rows_by_partition",
    "calls_and_tokens_by_key",
    "catalog_models",
    "channel_performance",
    "clean_end_user",
    "close_period",
    "connect_catalog_changes",
    "costly_billed_calls",
    "csv_text",
    "daily_status",
    "discount_for",
    "discount_ppm_for",
    "drop_call_partitions_before",
    "drop_empty_call_partitions_after",
    "encode",
    "ensure_call_partitions",
    "failed_billed_calls",
    "first_cap_refusals",
    "has_billed_calls",
    "has_unbilled_adjustments",
    "key_filter_field",
    "list_prices",
    "lock_unbilled_adjustments",
    "margin_basis_points",
    "margin_report",
    "mark_adjustments_billed",
    "missing_required",
    "model_names",
    "model_performance",
    "model_price_list",
    "month_start",
    "node_filter_field",
    "org_rollup_cost",
    "parse_tags_header",
    "price_rows",
    "rate",
    "release_adjustments",
    "rerate_reasons",
    "seed_catalog",
    "series",
    "spend_by_period",
    "sub_account_filter_field",
    "tag_keys",
    "to_wire",
    "unbilled_adjustments",
    "unserved_models",
    "visible_keys",
    "window_stats",
]
