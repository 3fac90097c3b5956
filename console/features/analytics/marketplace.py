"""The model marketplace: every enabled model with its provider, modality and
context window, the prices the organization pays beside the list price, and
how the model performed on all the traffic the platform served in the last
24 hours, 7 days or 30 days (``usage.facade.model_performance``: summed
across organizations, never one organization's), sortable, with a
side-by-side comparison of chosen models; platform staff also see one
model's figures per channel. The REST API (``/api/v1/marketplace/``) answers
the same figures as JSON.

The two optional public pages (no sign-in) are ``public_pages``, over this
module's catalogue and platform-wide figures. The platform-wide figures are kept
for ``CONSOLE_MARKETPLACE_CACHE_SECONDS`` (the same for every reader), so
that page views, anonymous ones above all, do not each read 30 days of
rollups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.core.cache import cache
from django.shortcuts import render
from django.urls import reverse
from django.utils.formats import number_format
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.facade import IsOrgMember, Perm, org_view
from console.kernel.money import format_amount, format_rate
from usage.facade import (
    PERFORMANCE_WINDOWS,
    CatalogModelRow,
    Figures,
    PerMtok,
    catalog_models,
    channel_performance,
    discount_ppm_for,
    model_performance,
    model_price_list,
)

WINDOW_CHOICES = [
    ("24h", gettext_lazy("Last 24 hours")),
    ("7d", gettext_lazy("Last 7 days")),
    ("30d", gettext_lazy("Last 30 days")),
]
DEFAULT_WINDOW = "7d"
# The catalogue's modalities (``usage.models.Modality``) as readers see them.
MODALITY_LABELS = {"text": gettext_lazy("Text"), "vision": gettext_lazy("Text and images")}
USAGE = (Perm.USAGE_VIEW_ALL, Perm.USAGE_VIEW_OWN)


@dataclass(frozen=True)
class Column:
    """A sortable figure: its key, heading, how a row gives its value, and
    the analytics page (and percentile) its chart is on."""

    key: str
    label: str
    value: Callable[[dict[str, Any]], Any]
    page: str = ""
    pct: str = ""


def _fig(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: getattr(row["figures"], name) if row["figures"] else None


COLUMNS = (
    Column("ttft_p50", gettext_lazy("TTFT p50"), _fig("ttft_p50_ms"), "latency"),
    Column("ttft_p99", gettext_lazy("TTFT p99"), _fig("ttft_p99_ms"), "latency"),
    Column("latency_p50", gettext_lazy("Latency p50"), _fig("latency_p50_ms"), "latency"),
    Column("latency_p99", gettext_lazy("Latency p99"), _fig("latency_p99_ms"), "latency"),
    Column("latency_p999", gettext_lazy("Latency p99.9"), _fig("latency_p999_ms"), "latency"),
    Column("tokens_per_s", gettext_lazy("Output tokens/s p50"), _fig("tokens_per_s_p50"), ""),
    Column("cache", gettext_lazy("Prompt cache hit"), _fig("cache_hit_share"), "cache"),
    Column("availability", gettext_lazy("Availability"), _fig("availability"), "errors"),
    Column("calls", gettext_lazy("Calls"), _fig("calls"), "spend"),
)
# The comparison: model | TTFT | latency | tok/s | cache | availability.
COMPARE_COLUMNS = (
    "ttft_p50",
    "latency_p50",
    "latency_p99",
    "tokens_per_s",
    "cache",
    "availability",
)
SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "name": lambda row: row["name"],
    "provider": lambda row: row["provider"].lower() or None,
    "context": lambda row: row["context_window"],
    "price_input": lambda row: row["price"].input if row.get("price") else None,
    "price_output": lambda row: row["price"].output if row.get("price") else None,
    **{c.key: c.value for c in COLUMNS},
}
SORT_CHOICES = [(k, k) for s in SORTS for k in (s, f"-{s}")]


class MarketplaceForm(forms.Form):
    window = forms.ChoiceField(
        required=False, choices=WINDOW_CHOICES, label=gettext_lazy("Measured over")
    )
    sort = forms.ChoiceField(required=False, choices=SORT_CHOICES)
    compare = forms.MultipleChoiceField(required=False, choices=())
    model = forms.ChoiceField(required=False, choices=())

    def __init__(self, data, *, models: list[str]):
        super().__init__(data)
        names = [(m, m) for m in models]
        self.fields["compare"].choices = names
        self.fields["model"].choices = [("", ""), *names]

    def value(self, name: str, default=""):
        if self.is_valid():
            return self.cleaned_data.get(name) or default
        return default


def display(key: str, value) -> str:
    """A figure as people read it: ms, tokens/s, a percentage or a count."""
    if value is None:
        return "—"
    if key.startswith(("ttft", "latency")):
        return f"{number_format(value, 0, force_grouping=True)} ms"
    if key == "tokens_per_s":
        return number_format(value, 1, force_grouping=True)
    if key in ("cache", "availability"):
        return f"{number_format(value * 100, 1 if key == 'cache' else 2)} %"
    return number_format(value, 0, force_grouping=True)


def _per_mtok(p: PerMtok | None) -> dict | None:
    return None if p is None else vars(p).copy()


def _money(p: PerMtok | None, currency: str) -> dict | None:
    if p is None:
        return None
    return {k: format_amount(v, currency, exact=True) for k, v in vars(p).items()}


def _figures(row: dict) -> dict | None:
    fig: Figures | None = row["figures"]
    return None if fig is None else fig.as_dict()


def cached_figures(key: str, compute):
    """What ``compute`` returns, kept ``CONSOLE_MARKETPLACE_CACHE_SECONDS``
    (0: computed every time). Only platform-wide figures are kept: the same
    for every reader."""
    seconds = settings.CONSOLE_MARKETPLACE_CACHE_SECONDS
    if seconds <= 0:
        return compute()
    return cache.get_or_set(f"marketplace:{key}", compute, seconds)


def platform_figures(window: str) -> dict[str, Figures]:
    """Each model's figures over ``window``, across every organization."""
    return cached_figures(f"figures:{window}", lambda: model_performance(windows=(window,))[window])


