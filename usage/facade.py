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
  (``UsageEvent``, ``encode``, ``to_wire``, ``SCHEMA_VERSION``, ``ENDPOINTS``),
  and the per-organization totals ingest hands to ``console.kernel.hooks.CALLS_INGESTED``
  receivers (``OrgUsageTotals``);
* what a key or sub-account spent per period, for the gateway's cap seeding
  (``spend_by_period`` with ``SPEND_BY_KEY`` / ``SPEND_BY_SUB_ACCOUNT``);
* the models other apps read: call records (``CallRecord.objects.billed()``
  for money: load-test calls marked "not billed" left out) and hourly
  rollups (with their ``Grain``; billed calls only), the catalogue and its
  prices, and what re-rating leaves for invoicing (``Adjustment``,
  ``RerateRun``, ``PeriodClose``);
* the rollup reads the analytics pages draw (``series`` into a ``Series``,
  ``cache_savings``; ``unserved_models``, the names called that are no
  model), the keys a caller may see in call logs
  (``visible_keys``), the filter form pieces those pages share
  (``KeyChoiceField``, ``OrganizationFilterMixin``) and the CSV guard
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
  limits and ``AttributionError``;
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

from usage.analytics import Series, cache_savings, series, unserved_models
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
    MAX_END_USER,
    MAX_TAG_KEY,
    MAX_TAG_VALUE,
    MAX_TAGS,
    TAGS_HEADER,
    AttributionError,
    clean_end_user,
    missing_required,
    parse_tags_header,
)
from usage.catalog import ModelPrices, PerMtok, list_prices, model_price_list
from usage.events import ENDPOINTS, SCHEMA_VERSION, UsageEvent, encode, to_wire
from usage.forms import KeyChoiceField, OrganizationFilterMixin
from usage.logs import csv_text, visible_keys
from usage.margin import MarginDay, MarginLine, MarginReport, margin_basis_points, margin_report
from usage.models import (
    Adjustment,
    CallRecord,
    CatalogModel,
    Grain,
    PeriodClose,
    Price,
    RerateRun,
    Rollup,
)
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
from usage.rating import PPM, PriceRow, TokenCounts, discount_for, discount_ppm_for, rate
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
    "MAX_END_USER",
    "MAX_TAGS",
    "MAX_TAG_KEY",
    "MAX_TAG_VALUE",
    "PERFORMANCE_WINDOWS",
    "PPM",
    "SCHEMA_VERSION",
    "SPEND_BY_KEY",
    "SPEND_BY_SUB_ACCOUNT",
    "STATUS_DAYS",
    "TAGS_HEADER",
    "Adjustment",
    "Attribution",
    "AttributionError",
    "AttributionGroup",
    "CallPartition",
    "CallRecord",
    "CatalogModel",
    "ChannelFigures",
    "Figures",
    "Grain",
    "KeyChoiceField",
    "MarginDay",
    "MarginLine",
    "MarginReport",
    "ModelPrices",
    "ModelStatus",
    "OrgUsageTotals",
    "OrganizationFilterMixin",
    "PerMtok",
    "PeriodClose",
    "Price",
    "PriceBook",
    "PriceRow",
    "RerateRun",
    "Rollup",
    "Series",
    "TokenCounts",
    "UsageEvent",
    "WindowStats",
    "add_months",
    "attribution",
    "cache_savings",
    "call_partition_name",
    "call_partitions",
    "call_rows_by_partition",
    "channel_performance",
    "clean_end_user",
    "csv_text",
    "daily_status",
    "discount_for",
    "discount_ppm_for",
    "drop_call_partitions_before",
    "drop_empty_call_partitions_after",
    "encode",
    "ensure_call_partitions",
    "list_prices",
    "margin_basis_points",
    "margin_report",
    "missing_required",
    "model_performance",
    "model_price_list",
    "month_start",
    "parse_tags_header",
    "rate",
    "seed_catalog",
    "series",
    "spend_by_period",
    "tag_keys",
    "to_wire",
    "unserved_models",
    "visible_keys",
    "window_stats",
]
