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
  and the per-organization totals ingest hands to ``console.hooks.CALLS_INGESTED``
  receivers (``OrgUsageTotals``);
* what a key or sub-account spent per period, for the gateway's cap seeding
  (``spend_by_period`` with ``SPEND_BY_KEY`` / ``SPEND_BY_SUB_ACCOUNT``);
* the models other apps read: call records and hourly rollups (with their
  ``Grain``), the catalogue and its prices, and what re-rating leaves for
  invoicing (``Adjustment``, ``RerateRun``, ``PeriodClose``);
* the rollup reads the analytics pages draw (``series`` into a ``Series``,
  ``cache_savings``; ``unserved_models``, the names called that are no
  model), the keys a caller may see in call logs
  (``visible_keys``), the filter form pieces those pages share
  (``KeyChoiceField``, ``OrganizationFilterMixin``) and the CSV guard
  (``csv_text``);
* margin, for platform staff only: ``margin_report`` (revenue, vendor cost
  and margin by model, channel, organization and day, per currency, from the
  rollups) into a ``MarginReport`` of ``MarginLine`` and ``MarginDay``, and
  ``margin_basis_points`` (the integer margin share);
* ``seed_catalog``, the default models and list prices;
* ``window_stats`` (a ``WindowStats``): calls, 5xx and p99 latency and TTFT of
  a model, node or organization over the last minutes, for the alert rules.
"""

from __future__ import annotations

from usage.analytics import Series, cache_savings, series, unserved_models
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
from usage.prices import PriceBook
from usage.rating import PPM, PriceRow, TokenCounts, discount_for, discount_ppm_for, rate
from usage.seed import seed_catalog
from usage.spend import KEY as SPEND_BY_KEY
from usage.spend import SUB_ACCOUNT as SPEND_BY_SUB_ACCOUNT
from usage.spend import spend_by_period
from usage.totals import OrgUsageTotals
from usage.windows import WindowStats, window_stats

__all__ = [
    "ENDPOINTS",
    "PPM",
    "SCHEMA_VERSION",
    "SPEND_BY_KEY",
    "SPEND_BY_SUB_ACCOUNT",
    "Adjustment",
    "CallRecord",
    "CatalogModel",
    "Grain",
    "KeyChoiceField",
    "MarginDay",
    "MarginLine",
    "MarginReport",
    "OrgUsageTotals",
    "OrganizationFilterMixin",
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
    "cache_savings",
    "csv_text",
    "discount_for",
    "discount_ppm_for",
    "encode",
    "margin_basis_points",
    "margin_report",
    "rate",
    "seed_catalog",
    "series",
    "spend_by_period",
    "to_wire",
    "unserved_models",
    "visible_keys",
    "window_stats",
]