def enabled_models() -> list[CatalogModelRow]:
    return catalog_models(enabled=True)


def _sorted(rows: list[dict], sort: str) -> list[dict]:
    """Rows by ``sort`` (a ``-`` first: descending); a missing figure sorts last."""
    key = sort.lstrip("-") or "name"
    get = SORTS[key]
    present = [r for r in rows if get(r) is not None]
    missing = [r for r in rows if get(r) is None]
    present.sort(key=lambda r: (get(r), r["name"]), reverse=sort.startswith("-"))
    return present + missing


def _chart_links(name: str, window: str) -> dict[str, str]:
    out = {}
    for c in COLUMNS:
        page = c.page or "latency"
        params = {"range": window, "model": name}
        out[c.key] = f"{reverse(f'analytics:{page}')}?{urlencode(params)}"
    return out


def member_rows(actor, window: str) -> list[dict]:
    """Every enabled model with the organization's and the list prices and
    the platform-wide figures of ``window``."""
    performance = platform_figures(window)
    prices = {p.model.name: p for p in model_price_list(actor=actor)}
    org = actor.organization
    rows = []
    for m in enabled_models():
        p = prices.get(m.name)
        rows.append(
            {
                "name": m.name,
                "display_name": m.display_name,
                "provider": m.provider,
                "modality": m.modality,
                "modality_label": MODALITY_LABELS.get(m.modality, m.modality),
                "context_window": m.context_window,
                "currency": org.currency,
                "price": p.effective if p else None,
                "list_price": p.list_price if p else None,
                "negotiated": bool(p and p.override),
                "figures": performance.get(m.name),
            }
        )
    return rows


def _discount_label(org) -> str:
    if org.discount_rate >= 1:
        return ""
    return format_rate(1_000_000 - discount_ppm_for(org.discount_rate))


HEADINGS = (
    ("name", gettext_lazy("Model")),
    ("provider", gettext_lazy("Provider")),
    ("context", gettext_lazy("Context window")),
    ("price_input", gettext_lazy("Input price")),
    ("price_output", gettext_lazy("Output price")),
    *((c.key, c.label) for c in COLUMNS),
)


def _headers(base: dict, sort: str) -> list[tuple]:
    """Per sortable column: (key, heading, link that sorts by it, aria-sort).
    The first click sorts ascending, the next descending."""
    out = []
    for key, label in HEADINGS:
        state = "ascending" if sort == key else "descending" if sort == f"-{key}" else "none"
        target = f"-{key}" if sort == key else key
        out.append((key, label, "?" + urlencode({**base, "sort": target}, doseq=True), state))
    return out


@require_GET
@org_view()
def marketplace(request):
    actor = request.actor
    catalogue = enabled_models()
    form = MarketplaceForm(request.GET or None, models=[m.name for m in catalogue])
    window = form.value("window", DEFAULT_WINDOW)
    sort = form.value("sort", "name")
    rows = _sorted(member_rows(actor, window), sort)
    can_charts = any(actor.can(p) for p in USAGE)
    for r in rows:
        r["money"] = _money(r["price"], r["currency"])
        r["list_money"] = _money(r["list_price"], r["currency"])
        r["links"] = _chart_links(r["name"], window) if can_charts else {}
        r["cells"] = [(c, display(c.key, c.value(r)), r["links"].get(c.key)) for c in COLUMNS]
    chosen = form.value("compare", [])
    compare_columns = [c for c in COLUMNS if c.key in COMPARE_COLUMNS]
    compared = [
        {
            **r,
            "cells": [
                (c, display(c.key, c.value(r)), r["links"].get(c.key)) for c in compare_columns
            ],
        }
        for r in rows
        if r["name"] in chosen
    ]
    staff = bool(request.user.is_staff)
    breakdown_model = form.value("model") if staff else ""
    breakdown = None
    if breakdown_model:
        breakdown = [
            (ch.label, [(c, display(c.key, c.value({"figures": ch.figures}))) for c in COLUMNS])
            for ch in channel_performance(breakdown_model, window)
        ]
    base = {"window": window, "compare": chosen}
    context = {
        "form": form,
        "rows": rows,
        "columns": COLUMNS,
        "compare_columns": compare_columns,
        "compared": compared,
        "chosen": chosen,
        "window": window,
        "windows": WINDOW_CHOICES,
        "sort": sort,
        "headers": _headers(base, sort),
        "staff": staff,
        "breakdown_model": breakdown_model,
        "breakdown": breakdown,
        "currency": actor.organization.currency,
        "discount": _discount_label(actor.organization),
        "query": urlencode({**base, "sort": sort}, doseq=True),
    }
    return render(request, "console/analytics/marketplace.html", context)


# --- the REST API -------------------------------------------------------------------


class MarketplaceQuery(serializers.Serializer):
    window = serializers.ChoiceField(
        choices=list(PERFORMANCE_WINDOWS), required=False, default=DEFAULT_WINDOW
    )


class MarketplaceAPIView(APIView):
    """``GET /api/v1/marketplace/?window=24h|7d|30d``: every enabled model
    with the caller's organization's prices per token class (micro-units per
    million tokens), the list prices, and the platform-wide figures."""

    permission_classes = [permissions.IsAuthenticated, IsOrgMember]

    @extend_schema(
        operation_id="marketplace_list",
        parameters=[
            OpenApiParameter(
                "window", str, enum=list(PERFORMANCE_WINDOWS), description="24h, 7d or 30d"
            )
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        query = MarketplaceQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        window = query.validated_data["window"]
        rows = member_rows(request._request.actor, window)
        return Response(
            {
                "window": window,
                "models": [
                    {
                        "name": r["name"],
                        "display_name": r["display_name"],
                        "provider": r["provider"],
                        "modality": r["modality"],
                        "context_window": r["context_window"],
                        "currency": r["currency"],
                        "price_per_mtok": _per_mtok(r["price"]),
                        "list_price_per_mtok": _per_mtok(r["list_price"]),
                        "negotiated": r["negotiated"],
                        "figures": _figures(r),
                    }
                    for r in rows
                ],
            }
        )
